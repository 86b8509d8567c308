package plan

import "testing"

// TestHeadKindPredicates is the plan side's table of the head kinds: what
// each predicate of HeadKind says of it. A new kind adds its row.
func TestHeadKindPredicates(t *testing.T) {
	type row struct{ keyed, source, onePartition, userTopic, passthrough bool }
	for k, want := range map[HeadKind]row{
		HeadImpulse:     {source: true, onePartition: true, passthrough: true},
		HeadGroupByKey:  {keyed: true},
		HeadReshuffle:   {passthrough: true},
		HeadFlatten:     {passthrough: true},
		HeadSideInputs:  {passthrough: true},
		HeadStateful:    {keyed: true},
		HeadTestStream:  {source: true, onePartition: true},
		HeadKafkaSource: {source: true, userTopic: true},
		HeadSplittable:  {},
	} {
		got := row{k.Keyed(), k.Source(), k.OnePartition(), k.UserTopic(), k.Passthrough()}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", k, got, want)
		}
	}
}

package plan

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

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

// TestPurgedInput: a stage's input topic is purged after its commits when
// it is internal and the stage does something with its records; a user's
// topic, and the topic of a stage that only consumes it (its output read
// by nothing: the only trace of that branch, read from outside as the
// job's output), never (issue 23).
func TestPurgedInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Stage
		want bool
	}{
		{"GroupByKey with transforms", Stage{Head: HeadGroupByKey, Transforms: []string{"t1"}}, true},
		{"Reshuffle writing on", Stage{Head: HeadReshuffle, Outputs: []Output{{PCollection: "p", Topics: []string{"x"}}}}, true},
		{"Impulse writing a Kafka sink", Stage{Head: HeadImpulse, KafkaSinks: []KafkaSink{{Topic: "sink"}}}, true},
		{"Reshuffle read by nothing", Stage{Head: HeadReshuffle}, false},
		{"GroupByKey read by nothing", Stage{Head: HeadGroupByKey}, false},
		{"Kafka source (a user's topic)", Stage{Head: HeadKafkaSource, Transforms: []string{"t1"}, Outputs: []Output{{PCollection: "p"}}}, false},
	} {
		if got := tc.s.PurgedInput(); got != tc.want {
			t.Errorf("%s: PurgedInput() = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A planned pipeline ending in a Reshuffle, as the tests' and
	// cmd/commitactivity's output topics are: its last stage fuses
	// nothing, and only it keeps its topic.
	p, s := beam.NewPipelineWithRoot()
	_ = beam.Reshuffle(s, beam.ParDo(s, toUpper, beam.Reshuffle(s, beam.Create(s, "a", "b"))))
	pl, err := Build(marshal(t, p), opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range pl.Stages {
		got = append(got, fmt.Sprintf("%s %v", st.Name, st.PurgedInput()))
	}
	if want := []string{"s0-Impulse true", "s1-Reshuffle true", "s2-Reshuffle_1 false"}; !reflect.DeepEqual(got, want) {
		t.Errorf("PurgedInput of the planned stages: %v, want %v", got, want)
	}
}

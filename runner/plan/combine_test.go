package plan

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
)

// combinePipeline: strings keyed by themselves with their length, summed
// per key (stats.SumPerKey) and averaged globally (stats.Mean: a
// CombineGlobally with a {sum, count} accumulator), both in fixed windows
// of size if size > 0, each result reshuffled.
func combinePipeline(size time.Duration, opts ...beam.WindowIntoOption) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, pairLen, beam.Create(s, "a", "bb", "a"))
	if size > 0 {
		kv = beam.WindowInto(s, window.NewFixedWindows(size), kv, opts...)
	} else if len(opts) > 0 {
		kv = beam.WindowInto(s, window.NewGlobalWindows(), kv, opts...)
	}
	_ = beam.Reshuffle(s, stats.SumPerKey(s, kv))
	_ = beam.Reshuffle(s, stats.Mean(s, beam.DropKey(s, kv)))
	return p
}

// TestCombineLifted: each CombinePerKey becomes a precombine fused after
// its input's producer, a GroupByKey stage reading KV<K, A> and the merge
// and extract fused after its head; the old expansion is gone.
func TestCombineLifted(t *testing.T) {
	pp := marshal(t, combinePipeline(0))
	// The expansion the lift replaces, and the PCollections made in it
	// (the grouped values; the composite's output stays).
	old := map[string]bool{}
	oldPCs := map[string]bool{}
	for _, tr := range pp.GetComponents().GetTransforms() {
		if tr.GetSpec().GetUrn() == URNCombinePerKey {
			for _, sub := range tr.GetSubtransforms() {
				old[sub] = true
				for _, pc := range pp.GetComponents().GetTransforms()[sub].GetOutputs() {
					oldPCs[pc] = true
				}
			}
			delete(oldPCs, sortedValues(tr.GetOutputs())[0])
		}
	}
	if len(old) != 4 || len(oldPCs) != 2 {
		t.Fatalf("want two GroupByKeys and two combine ParDos in the expansions, got %v making %v", old, oldPCs)
	}
	pl, err := Build(pp, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := describe(pl)
	want := "s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn plan.pairLen beam.dropKeyFn stats.Mean/beam.addFixedKeyFn stats.Mean/CombinePerKey/Precombine stats.SumPerKey/CombinePerKey/Precombine] out=[app-s3-stats.SumPerKey_CombinePerKey_GroupByKey][1] out=[app-s1-stats.Mean_CombinePerKey_GroupByKey][1]\n" +
		"s1-stats.Mean_CombinePerKey_GroupByKey head=group_by_key parts=4 up=[s0-Impulse] fused=[stats.Mean/CombinePerKey/MergeAccumulators stats.Mean/CombinePerKey/ExtractOutputs stats.Mean/beam.dropKeyFn] out=[app-s2-Reshuffle_1][1]\n" +
		"s2-Reshuffle_1 head=reshuffle parts=4 up=[s1-stats.Mean_CombinePerKey_GroupByKey] fused=[] \n" +
		"s3-stats.SumPerKey_CombinePerKey_GroupByKey head=group_by_key parts=4 up=[s0-Impulse] fused=[stats.SumPerKey/CombinePerKey/MergeAccumulators stats.SumPerKey/CombinePerKey/ExtractOutputs] out=[app-s4-Reshuffle][1]\n" +
		"s4-Reshuffle head=reshuffle parts=4 up=[s3-stats.SumPerKey_CombinePerKey_GroupByKey] fused=[] \n"
	if strings.ReplaceAll(got, " \n", "\n") != strings.ReplaceAll(want, " \n", "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", got, want)
	}
	comps := pp.GetComponents()
	lifted := liftCombines(pp)
	if len(lifted) != 2 {
		t.Fatalf("lifted %v, want both composites", lifted)
	}
	for _, tid := range lifted {
		ids := liftedIDsOf(tid)
		var s *Stage
		for _, st := range pl.Stages {
			if st.HeadTransform == ids.gbk {
				s = st
			}
		}
		if s == nil {
			t.Fatalf("no stage has head %s:\n%s", ids.gbk, describe(pl))
		}
		cp := &pipepb.CombinePayload{}
		if err := unmarshal(comps.GetTransforms()[tid].GetSpec().GetPayload(), cp); err != nil {
			t.Fatal(err)
		}
		acc := cp.GetAccumulatorCoderId()
		in := comps.GetPcollections()[sortedValues(comps.GetTransforms()[tid].GetInputs())[0]]
		key := comps.GetCoders()[in.GetCoderId()].GetComponentCoderIds()[0]
		// Shapes: LIFTED and MERGED are KV(K, A), GROUPED KV(K, Iterable(A)).
		coder := func(pc string) string {
			c := comps.GetCoders()[comps.GetPcollections()[pc].GetCoderId()]
			return fmt.Sprint(c.GetSpec().GetUrn(), c.GetComponentCoderIds())
		}
		if got, want := coder(ids.lifted), fmt.Sprint(urnCoderKV, []string{key, acc}); got != want {
			t.Errorf("%s: lifted coder %s, want %s", s.Name, got, want)
		}
		if got, want := coder(ids.merged), fmt.Sprint(urnCoderKV, []string{key, acc}); got != want {
			t.Errorf("%s: merged coder %s, want %s", s.Name, got, want)
		}
		if got, want := coder(ids.grouped), fmt.Sprint(urnCoderKV, []string{key, ids.iterAcc}); got != want {
			t.Errorf("%s: grouped coder %s, want %s", s.Name, got, want)
		}
		if c := comps.GetCoders()[ids.iterAcc]; c.GetSpec().GetUrn() != urnCoderIterable || !slices.Equal(c.GetComponentCoderIds(), []string{acc}) {
			t.Errorf("%s: Iterable(A) coder %v", s.Name, c)
		}
		if s.HeadTransform != ids.gbk || s.HeadOutput != ids.grouped || !slices.Equal(s.Transforms[:2], []string{ids.merge, ids.extract}) {
			t.Errorf("%s: head %s -> %s, fused %v; want %s -> %s, then %s %s", s.Name, s.HeadTransform, s.HeadOutput, s.Transforms, ids.gbk, ids.grouped, ids.merge, ids.extract)
		}
		if !slices.Contains(pl.Stages[0].Transforms, ids.precombine) {
			t.Errorf("precombine %s not fused in %s: %v", ids.precombine, pl.Stages[0].Name, pl.Stages[0].Transforms)
		}
		if !slices.ContainsFunc(pl.Stages[0].Outputs, func(o Output) bool { return o.PCollection == ids.lifted && o.Topics[0] == s.InputTopic }) {
			t.Errorf("the lifted PCollection %s does not go to %s: %+v", ids.lifted, s.InputTopic, pl.Stages[0].Outputs)
		}
		for _, id := range ids.transforms() {
			if e := comps.GetTransforms()[id].GetEnvironmentId(); (e == "") != (id == ids.gbk) {
				t.Errorf("transform %s: environment %q", id, e)
			}
		}
	}
	// The old expansion and its grouped PCollections are gone.
	for id := range old {
		if _, ok := comps.GetTransforms()[id]; ok {
			t.Errorf("old expansion transform %s is still there", id)
		}
	}
	for id := range oldPCs {
		if _, ok := comps.GetPcollections()[id]; ok {
			t.Errorf("old grouped PCollection %s is still there", id)
		}
	}
}

// TestCombineLiftIsDeterministic: the same pipeline marshalled again plans
// byte-identically, and so does a second Build of the already lifted proto;
// Diff names a lifted against an unlifted plan of the same pipeline.
func TestCombineLiftIsDeterministic(t *testing.T) {
	var first []byte
	for i := 0; i < 10; i++ {
		pp := marshal(t, combinePipeline(time.Minute))
		if i%2 == 1 {
			slices.Reverse(pp.RootTransformIds)
		}
		for j := 0; j < 2; j++ { // j == 1: pp is lifted already
			pl, err := Build(pp, opts)
			if err != nil {
				t.Fatal(err)
			}
			enc, _ := pl.Encode()
			if first == nil {
				first = enc
			} else if string(enc) != string(first) {
				t.Fatalf("run %d.%d planned differently:\n%s\nvs\n%s", i, j, enc, first)
			}
		}
	}
	lifted, err := Decode(first)
	if err != nil {
		t.Fatal(err)
	}
	unlifted, err := Build(marshal(t, combinePipeline(time.Minute, beam.Trigger(trigger.AfterEndOfWindow().EarlyFiring(trigger.AfterCount(2))))), opts)
	if err != nil {
		t.Fatal(err)
	}
	err = Diff(lifted, unlifted)
	if !errors.Is(err, ErrPlanMismatch) || !strings.Contains(err.Error(), "Precombine") || !strings.Contains(err.Error(), URNCombinePerKeyPrecombine) {
		t.Fatalf("want a mismatch naming the precombine, got %v", err)
	}
}

// TestCombineFallsBackUnlifted: a combine whose lifting could change its
// result, or whose lift would collide, keeps the SDK's expansion (a
// GroupByKey of the values and the combine ParDo).
func TestCombineFallsBackUnlifted(t *testing.T) {
	unlifted := func(t *testing.T, pp *pipepb.Pipeline, why string) {
		t.Helper()
		for _, tid := range slices.Sorted(maps.Keys(pp.GetComponents().GetTransforms())) {
			tr := pp.GetComponents().GetTransforms()[tid]
			if tr.GetSpec().GetUrn() != URNCombinePerKey {
				continue
			}
			ok, reason := liftable(tid, tr, pp.GetComponents())
			if ok || !strings.Contains(reason, why) {
				t.Errorf("composite %s %q: liftable=%v (%s), want not, because of %q", tid, tr.GetUniqueName(), ok, reason, why)
			}
		}
		pl, err := Build(pp, opts)
		if err != nil {
			t.Fatal(err)
		}
		d := describe(pl)
		if strings.Contains(d, "Precombine") || !strings.Contains(d, "stats.SumPerKey/CombinePerKey/stats.sumIntFn") {
			t.Errorf("want the unlifted expansion:\n%s", d)
		}
		if l := liftCombines(pp); len(l) != 0 {
			t.Errorf("lifted %v", l)
		}
	}
	t.Run("element count trigger", func(t *testing.T) {
		// An AfterCount(2) early firing would count accumulators, not values.
		unlifted(t, marshal(t, combinePipeline(time.Minute, beam.Trigger(trigger.AfterEndOfWindow().EarlyFiring(trigger.AfterCount(2))))), "element counts")
	})
	t.Run("earliest in pane", func(t *testing.T) {
		pp := marshal(t, combinePipeline(time.Minute))
		for _, ws := range pp.GetComponents().GetWindowingStrategies() {
			ws.OutputTime = pipepb.OutputTime_EARLIEST_IN_PANE
		}
		unlifted(t, pp, "output time")
	})
	t.Run("id taken", func(t *testing.T) {
		pp := marshal(t, combinePipeline(0))
		for tid, tr := range pp.GetComponents().GetTransforms() {
			if tr.GetSpec().GetUrn() == URNCombinePerKey {
				pp.Components.Pcollections[liftedIDsOf(tid).merged] = &pipepb.PCollection{UniqueName: "taken"}
			}
		}
		unlifted(t, pp, "is taken")
	})
}

// TestCombineSessionsLift: merging windows lift too (the GroupByKey merges
// the windows, MergeAccumulators their accumulators).
func TestCombineSessionsLift(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kv := beam.WindowInto(s, window.NewSessions(time.Minute), beam.ParDo(s, pairLen, beam.Create(s, "a")))
	_ = beam.Reshuffle(s, stats.SumPerKey(s, kv))
	pp := marshal(t, p)
	pl, err := Build(pp, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(describe(pl), "stats.SumPerKey/CombinePerKey/Precombine") {
		t.Fatalf("sessions: want a lifted combine:\n%s", describe(pl))
	}
}

func TestLiftableTrigger(t *testing.T) {
	def := &pipepb.Trigger{Trigger: &pipepb.Trigger_Default_{Default: &pipepb.Trigger_Default{}}}
	count := &pipepb.Trigger{Trigger: &pipepb.Trigger_ElementCount_{ElementCount: &pipepb.Trigger_ElementCount{ElementCount: 1}}}
	always := &pipepb.Trigger{Trigger: &pipepb.Trigger_Always_{Always: &pipepb.Trigger_Always{}}}
	pt := &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterProcessingTime_{AfterProcessingTime: &pipepb.Trigger_AfterProcessingTime{}}}
	eow := func(early, late *pipepb.Trigger) *pipepb.Trigger {
		return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEndOfWindow_{AfterEndOfWindow: &pipepb.Trigger_AfterEndOfWindow{EarlyFirings: early, LateFirings: late}}}
	}
	repeat := func(sub *pipepb.Trigger) *pipepb.Trigger {
		return &pipepb.Trigger{Trigger: &pipepb.Trigger_Repeat_{Repeat: &pipepb.Trigger_Repeat{Subtrigger: sub}}}
	}
	any := func(subs ...*pipepb.Trigger) *pipepb.Trigger {
		return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterAny_{AfterAny: &pipepb.Trigger_AfterAny{Subtriggers: subs}}}
	}
	all := func(subs ...*pipepb.Trigger) *pipepb.Trigger {
		return &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterAll_{AfterAll: &pipepb.Trigger_AfterAll{Subtriggers: subs}}}
	}
	for _, tc := range []struct {
		name string
		tr   *pipepb.Trigger
		want bool
	}{
		{"nil", nil, true},
		{"default", def, true},
		{"processing time", pt, true},
		{"end of window", eow(nil, nil), true},
		{"end of window, early processing time", eow(repeat(pt), nil), true},
		{"end of window, late count", eow(nil, count), false},
		{"element count", count, false},
		{"always", always, false},
		{"repeat count", repeat(count), false},
		{"any of processing time", any(pt, def), true},
		{"any with a count", any(pt, count), false},
		{"all (Python refuses)", all(pt), false},
	} {
		if got := liftableTrigger(tc.tr); got != tc.want {
			t.Errorf("%s: liftable %v, want %v", tc.name, got, tc.want)
		}
	}
}

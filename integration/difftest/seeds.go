package difftest

import (
	"fmt"
	"sort"
)

// MakeTestSeeds are the seeds `make test` runs (TestDifferential without
// KAFKASTREAMS_DIFFTEST_N, _MINUTES, _SEED or _SPEC), under
// DefaultOptions: picked greedily (PickSeeds over seeds 1-599) so that,
// together, they have every feature Features names in those seeds, with
// few steps. A change to Generate changes what a seed builds:
// TestMakeTestSeedsCover then fails and prints a new pick.
var MakeTestSeeds = []int64{158, 156, 100, 368, 270, 504}

// Features names what sp exercises, for choosing seeds that together
// cover the generator: each step kind, window kind (of a WindowInto),
// trigger kind (at any depth), sink mode with its accumulation mode; a
// TestStream with elements behind the watermark; allowed lateness; the
// stateful DoFn's sticky clear; a non-default trigger on session windows;
// and an aggregation under a repeating data-driven trigger over 3 or more
// TestStream segments, accumulating ("many-panes/acc") or not.
func Features(sp Spec) []string {
	f := map[string]bool{}
	for _, src := range sp.Sources {
		if !src.TestStream {
			continue
		}
		wm := int64(-1)
		for _, e := range src.Events {
			if e.Watermark {
				wm = e.TsMillis
			} else if e.TsMillis < wm {
				f["late-element"] = true
			}
		}
	}
	var trig func(t Trigger)
	trig = func(t Trigger) {
		f["trigger/"+t.Kind] = true
		for _, s := range t.Subs {
			trig(s)
		}
		if t.Early != nil {
			trig(*t.Early)
		}
		if t.Late != nil {
			trig(*t.Late)
		}
	}
	for j, st := range sp.Steps {
		f["step/"+st.Kind] = true
		if st.Kind == StepState && st.B > 0 {
			f["state-clear"] = true
		}
		if w := st.Window; w != nil {
			f["window/"+w.Kind] = true
			trig(w.Trigger)
			if w.LatenessMs > 0 {
				f["lateness"] = true
			}
			if w.Kind == "sessions" && w.Trigger.Kind != "default" {
				f["session-trigger"] = true
			}
		}
		if !aggregates(st.Kind) {
			continue
		}
		w := windowOf(sp, st.In[0])
		if w.Trigger.Kind == "default" || w.Trigger.Kind == "never" || !repeats(w.Trigger) {
			continue
		}
		for src := range sourcesOf(sp, len(sp.Sources)+j) {
			segs := 0
			for _, e := range sp.Sources[src].Events {
				if e.Watermark {
					segs++
				}
			}
			if sp.Sources[src].TestStream && segs >= 3 {
				f[fmt.Sprintf("many-panes/acc=%v", w.Accumulate)] = true
			}
		}
	}
	for _, s := range sp.Sinks {
		f[fmt.Sprintf("sink/%s/acc=%v", s.Mode, s.Accumulate)] = true
	}
	var out []string
	for k := range f {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// PickSeeds returns seeds from candidates that together have every
// feature (Features under o) any candidate has: greedily, the seed adding
// the most features not yet had, on a tie the one with fewer steps and
// sources' events (a faster run), then the smaller seed.
func PickSeeds(candidates []int64, o Options) []int64 {
	feats := map[int64][]string{}
	cost := map[int64]int{}
	all := map[string]bool{}
	for _, s := range candidates {
		sp := Generate(s, o)
		feats[s] = Features(sp)
		cost[s] = 10 * len(sp.Steps)
		for _, src := range sp.Sources {
			cost[s] += len(src.Events)
		}
		for _, f := range feats[s] {
			all[f] = true
		}
	}
	have := map[string]bool{}
	var out []int64
	for len(have) < len(all) {
		best, bestN := int64(0), 0
		for _, s := range candidates {
			n := 0
			for _, f := range feats[s] {
				if !have[f] {
					n++
				}
			}
			if n > bestN || n == bestN && n > 0 && cost[s] < cost[best] {
				best, bestN = s, n
			}
		}
		out = append(out, best)
		for _, f := range feats[best] {
			have[f] = true
		}
	}
	return out
}

package difftest

import (
	"fmt"
	"math"
)

// span is a window [Start, End) in ms; Merging: a session's proto-window,
// which the window of any pane that holds its element overlaps.
type span struct {
	Start, End int64
	Merging    bool
}

// covers reports whether an output line's window (as dtFormat prints it)
// is one s leaves open: s itself, or for a session any window overlapping
// it. The global window never expires: never covered.
func (s span) covers(win string) bool {
	var a, b int64
	if _, err := fmt.Sscanf(win, "[%d,%d)", &a, &b); err != nil {
		return false
	}
	if s.Merging {
		return a < s.End && s.Start < b
	}
	return a == s.Start && b == s.End
}

// expiredSpans returns the windows of sink PC pc's output that an
// aggregation upstream of it sees an element of after the window expired:
// a TestStream element at t behind the watermark wm it arrives at (the
// source's last advance before it), in a window W of the aggregation's
// windowing with
//
//	W.MaxTimestamp() + allowedLateness < wm
//
// This runner drops such an element, as the Beam model says (Java's
// LateDataDroppingDoFnRunner: the garbage-collection time before the input
// watermark; stage/gbk Core.Add). Prism keeps it whenever its aggregation's
// output watermark is still at or before W's garbage-collection time
// (aggregateStageKind.addPending compares with the stage's output
// watermark, and its input watermark is held by its own buffered elements,
// such as a window waiting for AfterCount): seed 492831498, see
// Exclusions. Derived from the Spec alone, so a shrunk Spec gets its own.
func expiredSpans(sp Spec, pc int) []span {
	nSrc := len(sp.Sources)
	var out []span
	seen := map[int]bool{}
	var walk func(i int)
	walk = func(i int) {
		if seen[i] || i < nSrc || i >= nSrc+len(sp.Steps) {
			return
		}
		seen[i] = true
		st := sp.Steps[i-nSrc]
		if aggregates(st.Kind) {
			w := windowOf(sp, st.In[0])
			for src := range sourcesOf(sp, i) {
				out = append(out, expiredIn(sp.Sources[src], w, w.LatenessMs)...)
				if closesOnTime(w.Trigger) {
					out = append(out, expiredIn(sp.Sources[src], w, 0)...)
				}
			}
		}
		for _, in := range st.In {
			walk(in)
		}
	}
	walk(pc)
	return out
}

// windowOf is the windowing of PCollection pc: that of the last WindowInto
// on its main input's path (an aggregation keeps its input's windows), the
// global window for a source.
func windowOf(sp Spec, pc int) WindowSpec {
	for pc >= len(sp.Sources) {
		st := sp.Steps[pc-len(sp.Sources)]
		if st.Kind == StepWindow && st.Window != nil {
			return *st.Window
		}
		pc = st.In[0]
	}
	return defaultWin
}

// sourcesOf returns the sources PCollection pc derives from.
func sourcesOf(sp Spec, pc int) map[int]bool {
	out := map[int]bool{}
	var walk func(i int)
	walk = func(i int) {
		if i < len(sp.Sources) {
			out[i] = true
			return
		}
		for _, in := range sp.Steps[i-len(sp.Sources)].In {
			walk(in)
		}
	}
	walk(pc)
	return out
}

// closesOnTime reports whether t finishes at its ON_TIME firing:
// AfterEndOfWindow() with early firings and no late ones. The model then
// closes the window: Java's AfterWatermarkEarlyAndLate finishes without a
// late trigger, and ReduceFnRunner drops what a closed window gets
// (droppedDueToClosedWindow); this runner too. Prism keeps adding late
// elements to it (seeds 274643408, 274643902), so a window a late element
// reaches after the watermark passed its end is, under such a trigger, not
// compared on either side (expiredSpans with lateness 0), where the
// model's pane depends on whether that element came in the bundle of the
// ON_TIME firing or after.
func closesOnTime(t Trigger) bool {
	return t.Kind == "eow" && t.Early != nil && t.Late == nil
}

// expiredIn returns the windows of w that an element of src arrives in
// after their max timestamp plus lateness (ms) is behind the watermark:
// expired for w.LatenessMs (see expiredSpans), closed by a trigger that
// finished on time for 0 (see closesOnTime).
func expiredIn(src Source, w WindowSpec, lateness int64) []span {
	if !src.TestStream || w.Kind == "global" {
		return nil
	}
	var out []span
	wm := int64(math.MinInt64)
	for _, e := range src.Events {
		if e.Watermark {
			wm = max(wm, e.TsMillis)
			continue
		}
		for _, s := range assign(w, e.TsMillis) {
			if s.End-1+lateness < wm {
				out = append(out, s)
			}
		}
	}
	return out
}

// assign returns the windows of w an element at t (ms, >= 0) is in: the
// Go SDK's fixed and sliding windows (offset 0), a session's proto-window
// [t, t+gap).
func assign(w WindowSpec, t int64) []span {
	switch w.Kind {
	case "fixed":
		s := t - t%w.SizeMs
		return []span{{Start: s, End: s + w.SizeMs}}
	case "sliding":
		var out []span
		for s := t - t%w.PeriodMs; s > t-w.SizeMs; s -= w.PeriodMs {
			out = append(out, span{Start: s, End: s + w.SizeMs})
		}
		return out
	case "sessions":
		return []span{{Start: t, End: t + w.SizeMs, Merging: true}}
	}
	return nil
}

package difftest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Observe reduces the output lines of a run of sp (dtFormat's) to what
// the Beam model fixes, per sink mode: ModeExact keeps each line;
// ModeTotal keeps, per sink, key and window, the sum of the values
// (discarding) or the greatest (accumulating), without timestamps or pane
// infos; ModeWindows keeps which sinks, keys and windows had output. In
// every mode, the rules where Prism departs from the model apply
// (prismMode, sessionPanes, earlySideOpen: a sink whose elements an early
// side-input read may change is left out), and a line whose window an
// element reached after the window expired (expiredSpans: Prism may keep
// the element, the model drops it) is left out. The result is sorted: two runs agree when their
// observations are equal. A line that does not parse, or names a sink sp
// does not have, is an error.
func Observe(sp Spec, lines []string) ([]string, error) {
	modes := map[string]Sink{}
	expired := map[string][]span{}
	openPane := map[string]bool{}
	leftOut := map[string]bool{}
	for _, s := range sp.Sinks {
		name := fmt.Sprintf("s%d", s.PC)
		modes[name] = prismMode(sp, s)
		expired[name] = expiredSpans(sp, s.PC)
		openPane[name] = sessionPanes(sp, s.PC)
		_, leftOut[name] = earlySideOpen(sp, s.PC)
	}
	type kw struct{ sink, key, win string }
	totals := map[kw]int{}
	var out []string
	for _, l := range lines {
		f := strings.Split(l, "|")
		if len(f) != 6 {
			return nil, fmt.Errorf("difftest: output line %q: want 6 fields", l)
		}
		sk, ok := modes[f[0]]
		if !ok {
			return nil, fmt.Errorf("difftest: output line %q: no sink %s", l, f[0])
		}
		v, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("difftest: output line %q: value: %v", l, err)
		}
		if leftOut[f[0]] || slices.ContainsFunc(expired[f[0]], func(s span) bool { return s.covers(f[3]) }) {
			continue
		}
		k := kw{f[0], f[1], f[3]}
		switch sk.Mode {
		case ModeExact:
			if sk.OpenLast && strings.HasPrefix(f[5], "ON_TIME/") {
				l = strings.Replace(l, "/last=true", "/last=?", 1)
				l = strings.Replace(l, "/last=false", "/last=?", 1)
			}
			if openPane[f[0]] {
				f[5] = "pane=?"
				l = strings.Join(f, "|")
			}
			out = append(out, l)
		case ModeTotal:
			if sk.Accumulate {
				totals[k] = max(totals[k], v)
			} else {
				totals[k] += v
			}
		case ModeWindows:
			totals[k] = 0
		default:
			return nil, fmt.Errorf("difftest: sink %s: unknown mode %q", f[0], sk.Mode)
		}
	}
	for k, v := range totals {
		if modes[k.sink].Mode == ModeWindows {
			out = append(out, fmt.Sprintf("%s|%s|%s has output", k.sink, k.key, k.win))
		} else {
			out = append(out, fmt.Sprintf("%s|%s|%s total=%d", k.sink, k.key, k.win, v))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ErrNothingObserved is Observed's error: a run of a seed observed no line
// at all, so the comparison of the two runs could not fail.
var ErrNothingObserved = errors.New("difftest: nothing observed")

// Observed checks that each of two runs' observations (Observe's, Prism's
// a and this runner's b) has at least one line: two empty observations are
// equal whatever the runners did (every sink left out, or every element
// dropped on both sides), so a seed that observes nothing on a side is not
// a pass. The error wraps ErrNothingObserved and says which side was
// empty. Generate makes no Spec whose sinks Observe all leaves out
// (TestObservedGenerated).
func Observed(a, b []string) error {
	var empty []string
	if len(a) == 0 {
		empty = append(empty, "Prism")
	}
	if len(b) == 0 {
		empty = append(empty, "kafkastreams")
	}
	if len(empty) == 0 {
		return nil
	}
	return fmt.Errorf("%w on %s (%d lines on Prism, %d on kafkastreams): the comparison cannot fail", ErrNothingObserved, strings.Join(empty, " and "), len(a), len(b))
}

// Diff returns the lines of the multisets a and b (sorted) that are in
// one only, as "-line" (a only) and "+line" (b only); empty when equal.
func Diff(a, b []string) []string {
	count := map[string]int{}
	for _, l := range a {
		count[l]--
	}
	for _, l := range b {
		count[l]++
	}
	var out []string
	for l, n := range count {
		for ; n < 0; n++ {
			out = append(out, "-"+l)
		}
		for ; n > 0; n-- {
			out = append(out, "+"+l)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][1:] != out[j][1:] {
			return out[i][1:] < out[j][1:]
		}
		return out[i] < out[j]
	})
	return out
}

// Shrink returns Specs smaller than sp, each one change away: a sink
// dropped, a step or source (and what reads it) dropped, a step bypassed
// (its readers read its input), a source's element or watermark advance
// dropped. A
// shrinker keeps the first whose difference persists and shrinks again.
// Each returned Spec builds if sp does.
func Shrink(sp Spec) []Spec {
	var out []Spec
	if len(sp.Sinks) > 1 {
		for i := range sp.Sinks {
			c := clone(sp)
			c.Sinks = append(c.Sinks[:i:i], c.Sinks[i+1:]...)
			out = append(out, c)
		}
	}
	n := len(sp.Sources) + len(sp.Steps)
	for pc := n - 1; pc >= 0; pc-- {
		if c, ok := dropPC(sp, pc); ok {
			out = append(out, c)
		}
	}
	for j := len(sp.Steps) - 1; j >= 0; j-- {
		if c, ok := bypass(sp, j); ok {
			out = append(out, c)
		}
	}
	for i, src := range sp.Sources {
		for j := range src.Events {
			c := clone(sp)
			evs := c.Sources[i].Events
			c.Sources[i].Events = append(evs[:j:j], evs[j+1:]...)
			if hasElement(c.Sources[i].Events) {
				out = append(out, c)
			}
		}
	}
	return out
}

// bypass removes step j, its readers (and sinks) reading its first input
// instead; false for a step whose removal would leave no sink.
func bypass(sp Spec, j int) (Spec, bool) {
	nSrc := len(sp.Sources)
	pc := nSrc + j
	from := sp.Steps[j].In[0]
	re := func(i int) int {
		switch {
		case i == pc:
			return from
		case i > pc:
			return i - 1
		}
		return i
	}
	c := clone(sp)
	c.Steps = nil
	for k, st := range sp.Steps {
		if k == j {
			continue
		}
		st2 := st
		st2.In = nil
		for _, in := range st.In {
			st2.In = append(st2.In, re(in))
		}
		c.Steps = append(c.Steps, st2)
	}
	c.Sinks = nil
	seen := map[int]bool{}
	for _, s := range sp.Sinks {
		s.PC = re(s.PC)
		if !seen[s.PC] {
			seen[s.PC] = true
			c.Sinks = append(c.Sinks, s)
		}
	}
	return c, len(c.Sinks) > 0
}

func hasElement(evs []Event) bool {
	for _, e := range evs {
		if !e.Watermark {
			return true
		}
	}
	return false
}

// dropPC removes PCollection pc and everything that reads it (directly or
// not), renumbering the rest; false if nothing with a sink would be left.
func dropPC(sp Spec, pc int) (Spec, bool) {
	nSrc := len(sp.Sources)
	gone := map[int]bool{pc: true}
	for j, st := range sp.Steps {
		for _, in := range st.In {
			if gone[in] {
				gone[nSrc+j] = true
			}
		}
	}
	if pc < nSrc && nSrc == 1 {
		return Spec{}, false
	}
	renum := map[int]int{}
	next := 0
	for i := 0; i < nSrc+len(sp.Steps); i++ {
		if !gone[i] {
			renum[i] = next
			next++
		}
	}
	c := Spec{Seed: sp.Seed, OnePartition: sp.OnePartition}
	for i, src := range sp.Sources {
		if !gone[i] {
			c.Sources = append(c.Sources, cloneSource(src))
		}
	}
	if len(c.Sources) == 0 {
		return Spec{}, false
	}
	for j, st := range sp.Steps {
		if gone[nSrc+j] {
			continue
		}
		st2 := st
		st2.In = nil
		for _, in := range st.In {
			st2.In = append(st2.In, renum[in])
		}
		c.Steps = append(c.Steps, st2)
	}
	for _, s := range sp.Sinks {
		if !gone[s.PC] {
			s.PC = renum[s.PC]
			c.Sinks = append(c.Sinks, s)
		}
	}
	// A dropped PCollection's sole reader is now unread: observe it, so
	// that the change is one step, not a whole branch.
	if len(c.Sinks) == 0 {
		return Spec{}, false
	}
	return c, true
}

func cloneSource(s Source) Source {
	s.Events = append([]Event(nil), s.Events...)
	return s
}

func clone(sp Spec) Spec {
	c := sp
	c.Sources = nil
	for _, s := range sp.Sources {
		c.Sources = append(c.Sources, cloneSource(s))
	}
	c.Steps = append([]Step(nil), sp.Steps...)
	c.Sinks = append([]Sink(nil), sp.Sinks...)
	return c
}

// onTimeOnly reports whether t fires once, when the watermark passes the
// end of the window (then per late element): Default(), or
// AfterEndOfWindow() without early or late firings, which the Beam model
// makes the same trigger (Java's DefaultTrigger and AfterWatermark's
// FromEndOfWindow both fire at the end of the window and never finish).
func onTimeOnly(t Trigger) bool {
	return t.Kind == "default" || t.Kind == "eow" && t.Early == nil && t.Late == nil
}

// nearestAggs returns the input windowing of the aggregations nearest
// upstream of PCollection pc along main inputs (a side input is not
// followed: its panes do not reach pc's elements); pc's own if it is one.
func nearestAggs(sp Spec, pc int) []WindowSpec {
	nSrc := len(sp.Sources)
	var out []WindowSpec
	seen := map[int]bool{}
	var walk func(i int)
	walk = func(i int) {
		if seen[i] || i < nSrc || i >= nSrc+len(sp.Steps) {
			return
		}
		seen[i] = true
		st := sp.Steps[i-nSrc]
		if aggregates(st.Kind) {
			out = append(out, windowOf(sp, st.In[0]))
			return
		}
		in := st.In
		if st.Kind == StepSide || st.Kind == StepStateSide {
			in = in[:1]
		}
		for _, j := range in {
			walk(j)
		}
	}
	walk(pc)
	return out
}

// prismMode is the mode sink s is compared in: s.Mode, made coarser where
// Prism departs from the model and the model leaves a coarser view
// comparable (see Exclusions):
//
//   - ModeTotal (accumulating: the greatest) where the nearest aggregation
//     has an on-time-only trigger (onTimeOnly), accumulating panes and
//     allowed lateness > 0: Prism adds a closing LATE pane (seed 65077308
//     under Default(), 274643534 under AfterEndOfWindow()) or an EARLY one
//     (seed 274643683) repeating the accumulated value. Generate already
//     gives such a sink ModeTotal; this covers Specs written before.
//   - ModeWindows where s reads, along main inputs, a side input in the
//     global window that derives from an aggregation or a stateful DoFn
//     (its contents appear only as the watermark reaches the end of the
//     global window, and the model holds the main input until then): Prism
//     reads it partial or empty (seeds 274643297, 274643966).
//   - ModeWindows where s's values may differ by an early read of a side
//     input in the main input's (non-global) windows (earlySideOpen: seeds
//     274644266, 274644411).
func prismMode(sp Spec, s Sink) Sink {
	if open, _ := earlySideOpen(sp, s.PC); s.Mode != ModeWindows && (open || readsLateGlobalSide(sp, s.PC)) {
		s.Mode = ModeWindows
		return s
	}
	if s.Mode != ModeExact {
		return s
	}
	for _, w := range nearestAggs(sp, s.PC) {
		if w.LatenessMs > 0 && w.Accumulate && onTimeOnly(w.Trigger) {
			s.Mode, s.Accumulate = ModeTotal, true
		}
	}
	return s
}

// sessionPanes reports whether the pane infos of PCollection pc's lines
// are left out: the nearest aggregation upstream is on session windows
// under an on-time-only trigger. The model makes a merged session's one
// pane ON_TIME, first and last (Java's ReduceFnRunner on the watermark
// passing the merged window's end; this runner); Prism gives it the zero
// PaneInfo (EARLY, not first, not last) also with allowed lateness 0
// (seeds 274643346, 274643520; lateness > 0: seed 76, compared by total).
// The value, window and timestamp are still compared.
func sessionPanes(sp Spec, pc int) bool {
	for _, w := range nearestAggs(sp, pc) {
		if w.Kind == "sessions" && onTimeOnly(w.Trigger) {
			return true
		}
	}
	return false
}

// readsLateGlobalSide reports whether PCollection pc derives along main
// inputs from a side-input step whose side input is in the global window
// and downstream of an aggregation or a stateful DoFn (see prismMode).
func readsLateGlobalSide(sp Spec, pc int) bool {
	nSrc := len(sp.Sources)
	seen := map[int]bool{}
	var walk func(i int) bool
	walk = func(i int) bool {
		if seen[i] || i < nSrc || i >= nSrc+len(sp.Steps) {
			return false
		}
		seen[i] = true
		st := sp.Steps[i-nSrc]
		in := st.In
		if st.Kind == StepSide || st.Kind == StepStateSide {
			if windowOf(sp, st.In[1]).Kind == "global" && afterAggOrState(sp, st.In[1]) {
				return true
			}
			in = in[:1]
		}
		for _, j := range in {
			if walk(j) {
				return true
			}
		}
		return false
	}
	return walk(pc)
}

// afterAggOrState reports whether PCollection pc derives from an
// aggregation or a stateful DoFn.
func afterAggOrState(sp Spec, pc int) bool {
	if pc < len(sp.Sources) {
		return false
	}
	st := sp.Steps[pc-len(sp.Sources)]
	if aggregates(st.Kind) || st.Kind == StepState || st.Kind == StepStateSide {
		return true
	}
	for _, in := range st.In {
		if afterAggOrState(sp, in) {
			return true
		}
	}
	return false
}

// earlySide reports whether side-input step st (StepSide, StepStateSide)
// may read its side input early on Prism: the side input is in non-global
// windows (the main input's windowing) and the main input derives, through
// stateless steps, from a TestStream, an aggregation or a stateful DoFn
// (mainFromHeld).
//
// The model holds a main input element until its side input window is
// ready (Java's PushbackSideInputDoFnRunner and SideInputHandler.isReady:
// a pane of that window has arrived, or the side input's watermark passed
// the window's end; under the Default trigger the first pane is the
// ON_TIME one, so the read is complete; this runner). Prism (v2.77.0,
// runners/prism/internal/engine/elementmanager.go) never holds one: a
// stage with side inputs runs a bundle of all its pending elements
// (ordinaryStageKind.buildEventTimeBundle) once its upstream watermark
// moved and each side input's producing stage has an output watermark at
// or past that upstream watermark (bundleReady), and the bundle reads a
// non-global side input window only if the window's max timestamp is at or
// before that upstream watermark (stageState.GetSideData, called from
// stage.go's handleSideInput with the bundle's watermark); a later window
// reads as empty. So an element reaching the stage while its upstream
// watermark is still before the end of its window reads its side input
// empty: from a TestStream whose watermark stays there (seed 274644266:
// k2:14@11025 after a watermark of 1275, [10000,15000) read empty;
// checked: a watermark of 14998 reads it empty, 14999 full), or from an
// aggregation or a stateful DoFn, whose stage can hand on the output of one
// bundle while its output watermark is still held before those windows'
// ends by what else it holds (its other bundles in progress and pending
// elements, minPendingTimestampLocked; its watermark holds), the
// downstream stage being refreshed for its new data all the same
// (updateWatermarks returns consumersWithNewData when the output watermark
// does not advance): there it depends on timing (seed 274644411: the
// original pipeline read its fixed-window side input empty in 3 of 6 runs
// of Prism alone here, the hour run's minimal one in every run there and
// in none of 47 here). A Create's elements come from a stage whose one
// bundle holds the watermark at the impulse's timestamp until it persists;
// its output watermark then goes to the end of time at once, so the
// reader's bundle runs there and reads complete (12 of 12 runs here):
// compared. (With a GroupByKey between, two small pipelines read complete
// in 24 of 24 runs here, but that is the timing seed 274644411 lost.)
func earlySide(sp Spec, st Step) bool {
	if st.Kind != StepSide && st.Kind != StepStateSide {
		return false
	}
	return windowOf(sp, st.In[1]).Kind != "global" && mainFromHeld(sp, st.In[0])
}

// mainFromHeld reports whether PCollection pc derives along main inputs,
// through stateless steps, from a TestStream, an aggregation or a stateful
// DoFn (see earlySide).
func mainFromHeld(sp Spec, pc int) bool {
	nSrc := len(sp.Sources)
	if pc < nSrc {
		return sp.Sources[pc].TestStream
	}
	if pc >= nSrc+len(sp.Steps) {
		return false
	}
	st := sp.Steps[pc-nSrc]
	if aggregates(st.Kind) || st.Kind == StepState || st.Kind == StepStateSide {
		return true
	}
	in := st.In
	if st.Kind == StepSide {
		in = in[:1]
	}
	return slices.ContainsFunc(in, func(i int) bool { return mainFromHeld(sp, i) })
}

// earlySideOpen reports whether PCollection pc's values may differ on
// Prism through an early side-input read (earlySide) upstream, along main
// or side inputs (open), and whether which elements it has may differ too
// (gone): an early read gives each main element one output whose value is
// the model's or the main value alone, so keys, windows, timestamps and
// panes stay as the model's until a step whose elements depend on values
// (dtFilter, dtMap with KeyMod > 0, a stateful DoFn that clears by value,
// ClearMod > 0) reads an open PCollection. An open sink is compared by
// which keys and windows have output (prismMode), a gone one not at all
// (Observe).
func earlySideOpen(sp Spec, pc int) (open, gone bool) {
	nSrc := len(sp.Sources)
	if pc < nSrc || pc >= nSrc+len(sp.Steps) {
		return false, false
	}
	st := sp.Steps[pc-nSrc]
	main := st.In
	side := st.Kind == StepSide || st.Kind == StepStateSide
	if side {
		main = main[:1]
		if o, _ := earlySideOpen(sp, st.In[1]); o || earlySide(sp, st) {
			open = true
		}
	}
	for _, i := range main {
		o, g := earlySideOpen(sp, i)
		open, gone = open || o, gone || g
	}
	if open {
		switch {
		case st.Kind == StepFilter,
			st.Kind == StepMap && st.D > 0,
			(st.Kind == StepState || st.Kind == StepStateSide) && st.B > 0:
			gone = true
		}
	}
	return open, gone
}

package difftest

import (
	"fmt"
	"math/rand"
	"strings"
)

// Spec is one generated pipeline: sources, then steps, each step making one
// new PCollection (numbered after the sources: PCollection i is Sources[i]
// for i < len(Sources), else Steps[i-len(Sources)]), and the sinks: the
// PCollections whose elements are observed. Every PCollection is KV<string,
// int>. A Spec is plain data: Generate makes one from a seed, Shrink makes
// smaller ones, Build makes the Beam pipeline.
type Spec struct {
	Seed    int64
	Sources []Source
	Steps   []Step
	Sinks   []Sink
	// OnePartition asks the runner under test for one partition per
	// internal topic: set when a TestStream sends elements behind its
	// watermark, whose lateness downstream is otherwise up to how far the
	// other upstream tasks have got (see Exclusions).
	OnePartition bool
}

// Source is a Create (every element at once, then the end of time) or a
// TestStream (Events in order: elements at their timestamps, watermark
// advances, then the end of time).
type Source struct {
	TestStream bool
	Events     []Event
}

// Event is an element (Key, Value >= 1 at TsMillis) or, with Watermark, a
// watermark advance to TsMillis (TestStream only).
type Event struct {
	Watermark bool
	Key       string
	Value     int
	TsMillis  int64
}

// Step kinds.
const (
	StepMap       = "map"       // dtMap{A, B, C, D}
	StepFilter    = "filter"    // dtFilter{A, B}
	StepDup       = "dup"       // dtDup{A}
	StepFlatten   = "flatten"   // In[0], In[1]
	StepReshuffle = "reshuffle" // beam.Reshuffle
	StepWindow    = "window"    // beam.WindowInto(Window)
	StepGBKSum    = "gbk-sum"   // GroupByKey then dtSum
	StepGBKMax    = "gbk-max"   // GroupByKey then dtMax (an unlifted aggregation)
	StepCoGBK     = "cogbk"     // CoGroupByKey(In[0], In[1]) then dtCoSum
	StepCombine   = "combine"   // CombinePerKey(dtSumFn) (lifted)
	StepCombineF  = "combine-f" // CombinePerKey(dtAdd)
	StepSide      = "side"      // dtSide{A} over In[0] with In[1] as side input
	StepState     = "state"     // dtState{DelayMs: A, ClearMod: B, ClearRem: C}
	// StepStateSide is dtStateSide{DelayMs: A, ClearMod: B, ClearRem: C,
	// Mod: D} over In[0] with In[1] as side input (Options.StatefulSideInputs).
	StepStateSide = "state-side"
)

// Step is one transform of a Spec over the PCollections In.
type Step struct {
	Kind       string
	In         []int
	A, B, C, D int
	Window     *WindowSpec `json:",omitempty"`
}

// WindowSpec is a WindowInto: the window function, allowed lateness, the
// trigger and the accumulation mode.
type WindowSpec struct {
	Kind       string // "global", "fixed", "sliding", "sessions"
	SizeMs     int64  // fixed, sliding: size; sessions: gap
	PeriodMs   int64  // sliding
	LatenessMs int64
	Trigger    Trigger
	Accumulate bool
}

// Trigger is one of the Go SDK's triggers: Kind "default", "eow"
// (AfterEndOfWindow with Early/Late firings if set), "always", "count"
// (AfterCount(N)), "repeat" (Repeat(Subs[0])), "any", "all", "each" (over
// Subs), "orfinally" (Subs[0] or finally Subs[1]), "never".
type Trigger struct {
	Kind  string
	N     int32     `json:",omitempty"`
	Early *Trigger  `json:",omitempty"`
	Late  *Trigger  `json:",omitempty"`
	Subs  []Trigger `json:",omitempty"`
}

// Observation modes of a sink: what of its output the Beam model fixes.
const (
	// ModeExact: every line, with its window, timestamp and pane info.
	ModeExact = "exact"
	// ModeTotal: per key and window, the whole of the values over the
	// panes (discarding: their sum; accumulating: the greatest, the last
	// pane's): data-driven triggers that repeat; how the elements are cut
	// into panes is up to bundling, but each element is in the panes once.
	ModeTotal = "total"
	// ModeWindows: which keys and windows have output at all: triggers
	// that finish (AfterCount once, …), whose one pane's contents are up to
	// bundling.
	ModeWindows = "windows"
)

// Sink is a PCollection observed in mode Mode.
type Sink struct {
	PC   int
	Mode string
	// Accumulate: the panes accumulate (ModeTotal takes the greatest
	// value of a key and window, else the sum).
	Accumulate bool
	// OpenLast: the IsLast flag of an ON_TIME pane is not compared (the
	// last aggregation upstream has allowed lateness > 0: the Java runner
	// says false even when the watermark passed the end of the window and
	// its lateness at once, this runner says true, see Exclusions).
	OpenLast bool `json:",omitempty"`
}

// Options switches parts of the generator on. The zero Options leaves out
// what this runner refused before issue 14; DefaultOptions builds what
// Prism can referee of it.
type Options struct {
	// StatefulSideInputs lets a stateful DoFn read a side input (refused by
	// the runner before issue 14).
	StatefulSideInputs bool
	// SessionTriggers lets a non-default trigger be set on session windows
	// (refused by the runner before issue 14). Off in DefaultOptions: Prism
	// refuses a trigger with an element count on merging windows, and does
	// not merge the trigger state of the others (Beam issue 31438; see
	// Exclusions).
	SessionTriggers bool
}

// DefaultOptions is what TestDifferential runs unless
// KAFKASTREAMS_DIFFTEST_REFUSED=0 (the zero Options):
// StatefulSideInputs; not SessionTriggers (see Options).
func DefaultOptions() Options {
	return Options{StatefulSideInputs: true}
}

// pcInfo is what the generator knows of a PCollection.
type pcInfo struct {
	win      WindowSpec
	late     bool // may hold elements behind the watermark (TestStream)
	oneSeg   bool // every element before the watermark first moves (Create only, no aggregation)
	terminal bool // after an aggregation the model does not fix: only a sink may follow
	mode     string
	srcs     uint // bit i: derives from source i
	sideOK   bool // default trigger all the way, no late data, no merging windows
	afterAgg bool // downstream of an aggregation or a stateful DoFn
	unbound  bool // derives from a TestStream (an unbounded PCollection)
	openLast bool // an ON_TIME pane's IsLast is open (see Sink.OpenLast)
	multiSeg bool // derives from a TestStream of more than one watermark segment
}

var defaultWin = WindowSpec{Kind: "global", Trigger: Trigger{Kind: "default"}}

// Generate returns the pipeline of seed: deterministic (the same seed and
// options give the same Spec), small (1-3 sources of up to 10 elements, up
// to 8 steps), within the exclusions of Exclusions.
//
// Two seeds in five (focus) aim at how panes follow one another: the
// TestStream has 3-5 segments of 2-3 elements over the same keys, close in
// time (so one key and window gets elements in several segments, each
// segment its own bundle), and its first step is a WindowInto with a
// repeating data-driven trigger (Always, Repeat(AfterCount), early
// firings), accumulating two times in three, then an aggregation: the
// panes' totals tell accumulating from discarding. Without it, a GroupByKey
// that discarded where it should accumulate went unnoticed (few seeds had
// several panes of one key and window).
func Generate(seed int64, o Options) Spec {
	r := rand.New(rand.NewSource(seed))
	sp := Spec{Seed: seed}
	var pcs []pcInfo
	focus := r.Intn(5) < 2
	nSrc := 1 + r.Intn(3)
	ts := -1
	if focus || r.Intn(2) == 0 {
		ts = r.Intn(nSrc)
	}
	for i := 0; i < nSrc; i++ {
		src := Source{TestStream: i == ts}
		late := false
		if src.TestStream {
			src.Events, late = genTestStream(r, focus)
		} else {
			n := 1 + r.Intn(10)
			for j := 0; j < n; j++ {
				src.Events = append(src.Events, Event{Key: fmt.Sprintf("k%d", r.Intn(3)), Value: 1 + r.Intn(20), TsMillis: int64(r.Intn(60_000))})
			}
		}
		if late {
			sp.OnePartition = true
		}
		sp.Sources = append(sp.Sources, src)
		segs := 0
		for _, e := range src.Events {
			if e.Watermark {
				segs++
			}
		}
		pcs = append(pcs, pcInfo{win: defaultWin, late: late, oneSeg: !src.TestStream, mode: ModeExact, srcs: 1 << i, sideOK: !late, unbound: src.TestStream, multiSeg: src.TestStream && segs > 1})
	}
	nSteps := 1 + r.Intn(8)
	if focus {
		w := genWindow(r, o)
		for w.Kind == "sessions" && !o.SessionTriggers {
			w = genWindow(r, o)
		}
		w.Trigger = genRepeatingTrigger(r)
		w.Accumulate = r.Intn(3) != 0
		if st, info, ok := windowStep(pcs[ts], ts, w); ok {
			sp.Steps = append(sp.Steps, st)
			pcs = append(pcs, info)
			agg := []string{StepGBKSum, StepCombine, StepCombineF}[r.Intn(3)]
			if st, info, ok := genStep(r, pcs, o, len(pcs)-1, agg); ok {
				sp.Steps = append(sp.Steps, st)
				pcs = append(pcs, info)
			}
		}
	}
	for tries := 0; len(sp.Steps) < nSteps && tries < 100; tries++ {
		st, info, ok := genStep(r, pcs, o, -1, "")
		if !ok {
			continue
		}
		sp.Steps = append(sp.Steps, st)
		pcs = append(pcs, info)
		if st.Kind == StepWindow && r.Intn(3) != 0 {
			// a window is mostly there for an aggregation: the panes
			// under its trigger are what this test is about
			agg := []string{StepGBKSum, StepGBKMax, StepCombine, StepCombineF, StepCoGBK}[r.Intn(5)]
			if st, info, ok := genStep(r, pcs, o, len(pcs)-1, agg); ok {
				sp.Steps = append(sp.Steps, st)
				pcs = append(pcs, info)
			}
		}
	}
	used := make([]bool, len(pcs))
	for _, st := range sp.Steps {
		for _, in := range st.In {
			used[in] = true
		}
	}
	for i, pc := range pcs {
		if !used[i] || (i >= nSrc && r.Intn(4) == 0) {
			sp.Sinks = append(sp.Sinks, Sink{PC: i, Mode: pc.mode, Accumulate: pc.win.Accumulate, OpenLast: pc.openLast})
		}
	}
	return sp
}

// genTestStream returns random TestStream events: segments of 1-3
// elements of distinct keys, each followed by a watermark advance; and
// whether an element is behind the watermark (late). With focus: 3-5
// segments of 2-3 elements, each at most 8 s ahead of the watermark, the
// watermark moving at most 6 s a segment.
func genTestStream(r *rand.Rand, focus bool) ([]Event, bool) {
	var evs []Event
	wm := int64(0)
	late := false
	allowLate := r.Intn(2) == 0
	segs, minKeys, ahead, step := 1+r.Intn(4), 1, 20_000, 25_000
	if focus {
		segs, minKeys, ahead, step = 3+r.Intn(3), 2, 8_000, 6_000
	}
	for seg := segs; seg > 0; seg-- {
		keys := r.Perm(3)[:minKeys+r.Intn(4-minKeys)]
		for _, k := range keys {
			t := wm + int64(r.Intn(ahead))
			if allowLate && wm > 0 && r.Intn(3) == 0 {
				t = wm - 1 - int64(r.Intn(int(min(wm, 30_000))))
				late = true
			}
			evs = append(evs, Event{Key: fmt.Sprintf("k%d", k), Value: 1 + r.Intn(20), TsMillis: t})
		}
		wm += 1 + int64(r.Intn(step))
		evs = append(evs, Event{Watermark: true, TsMillis: wm})
	}
	return evs, late
}

func genWindow(r *rand.Rand, o Options) WindowSpec {
	w := WindowSpec{Trigger: Trigger{Kind: "default"}}
	switch r.Intn(4) {
	case 0:
		w.Kind = "global"
	case 1:
		w.Kind, w.SizeMs = "fixed", []int64{5_000, 10_000, 20_000}[r.Intn(3)]
	case 2:
		w.Kind, w.SizeMs, w.PeriodMs = "sliding", 20_000, []int64{5_000, 10_000}[r.Intn(2)]
	case 3:
		w.Kind, w.SizeMs = "sessions", []int64{3_000, 10_000}[r.Intn(2)]
	}
	if w.Kind != "global" && r.Intn(2) == 0 {
		w.LatenessMs = []int64{5_000, 30_000}[r.Intn(2)]
	}
	if r.Intn(3) != 0 && (w.Kind != "sessions" || o.SessionTriggers) {
		w.Trigger = genTrigger(r, 2)
	}
	w.Accumulate = r.Intn(2) == 0
	return w
}

// genRepeatingTrigger returns a data-driven trigger that fires again and
// again (repeats: the panes are compared by their total, ModeTotal):
// Always, Repeat(AfterCount(1-3)), Repeat of a random trigger, or
// AfterEndOfWindow with early firings (Always or Repeat(AfterCount)) and,
// one time in two, the same as late firings.
func genRepeatingTrigger(r *rand.Rand) Trigger {
	leaf := func() Trigger {
		if r.Intn(2) == 0 {
			return Trigger{Kind: "always"}
		}
		return Trigger{Kind: "repeat", Subs: []Trigger{{Kind: "count", N: int32(1 + r.Intn(3))}}}
	}
	switch r.Intn(4) {
	case 0:
		return Trigger{Kind: "always"}
	case 1:
		return Trigger{Kind: "repeat", Subs: []Trigger{{Kind: "count", N: int32(1 + r.Intn(3))}}}
	case 2:
		return Trigger{Kind: "repeat", Subs: []Trigger{genTrigger(r, 1)}}
	}
	e := leaf()
	t := Trigger{Kind: "eow", Early: &e}
	if r.Intn(2) == 0 {
		l := leaf()
		t.Late = &l
	}
	return t
}

func genTrigger(r *rand.Rand, depth int) Trigger {
	leaf := func() Trigger {
		if r.Intn(2) == 0 {
			return Trigger{Kind: "count", N: int32(1 + r.Intn(3))}
		}
		return Trigger{Kind: "always"}
	}
	if depth == 0 {
		return leaf()
	}
	switch r.Intn(10) {
	case 0:
		return Trigger{Kind: "default"}
	case 1:
		return Trigger{Kind: "eow"}
	case 2:
		t := Trigger{Kind: "eow"}
		e := leaf()
		t.Early = &e
		if r.Intn(2) == 0 {
			l := leaf()
			t.Late = &l
		}
		return t
	case 3:
		l := leaf()
		return Trigger{Kind: "eow", Late: &l}
	case 4:
		return Trigger{Kind: "repeat", Subs: []Trigger{genTrigger(r, depth-1)}}
	case 5:
		return Trigger{Kind: "count", N: int32(1 + r.Intn(3))}
	case 6:
		return Trigger{Kind: "always"}
	case 7:
		return Trigger{Kind: []string{"any", "all", "each"}[r.Intn(3)], Subs: []Trigger{genTrigger(r, depth-1), genTrigger(r, depth-1)}}
	case 8:
		return Trigger{Kind: "orfinally", Subs: []Trigger{genTrigger(r, depth-1), genTrigger(r, depth-1)}}
	default:
		return Trigger{Kind: "never"}
	}
}

// TriggerMode is the observation mode of an aggregation under t: what the
// Beam model fixes of its panes (see the Mode constants).
func TriggerMode(t Trigger) string {
	switch t.Kind {
	case "default", "never":
		return ModeExact
	case "eow":
		if t.Early == nil && t.Late == nil {
			return ModeExact
		}
		if t.Early != nil && !repeats(*t.Early) || t.Late != nil && !repeats(*t.Late) {
			return ModeWindows
		}
		return ModeTotal
	}
	if repeats(t) {
		return ModeTotal
	}
	return ModeWindows
}

// repeats reports whether t fires again and again (never finishes before
// the window expires).
func repeats(t Trigger) bool {
	switch t.Kind {
	case "default", "always", "repeat", "never":
		return true
	case "eow":
		return t.Late != nil && repeats(*t.Late)
	}
	return false
}

func aggregates(kind string) bool {
	switch kind {
	case StepGBKSum, StepGBKMax, StepCoGBK, StepCombine, StepCombineF:
		return true
	}
	return false
}

// genStep returns a random step over pcs and what it makes, or false when
// the pick falls outside the exclusions; of kind kind over PCollection in
// when they are not "" and -1.
func genStep(r *rand.Rand, pcs []pcInfo, o Options, in int, kind string) (Step, pcInfo, bool) {
	pick := func() (int, bool) {
		var c []int
		for i, pc := range pcs {
			if !pc.terminal {
				c = append(c, i)
			}
		}
		if len(c) == 0 {
			return 0, false
		}
		return c[r.Intn(len(c))], true
	}
	if in < 0 {
		var ok bool
		if in, ok = pick(); !ok {
			return Step{}, pcInfo{}, false
		}
	}
	pc := pcs[in]
	kinds := []string{StepMap, StepFilter, StepDup, StepFlatten, StepReshuffle, StepWindow, StepWindow, StepGBKSum, StepGBKMax, StepCoGBK, StepCombine, StepCombineF, StepSide, StepState}
	if o.StatefulSideInputs {
		kinds = append(kinds, StepStateSide)
	}
	if kind == "" {
		kind = kinds[r.Intn(len(kinds))]
	}
	st := Step{Kind: kind, In: []int{in}}
	out := pc
	switch st.Kind {
	case StepMap:
		st.A, st.B, st.C = 1+r.Intn(3), r.Intn(10), 10+r.Intn(40)
		if r.Intn(3) == 0 {
			st.D = 1 + r.Intn(3)
		}
	case StepFilter:
		st.A = 2 + r.Intn(3)
		st.B = r.Intn(st.A)
	case StepDup:
		st.A = r.Intn(3)
	case StepReshuffle:
	case StepWindow:
		return windowStep(pc, in, genWindow(r, o))
	case StepFlatten, StepCoGBK:
		other, ok := pick()
		if !ok || other == in || !sameWindowing(pcs[other].win, pc.win) {
			return Step{}, pcInfo{}, false
		}
		// Late data stays late only where the aggregation's input
		// watermark comes from the late source alone.
		if (pc.late || pcs[other].late) && pc.srcs != pcs[other].srcs {
			return Step{}, pcInfo{}, false
		}
		if st.Kind == StepCoGBK && pc.unbound != pcs[other].unbound {
			// the Go SDK refuses a CoGroupByKey of a bounded and an
			// unbounded PCollection
			return Step{}, pcInfo{}, false
		}
		st.In = append(st.In, other)
		o2 := pcs[other]
		out.unbound = pc.unbound || o2.unbound
		out.late = pc.late || o2.late
		out.oneSeg = pc.oneSeg && o2.oneSeg
		out.srcs = pc.srcs | o2.srcs
		out.sideOK = pc.sideOK && o2.sideOK
		out.afterAgg = pc.afterAgg || o2.afterAgg
		out.openLast = pc.openLast || o2.openLast
		out.multiSeg = pc.multiSeg || o2.multiSeg
		if o2.mode != ModeExact {
			out.mode = o2.mode
		}
	case StepSide, StepStateSide:
		if pc.late || pc.afterAgg && pc.win.Kind == "sessions" {
			return Step{}, pcInfo{}, false
		}
		side, ok := pick()
		if !ok || side == in || !pcs[side].sideOK || pcs[side].late {
			return Step{}, pcInfo{}, false
		}
		if pcs[side].unbound && pcs[side].win.Kind == "global" {
			// the Go SDK warns that it will refuse this (Beam issue 21596)
			return Step{}, pcInfo{}, false
		}
		if k := pcs[side].win.Kind; k != "global" && !sameWindowing(pcs[side].win, pc.win) {
			return Step{}, pcInfo{}, false
		}
		if pc.win.Kind == "sessions" {
			return Step{}, pcInfo{}, false
		}
		st.In = append(st.In, side)
		st.A = 5 + r.Intn(50)
		out.oneSeg = false
		if st.Kind == StepStateSide {
			if pc.win.Trigger.Kind != "default" || pc.mode != ModeExact {
				return Step{}, pcInfo{}, false
			}
			// a side input's contents arrive while the watermark moves:
			// no sticky clear (see dtState)
			st.D = st.A
			st.A = []int{0, 1_000, 5_000, 30_000}[r.Intn(4)]
			out.afterAgg = true
		}
	case StepState:
		// Not on merging windows (the Beam model has no state there), not
		// behind the watermark, not after a trigger other than the default.
		if pc.win.Kind == "sessions" || pc.late || pc.win.Trigger.Kind != "default" || pc.mode != ModeExact {
			return Step{}, pcInfo{}, false
		}
		st.A = []int{0, 1_000, 5_000, 30_000}[r.Intn(4)]
		if pc.oneSeg && r.Intn(2) == 0 {
			st.B = 2 + r.Intn(4)
			st.C = r.Intn(st.B)
		}
		out.oneSeg, out.afterAgg = false, true
	}
	if aggregates(st.Kind) {
		mode := TriggerMode(pc.win.Trigger)
		if pc.late && pc.win.LatenessMs > 0 && mode == ModeExact {
			// How many late panes a key and window gets is up to how the
			// late elements were bundled.
			mode = ModeTotal
		}
		if pc.win.LatenessMs > 0 && mode == ModeExact && (pc.win.Kind == "sessions" || onTimeOnly(pc.win.Trigger) && pc.win.Accumulate) {
			// Prism departs from the model here (a closing LATE pane
			// without late data, or an extra EARLY one, under Default()
			// or AfterEndOfWindow() alike; EARLY panes for merged
			// sessions, see Exclusions): compare the total only.
			mode = ModeTotal
		}
		out.openLast = pc.win.LatenessMs > 0
		if mode != ModeExact && st.Kind == StepGBKMax {
			// a max over discarding panes does not add up to the whole
			return Step{}, pcInfo{}, false
		}
		out.oneSeg, out.afterAgg = false, true
		out.mode = mode
		out.terminal = mode != ModeExact || out.late
		if pc.win.Kind == "sessions" || pc.win.Trigger.Kind != "default" {
			out.sideOK = false
		}
	}
	return st, out, true
}

// windowStep returns WindowInto(w) over PCollection in (pc) and what it
// makes, or false when that falls outside the exclusions.
func windowStep(pc pcInfo, in int, w WindowSpec) (Step, pcInfo, bool) {
	if pc.afterAgg && pc.win.Kind == "global" && w.Kind != "global" {
		// elements at the end of the global window (an aggregation's
		// output there) would get windows ending after it (seed
		// 492831374, see Exclusions)
		return Step{}, pcInfo{}, false
	}
	if w.Kind == "sessions" && pc.multiSeg {
		// Prism merges a key's sessions only within a bundle: elements of
		// one key in several segments give it overlapping sessions (seed
		// 35022680, see Exclusions)
		return Step{}, pcInfo{}, false
	}
	out := pc
	out.win = w
	out.sideOK = pc.sideOK && w.Trigger.Kind == "default" && w.Kind != "sessions"
	return Step{Kind: StepWindow, In: []int{in}, Window: &w}, out, true
}

func sameWindowing(a, b WindowSpec) bool {
	return a.Kind == b.Kind && a.SizeMs == b.SizeMs && a.PeriodMs == b.PeriodMs && a.LatenessMs == b.LatenessMs &&
		a.Accumulate == b.Accumulate && a.Trigger.String() == b.Trigger.String()
}

// String is the trigger in the Go SDK's terms.
func (t Trigger) String() string {
	subs := func() string {
		var s []string
		for _, x := range t.Subs {
			s = append(s, x.String())
		}
		return strings.Join(s, ", ")
	}
	switch t.Kind {
	case "default":
		return "Default()"
	case "never":
		return "Never()"
	case "always":
		return "Always()"
	case "count":
		return fmt.Sprintf("AfterCount(%d)", t.N)
	case "repeat":
		return "Repeat(" + subs() + ")"
	case "any":
		return "AfterAny(" + subs() + ")"
	case "all":
		return "AfterAll(" + subs() + ")"
	case "each":
		return "AfterEach(" + subs() + ")"
	case "orfinally":
		return "OrFinally(" + subs() + ")"
	case "eow":
		s := "AfterEndOfWindow()"
		if t.Early != nil {
			s += ".EarlyFiring(" + t.Early.String() + ")"
		}
		if t.Late != nil {
			s += ".LateFiring(" + t.Late.String() + ")"
		}
		return s
	}
	return "?" + t.Kind
}

// String is the window spec in the Go SDK's terms.
func (w WindowSpec) String() string {
	var s string
	switch w.Kind {
	case "global":
		s = "GlobalWindows()"
	case "fixed":
		s = fmt.Sprintf("FixedWindows(%dms)", w.SizeMs)
	case "sliding":
		s = fmt.Sprintf("SlidingWindows(%dms, %dms)", w.PeriodMs, w.SizeMs)
	case "sessions":
		s = fmt.Sprintf("Sessions(%dms)", w.SizeMs)
	}
	s += fmt.Sprintf(" lateness=%dms trigger=%s", w.LatenessMs, w.Trigger)
	if w.Accumulate {
		s += " accumulating"
	} else {
		s += " discarding"
	}
	return s
}

// String is the Spec as a small program listing: what a difference
// prints to reproduce it.
func (sp Spec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (one partition: %v)\n", sp.Seed, sp.OnePartition)
	for i, src := range sp.Sources {
		kind := "Create"
		if src.TestStream {
			kind = "TestStream"
		}
		var evs []string
		for _, e := range src.Events {
			if e.Watermark {
				evs = append(evs, fmt.Sprintf("wm=%d", e.TsMillis))
			} else {
				evs = append(evs, fmt.Sprintf("%s:%d@%d", e.Key, e.Value, e.TsMillis))
			}
		}
		fmt.Fprintf(&b, "  p%d = %s(%s)\n", i, kind, strings.Join(evs, " "))
	}
	for i, st := range sp.Steps {
		fmt.Fprintf(&b, "  p%d = %s\n", len(sp.Sources)+i, st)
	}
	for _, s := range sp.Sinks {
		fmt.Fprintf(&b, "  sink p%d (%s, accumulating=%v)\n", s.PC, s.Mode, s.Accumulate)
	}
	return b.String()
}

// String is the step in the Go SDK's terms.
func (st Step) String() string {
	in := func(i int) string { return fmt.Sprintf("p%d", st.In[i]) }
	switch st.Kind {
	case StepMap:
		return fmt.Sprintf("ParDo(dtMap{Mul:%d Add:%d Mod:%d KeyMod:%d}, %s)", st.A, st.B, st.C, st.D, in(0))
	case StepFilter:
		return fmt.Sprintf("ParDo(dtFilter{Mod:%d Rem:%d}, %s)", st.A, st.B, in(0))
	case StepDup:
		return fmt.Sprintf("ParDo(dtDup{Add:%d}, %s)", st.A, in(0))
	case StepFlatten:
		return fmt.Sprintf("Flatten(%s, %s)", in(0), in(1))
	case StepReshuffle:
		return fmt.Sprintf("Reshuffle(%s)", in(0))
	case StepWindow:
		return fmt.Sprintf("WindowInto(%s, %s)", st.Window, in(0))
	case StepGBKSum:
		return fmt.Sprintf("ParDo(dtSum, GroupByKey(%s))", in(0))
	case StepGBKMax:
		return fmt.Sprintf("ParDo(dtMax, GroupByKey(%s))", in(0))
	case StepCoGBK:
		return fmt.Sprintf("ParDo(dtCoSum, CoGroupByKey(%s, %s))", in(0), in(1))
	case StepCombine:
		return fmt.Sprintf("CombinePerKey(dtSumFn, %s)", in(0))
	case StepCombineF:
		return fmt.Sprintf("CombinePerKey(dtAdd, %s)", in(0))
	case StepSide:
		return fmt.Sprintf("ParDo(dtSide{Mod:%d}, %s, SideInput(%s))", st.A, in(0), in(1))
	case StepStateSide:
		return fmt.Sprintf("ParDo(dtStateSide{DelayMs:%d ClearMod:%d ClearRem:%d Mod:%d}, %s, SideInput(%s))", st.A, st.B, st.C, st.D, in(0), in(1))
	case StepState:
		return fmt.Sprintf("ParDo(dtState{DelayMs:%d ClearMod:%d ClearRem:%d}, %s)", st.A, st.B, st.C, in(0))
	}
	return "?" + st.Kind
}

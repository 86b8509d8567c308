package difftest

import (
	"fmt"
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

package difftest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

func init() { beam.Init() }

// TestGenerateDeterministicAndBuilds: a seed gives the same Spec twice,
// and every Spec of the first 2000 seeds builds into a Beam pipeline; every
// shrink of the first 100 builds or is refused by the SDK (the shrinker
// skips those), and most build.
func TestGenerateDeterministicAndBuilds(t *testing.T) {
	kinds := map[string]int{}
	shrinks, refused := 0, 0
	for seed := int64(0); seed < 2000; seed++ {
		sp := Generate(seed, Options{StatefulSideInputs: seed%2 == 0, SessionTriggers: seed%3 == 0})
		if !reflect.DeepEqual(sp, Generate(seed, Options{StatefulSideInputs: seed%2 == 0, SessionTriggers: seed%3 == 0})) {
			t.Fatalf("seed %d: two different Specs", seed)
		}
		if _, err := Build(sp, ""); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, sp)
		}
		for _, st := range sp.Steps {
			kinds[st.Kind]++
		}
		if seed < 100 {
			for _, c := range Shrink(sp) {
				shrinks++
				if _, err := Build(c, ""); err != nil {
					if !strings.Contains(err.Error(), "the Go SDK refuses") {
						t.Fatalf("seed %d shrunk: %v\n%s\nfrom\n%s", seed, err, c, sp)
					}
					refused++
				}
			}
		}
	}
	t.Logf("steps by kind over 2000 seeds: %v; shrinks of the first 100: %d, %d refused by the SDK", kinds, shrinks, refused)
	if refused*2 > shrinks {
		t.Errorf("%d of %d shrinks refused by the SDK: the shrinker would be mostly useless", refused, shrinks)
	}
}

// TestObserve: each mode keeps what it says. Two panes of one key and
// window: exact keeps both lines, total sums them (discarding) or keeps
// the greater (accumulating), windows keeps one line; OpenLast blanks the
// IsLast of ON_TIME panes only; a malformed line is an error.
func TestObserve(t *testing.T) {
	lines := []string{
		"s1|k0|3|[0,10000)|9999|EARLY/0/-1/first=true/last=false",
		"s1|k0|5|[0,10000)|9999|ON_TIME/1/0/first=false/last=true",
	}
	for _, c := range []struct {
		sink Sink
		want []string
	}{
		{Sink{PC: 1, Mode: ModeExact}, lines},
		{Sink{PC: 1, Mode: ModeTotal}, []string{"s1|k0|[0,10000) total=8"}},
		{Sink{PC: 1, Mode: ModeTotal, Accumulate: true}, []string{"s1|k0|[0,10000) total=5"}},
		{Sink{PC: 1, Mode: ModeWindows}, []string{"s1|k0|[0,10000) has output"}},
		{Sink{PC: 1, Mode: ModeExact, OpenLast: true}, []string{lines[0], "s1|k0|5|[0,10000)|9999|ON_TIME/1/0/first=false/last=?"}},
	} {
		got, err := Observe(Spec{Sinks: []Sink{c.sink}}, lines)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: got %q, want %q", c.sink, got, c.want)
		}
	}
	if _, err := Observe(Spec{Sinks: []Sink{{PC: 1, Mode: ModeExact}}}, []string{"s2|k0|1|global|eogw|ON_TIME/0/0/first=true/last=true"}); err == nil {
		t.Error("a line of a sink the Spec does not have: no error")
	}
	if _, err := Observe(Spec{Sinks: []Sink{{PC: 1, Mode: ModeExact}}}, []string{"s1|k0"}); err == nil {
		t.Error("a line of two fields: no error")
	}
}

// TestDiff: multisets, so a line twice on one side and once on the other
// is a difference.
func TestDiff(t *testing.T) {
	got := Diff([]string{"a", "a", "b"}, []string{"a", "c"})
	want := []string{"-a", "-b", "+c"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if d := Diff([]string{"x", "y"}, []string{"y", "x"}); len(d) != 0 {
		t.Errorf("same multiset: %q", d)
	}
}

// TestObserved: two runs that observed nothing compare equal (Diff is
// empty), which passed a seed whatever the runners did (issue 23); Observed
// rejects them, and an observation empty on one side, and accepts a line
// on each side. Observe of no output, and of output whose only sink is left
// out (an early side-input read upstream of a filter: earlySideOpen's
// gone), observes nothing.
func TestObserved(t *testing.T) {
	sp := Spec{Sinks: []Sink{{PC: 1, Mode: ModeExact}}}
	none, err := Observe(sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(none, none); len(d) != 0 {
		t.Fatalf("Diff of two empty observations: %q", d)
	}
	if err := Observed(none, none); !errors.Is(err, ErrNothingObserved) {
		t.Errorf("nothing observed on either side: Observed = %v, want ErrNothingObserved", err)
	} else {
		t.Logf("nothing observed on either side: %v", err)
	}
	line := []string{"s1|k0|3|[0,10000)|9999|ON_TIME/0/0/first=true/last=true"}
	some, err := Observe(sp, line)
	if err != nil {
		t.Fatal(err)
	}
	if err := Observed(some, none); !errors.Is(err, ErrNothingObserved) {
		t.Errorf("nothing observed on kafkastreams: Observed = %v, want ErrNothingObserved", err)
	}
	if err := Observed(none, some); !errors.Is(err, ErrNothingObserved) {
		t.Errorf("nothing observed on Prism: Observed = %v, want ErrNothingObserved", err)
	}
	if err := Observed(some, some); err != nil {
		t.Errorf("a line on each side: %v", err)
	}
	// A sink left out by Observe: a TestStream element reads a side input
	// early (earlySide), then a filter: its lines are never compared.
	win := WindowSpec{Kind: "fixed", SizeMs: 5000, Trigger: Trigger{Kind: "default"}}
	gone := Spec{
		Sources: []Source{{TestStream: true, Events: []Event{{Key: "k2", Value: 14, TsMillis: 11025}, {Watermark: true, TsMillis: 1275}}}},
		Steps: []Step{
			{Kind: StepWindow, In: []int{0}, Window: &win},
			{Kind: StepSide, In: []int{1, 1}, A: 45},
			{Kind: StepFilter, In: []int{2}, A: 2},
		},
		Sinks: []Sink{{PC: 3, Mode: ModeExact}},
	}
	left, err := Observe(gone, []string{"s3|k2|28|[10000,15000)|11025|ON_TIME/0/0/first=true/last=true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Observed(left, left); !errors.Is(err, ErrNothingObserved) {
		t.Errorf("every sink left out (observed %q): Observed = %v, want ErrNothingObserved", left, err)
	}
}

// TestObservedGenerated: Generate makes no Spec whose sinks Observe all
// leaves out (earlySideOpen's gone), which Observed would reject whatever
// the runners output.
func TestObservedGenerated(t *testing.T) {
	for seed := int64(0); seed < 5000; seed++ {
		sp := Generate(seed, DefaultOptions())
		compared := false
		for _, s := range sp.Sinks {
			if _, gone := earlySideOpen(sp, s.PC); !gone {
				compared = true
			}
		}
		if !compared {
			t.Errorf("seed %d: every sink is left out by Observe:\n%s", seed, sp)
		}
	}
}

// TestObserveExpired: seed 492831498's shape. k0:5@29669 arrives when the
// watermark is at 38696: of its sliding windows, [10000,30000) expired at
// 29999 + 5000 (Prism may keep the element there, the model drops it), so
// that window's lines are left out on both sides; [20000,40000) and every
// other window are compared. On sessions (gap 3000, lateness 0) the late
// k1:1@1000 arrives after its proto-window [1000,4000) expired: every
// window overlapping it is left out, the others kept.
func TestObserveExpired(t *testing.T) {
	events := []Event{
		{Key: "k0", Value: 2, TsMillis: 7979},
		{Watermark: true, TsMillis: 38696},
		{Key: "k0", Value: 5, TsMillis: 29669},
		{Watermark: true, TsMillis: 44926},
	}
	win := WindowSpec{Kind: "sliding", SizeMs: 20_000, PeriodMs: 10_000, LatenessMs: 5_000, Trigger: Trigger{Kind: "count", N: 3}, Accumulate: true}
	sp := Spec{
		Sources: []Source{{TestStream: true, Events: events}},
		Steps:   []Step{{Kind: StepWindow, In: []int{0}, Window: &win}, {Kind: StepCombineF, In: []int{1}}},
		Sinks:   []Sink{{PC: 2, Mode: ModeWindows, Accumulate: true}, {PC: 1, Mode: ModeExact}},
	}
	lines := []string{
		"s2|k0|5|[10000,30000)|29999|EARLY/0/-1/first=true/last=true",
		"s2|k0|5|[20000,40000)|39999|ON_TIME/0/0/first=true/last=true",
		"s2|k0|2|[0,20000)|19999|ON_TIME/0/0/first=true/last=true",
		// the window step's own output: no aggregation, nothing dropped
		"s1|k0|5|[10000,30000)|29669|ON_TIME/0/0/first=true/last=true",
	}
	got, err := Observe(sp, lines)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"s1|k0|5|[10000,30000)|29669|ON_TIME/0/0/first=true/last=true",
		"s2|k0|[0,20000) has output",
		"s2|k0|[20000,40000) has output",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sliding: got %q, want %q", got, want)
	}

	sess := WindowSpec{Kind: "sessions", SizeMs: 3_000, Trigger: Trigger{Kind: "default"}}
	sp.Sources[0].Events = []Event{
		{Key: "k1", Value: 4, TsMillis: 2500},
		{Key: "k1", Value: 7, TsMillis: 9000},
		{Watermark: true, TsMillis: 5000},
		{Key: "k1", Value: 1, TsMillis: 1000},
		{Watermark: true, TsMillis: 20000},
	}
	sp.Steps[0].Window = &sess
	sp.Sinks = []Sink{{PC: 2, Mode: ModeExact}}
	lines = []string{
		"s2|k1|5|[1000,5500)|5499|ON_TIME/0/0/first=true/last=true",
		"s2|k1|4|[2500,5500)|5499|ON_TIME/0/0/first=true/last=true",
		"s2|k1|7|[9000,12000)|11999|ON_TIME/0/0/first=true/last=true",
	}
	got, err = Observe(sp, lines)
	if err != nil {
		t.Fatal(err)
	}
	// (the pane of a session under the default trigger is not compared:
	// TestObservePrismPanes)
	if want := []string{"s2|k1|7|[9000,12000)|11999|pane=?"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sessions: got %q, want %q", got, want)
	}
}

// TestObservePrismPanes: the rules where Prism departs from the model
// (prismMode, sessionPanes, closesOnTime), each on its seed's minimal
// pipeline with Prism's and this runner's lines from the hour-long run:
// the two observations are equal, and without the rule they were not.
func TestObservePrismPanes(t *testing.T) {
	win := func(w WindowSpec) *WindowSpec { return &w }
	create := func(evs ...Event) Source { return Source{Events: evs} }
	ts := func(evs ...Event) Source { return Source{TestStream: true, Events: evs} }
	el := func(k string, v int, t int64) Event { return Event{Key: k, Value: v, TsMillis: t} }
	wm := func(t int64) Event { return Event{Watermark: true, TsMillis: t} }
	eow := Trigger{Kind: "eow"}
	early := Trigger{Kind: "eow", Early: &Trigger{Kind: "always"}}
	for _, c := range []struct {
		name        string
		sp          Spec
		prism, ours []string
	}{
		{
			// (b) sessions, Default(), lateness 0: Prism's zero PaneInfo
			name: "274643520",
			sp: Spec{
				Sources: []Source{create(el("k1", 19, 39696), el("k1", 7, 39648))},
				Steps: []Step{
					{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "sessions", SizeMs: 3000, Trigger: Trigger{Kind: "default"}})},
					{Kind: StepGBKSum, In: []int{1}},
				},
				Sinks: []Sink{{PC: 2, Mode: ModeExact}},
			},
			prism: []string{"s2|k1|26|[39648,42696)|42695|EARLY/0/0/first=false/last=false"},
			ours:  []string{"s2|k1|26|[39648,42696)|42695|ON_TIME/0/0/first=true/last=true"},
		},
		{
			// (c) AfterEndOfWindow(), accumulating, lateness 5 s: Prism's
			// closing LATE panes
			name: "274643534",
			sp: Spec{
				Sources: []Source{ts(el("k0", 4, 17967))},
				Steps: []Step{
					{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "sliding", SizeMs: 20000, PeriodMs: 5000, LatenessMs: 5000, Trigger: eow, Accumulate: true})},
					{Kind: StepGBKMax, In: []int{1}},
				},
				Sinks: []Sink{{PC: 2, Mode: ModeExact, Accumulate: true}},
			},
			prism: []string{
				"s2|k0|4|[0,20000)|19999|ON_TIME/0/0/first=true/last=false",
				"s2|k0|4|[0,20000)|19999|LATE/1/1/first=false/last=true",
			},
			ours: []string{"s2|k0|4|[0,20000)|19999|ON_TIME/0/0/first=true/last=true"},
		},
		{
			// (d) AfterEndOfWindow(), accumulating, lateness 30 s: Prism's
			// extra EARLY pane (the sink read its mode as discarding)
			name: "274643683",
			sp: Spec{
				Sources: []Source{ts(el("k0", 14, 11077))},
				Steps: []Step{
					{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "fixed", SizeMs: 10000, LatenessMs: 30000, Trigger: eow, Accumulate: true})},
					{Kind: StepCombineF, In: []int{1}},
				},
				Sinks: []Sink{{PC: 2, Mode: ModeExact}},
			},
			prism: []string{
				"s2|k0|14|[10000,20000)|19999|EARLY/0/0/first=false/last=false",
				"s2|k0|14|[10000,20000)|19999|ON_TIME/1/0/first=false/last=true",
			},
			ours: []string{"s2|k0|14|[10000,20000)|19999|ON_TIME/0/0/first=true/last=true"},
		},
		{
			// (e) early firings, no late ones: the window closes on time;
			// Prism adds the late k2:15@7065 to [-10000,10000)
			name: "274643902",
			sp: Spec{
				OnePartition: true,
				Sources:      []Source{ts(el("k2", 16, 9853), wm(11051), el("k2", 15, 7065))},
				Steps: []Step{
					{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "sliding", SizeMs: 20000, PeriodMs: 10000, LatenessMs: 5000, Trigger: early})},
					{Kind: StepGBKSum, In: []int{1}},
				},
				Sinks: []Sink{{PC: 2, Mode: ModeTotal}},
			},
			prism: []string{
				"s2|k2|16|[-10000,10000)|9999|ON_TIME/0/0/first=true/last=false",
				"s2|k2|15|[-10000,10000)|9999|LATE/1/1/first=false/last=false",
				"s2|k2|31|[0,20000)|19999|ON_TIME/0/0/first=true/last=true",
			},
			ours: []string{
				"s2|k2|16|[-10000,10000)|9999|ON_TIME/0/0/first=true/last=true",
				"s2|k2|31|[0,20000)|19999|ON_TIME/0/0/first=true/last=true",
			},
		},
		{
			// (a) a global-window side input from a stateful DoFn's
			// timers: Prism reads it partial
			name: "274643297",
			sp: Spec{
				Sources: []Source{create(el("k1", 6, 44676), el("k1", 3, 22360))},
				Steps: []Step{
					{Kind: StepState, In: []int{0}},
					{Kind: StepStateSide, In: []int{1, 1}, D: 30},
				},
				Sinks: []Sink{{PC: 2, Mode: ModeExact}},
			},
			prism: []string{"s2|k1|6|global|22360|UNKNOWN/0/0/first=true/last=true"},
			ours:  []string{"s2|k1|12|global|22360|UNKNOWN/0/0/first=true/last=true"},
		},
	} {
		a, err := Observe(c.sp, c.prism)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Observe(c.sp, c.ours)
		if err != nil {
			t.Fatal(err)
		}
		if d := Diff(a, b); len(d) != 0 {
			t.Errorf("seed %s: differ: %q", c.name, d)
		}
	}

	// Narrow: a fixed window under Default(), lateness 0, still compares
	// its pane; so does a session under a data-driven trigger; a late
	// element under early and late firings is compared; a side input in
	// the global window straight from a Create is compared by value.
	fixed := Spec{
		Sources: []Source{create(el("k1", 2, 100))},
		Steps: []Step{
			{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "fixed", SizeMs: 1000, Trigger: Trigger{Kind: "default"}})},
			{Kind: StepGBKSum, In: []int{1}},
			{Kind: StepSide, In: []int{2, 0}},
		},
		Sinks: []Sink{{PC: 2, Mode: ModeExact}, {PC: 3, Mode: ModeExact}},
	}
	a, _ := Observe(fixed, []string{"s2|k1|2|[0,1000)|999|EARLY/0/0/first=false/last=false", "s3|k1|4|[0,1000)|999|ON_TIME/0/0/first=true/last=true"})
	b, _ := Observe(fixed, []string{"s2|k1|2|[0,1000)|999|ON_TIME/0/0/first=true/last=true", "s3|k1|2|[0,1000)|999|ON_TIME/0/0/first=true/last=true"})
	if d := Diff(a, b); len(d) != 4 {
		t.Errorf("fixed windows, side input from a Create: want the pane and the value compared, got %q", d)
	}
	lateFiring := Trigger{Kind: "eow", Early: &Trigger{Kind: "always"}, Late: &Trigger{Kind: "always"}}
	sp := Spec{
		Sources: []Source{ts(el("k2", 16, 9853), wm(11051), el("k2", 15, 7065))},
		Steps: []Step{
			{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "fixed", SizeMs: 10000, LatenessMs: 5000, Trigger: lateFiring})},
			{Kind: StepGBKSum, In: []int{1}},
		},
		Sinks: []Sink{{PC: 2, Mode: ModeTotal}},
	}
	a, _ = Observe(sp, []string{"s2|k2|16|[0,10000)|9999|ON_TIME/0/0/first=true/last=false"})
	b, _ = Observe(sp, []string{"s2|k2|16|[0,10000)|9999|ON_TIME/0/0/first=true/last=false", "s2|k2|15|[0,10000)|9999|LATE/1/1/first=false/last=false"})
	if d := Diff(a, b); len(d) != 2 {
		t.Errorf("late firings: want the late element compared, got %q", d)
	}
}

// TestObserveEarlySide: Prism reads a side input in the main input's
// fixed windows empty when the main element reaches the reader before its
// upstream watermark passed the window's end (earlySide); the model and
// this runner wait for the window. Each seed's minimal pipeline with
// Prism's and this runner's lines from the hour-long run observes equal,
// and without the rule did not; the rule is narrow: a main input from a
// Create is compared by value, a sink past the early read by which keys
// and windows have output, and only one past a filter of its values is
// left out.
func TestObserveEarlySide(t *testing.T) {
	win := func(w WindowSpec) *WindowSpec { return &w }
	el := func(k string, v int, t int64) Event { return Event{Key: k, Value: v, TsMillis: t} }
	wm := func(t int64) Event { return Event{Watermark: true, TsMillis: t} }
	def := Trigger{Kind: "default"}
	observe := func(sp Spec, prism, ours []string) []string {
		t.Helper()
		a, err := Observe(sp, prism)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Observe(sp, ours)
		if err != nil {
			t.Fatal(err)
		}
		return Diff(a, b)
	}
	// seed 274644266: a TestStream's k2:14@11025 with the watermark at
	// 1275 reads [10000,15000) of itself empty on Prism
	a := Spec{
		Sources: []Source{{TestStream: true, Events: []Event{el("k2", 14, 11025), wm(1275)}}},
		Steps: []Step{
			{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "fixed", SizeMs: 5000, LatenessMs: 30000, Trigger: def, Accumulate: true})},
			{Kind: StepSide, In: []int{1, 1}, A: 45},
		},
		Sinks: []Sink{{PC: 2, Mode: ModeExact, Accumulate: true}},
	}
	if d := observe(a,
		[]string{"s2|k2|14|[10000,15000)|11025|UNKNOWN/0/0/first=true/last=true"},
		[]string{"s2|k2|28|[10000,15000)|11025|UNKNOWN/0/0/first=true/last=true"}); len(d) != 0 {
		t.Errorf("seed 274644266: differ: %q", d)
	}
	// seed 274644411: p6 reads p5 (fixed windows) with its main input from
	// a GroupByKey; Prism read every window of p5 empty
	b := Spec{
		Sources: []Source{
			{Events: []Event{el("k1", 10, 891), el("k2", 1, 3320), el("k1", 18, 44103), el("k0", 12, 13777), el("k0", 10, 2770), el("k2", 6, 32488)}},
			{Events: []Event{el("k2", 1, 50918), el("k1", 3, 5776), el("k1", 3, 26071), el("k1", 20, 23454), el("k0", 9, 10937), el("k0", 15, 57183)}},
		},
		Steps: []Step{
			{Kind: StepWindow, In: []int{0}, Window: win(WindowSpec{Kind: "fixed", SizeMs: 5000, LatenessMs: 5000, Trigger: def})},
			{Kind: StepGBKSum, In: []int{2}},
			{Kind: StepSide, In: []int{2, 1}, A: 18},
			{Kind: StepFilter, In: []int{4}, A: 3, B: 2},
			{Kind: StepSide, In: []int{3, 5}, A: 35},
			{Kind: StepSide, In: []int{6, 0}, A: 12},
		},
		Sinks: []Sink{{PC: 7, Mode: ModeExact, OpenLast: true}, {PC: 1, Mode: ModeExact}},
	}
	line := func(k string, v int, w string, ts int) string {
		return fmt.Sprintf("s7|%s|%d|%s|%d|ON_TIME/0/0/first=true/last=false", k, v, w, ts)
	}
	if d := observe(b,
		[]string{line("k0", 19, "[0,5000)", 4999), line("k0", 21, "[10000,15000)", 14999), line("k1", 19, "[0,5000)", 4999), line("k1", 27, "[40000,45000)", 44999), line("k2", 10, "[0,5000)", 4999), line("k2", 15, "[30000,35000)", 34999)},
		[]string{line("k0", 50, "[0,5000)", 4999), line("k0", 48, "[10000,15000)", 14999), line("k1", 50, "[0,5000)", 4999), line("k1", 60, "[40000,45000)", 44999), line("k2", 41, "[0,5000)", 4999), line("k2", 36, "[30000,35000)", 34999)},
	); len(d) != 0 {
		t.Errorf("seed 274644411: differ: %q", d)
	}
	// Narrow: seed 274644266's pipeline over a Create compares the value.
	c := a
	c.Sources = []Source{{Events: []Event{el("k2", 14, 11025)}}}
	if d := observe(c,
		[]string{"s2|k2|14|[10000,15000)|11025|UNKNOWN/0/0/first=true/last=true"},
		[]string{"s2|k2|28|[10000,15000)|11025|UNKNOWN/0/0/first=true/last=true"}); len(d) != 2 {
		t.Errorf("main input from a Create: want the value compared, got %q", d)
	}
	// Past the early read: a window without output is still seen; after a
	// filter of the read values, the sink is left out.
	f := a
	f.Steps = append(append([]Step(nil), a.Steps...), Step{Kind: StepFilter, In: []int{2}, A: 4, B: 0})
	f.Sinks = []Sink{{PC: 2, Mode: ModeExact}, {PC: 3, Mode: ModeExact}}
	if d := observe(f,
		[]string{"s3|k2|14|[10000,15000)|11025|UNKNOWN/0/0/first=true/last=true"},
		[]string{"s2|k2|28|[10000,15000)|11025|UNKNOWN/0/0/first=true/last=true"}); len(d) != 1 || d[0] != "+s2|k2|[10000,15000) has output" {
		t.Errorf("past the early read: want only s2's missing window seen, got %q", d)
	}
}

// TestGenerateManyPanes: a good share of seeds (at least 30 % of the
// first 1000, DefaultOptions) has an aggregation under a repeating
// data-driven trigger over a TestStream of 3 or more watermark segments,
// half of them accumulating: where a key and window gets several panes and
// accumulating differs from discarding (a GroupByKey that discarded
// instead went unnoticed before Generate's focus).
func TestGenerateManyPanes(t *testing.T) {
	const n = 1000
	many, acc := 0, 0
	for seed := int64(0); seed < n; seed++ {
		found, accumulating := false, false
		for _, f := range Features(Generate(seed, DefaultOptions())) {
			found = found || strings.HasPrefix(f, "many-panes/")
			accumulating = accumulating || f == "many-panes/acc=true"
		}
		if found {
			many++
		}
		if accumulating {
			acc++
		}
	}
	t.Logf("%d of %d seeds have a repeating data-driven trigger over 3+ TestStream segments, %d accumulating", many, n, acc)
	if many*100 < 30*n || acc*100 < 20*n {
		t.Errorf("%d of %d seeds with several panes per key and window (want >= 30 %%), %d accumulating (want >= 20 %%)", many, n, acc)
	}
}

// TestMakeTestSeedsCover: make test's seeds have, together, every feature
// seeds 1-599 have (under DefaultOptions); when not (Generate changed), it
// prints PickSeeds' choice.
func TestMakeTestSeedsCover(t *testing.T) {
	var cands []int64
	for s := int64(1); s < 600; s++ {
		cands = append(cands, s)
	}
	all, have := map[string]bool{}, map[string]bool{}
	for _, s := range cands {
		for _, f := range Features(Generate(s, DefaultOptions())) {
			all[f] = true
		}
	}
	for _, s := range MakeTestSeeds {
		for _, f := range Features(Generate(s, DefaultOptions())) {
			have[f] = true
		}
	}
	var missing []string
	for f := range all {
		if !have[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		t.Errorf("MakeTestSeeds miss %q; PickSeeds gives %v", missing, PickSeeds(cands, DefaultOptions()))
	}
}

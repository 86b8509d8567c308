package difftest

import (
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
	if want := lines[2:]; !reflect.DeepEqual(got, want) {
		t.Errorf("sessions: got %q, want %q", got, want)
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

package difftest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// The fixed library of registered DoFns the random pipelines are built
// from. Every PCollection between them is KV<string, int> (a key, a value
// >= 1); parameters are struct fields, so a generated pipeline is a
// composition of these, never generated code. Each is deterministic and,
// where it aggregates, independent of the order of its input (the Beam
// model leaves that order open).

// dtParse turns a Create element "key|value|tsMillis" into the KV (key,
// value) at event time tsMillis.
func dtParse(s string, emit func(beam.EventTime, string, int)) error {
	parts := strings.Split(s, "|")
	if len(parts) != 3 {
		return fmt.Errorf("difftest: element %q: want key|value|tsMillis", s)
	}
	v, err := strconv.Atoi(parts[1])
	if err != nil {
		return fmt.Errorf("difftest: element %q: value: %v", s, err)
	}
	ts, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return fmt.Errorf("difftest: element %q: timestamp: %v", s, err)
	}
	emit(mtime.FromMilliseconds(ts), parts[0], v)
	return nil
}

// dtSplit turns a TestStream element "key|value" into the KV (key, value),
// keeping the element's timestamp (the TestStream's).
func dtSplit(s string) (string, int, error) {
	k, v, ok := strings.Cut(s, "|")
	if !ok {
		return "", 0, fmt.Errorf("difftest: element %q: want key|value", s)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return "", 0, fmt.Errorf("difftest: element %q: value: %v", s, err)
	}
	return k, n, nil
}

// dtMap maps (k, v) to (k', (v*Mul + Add) mod Mod + 1): k' is k, or
// "k<v mod KeyMod>" when KeyMod > 0. Mod must be positive.
type dtMap struct{ Mul, Add, Mod, KeyMod int }

func (f *dtMap) ProcessElement(k string, v int) (string, int) {
	if f.KeyMod > 0 {
		k = fmt.Sprintf("k%d", v%f.KeyMod)
	}
	return k, (v*f.Mul+f.Add)%f.Mod + 1
}

// dtFilter drops the elements whose value is Rem mod Mod (Mod positive).
type dtFilter struct{ Mod, Rem int }

func (f *dtFilter) ProcessElement(k string, v int, emit func(string, int)) {
	if v%f.Mod != f.Rem {
		emit(k, v)
	}
}

// dtDup emits each element twice: (k, v) and (k, v + Add).
type dtDup struct{ Add int }

func (f *dtDup) ProcessElement(k string, v int, emit func(string, int)) {
	emit(k, v)
	emit(k, v+f.Add)
}

// dtSum is a GroupByKey's aggregation: the sum of the values.
func dtSum(k string, vs func(*int) bool) (string, int) {
	sum, v := 0, 0
	for vs(&v) {
		sum += v
	}
	return k, sum
}

// dtMax is a GroupByKey's other aggregation: the greatest value.
func dtMax(k string, vs func(*int) bool) (string, int) {
	m, v := 0, 0
	for vs(&v) {
		if v > m {
			m = v
		}
	}
	return k, m
}

// dtCoSum is a CoGroupByKey's aggregation: sum(a) + 2 sum(b) (linear, so
// that discarding panes add up to the whole).
func dtCoSum(k string, a, b func(*int) bool) (string, int) {
	sum, v := 0, 0
	for a(&v) {
		sum += v
	}
	for b(&v) {
		sum += 2 * v
	}
	return k, sum
}

// dtSumFn is a liftable CombineFn: the sum, with an accumulator.
type dtSumFn struct{}

func (dtSumFn) CreateAccumulator() int         { return 0 }
func (dtSumFn) AddInput(a, v int) int          { return a + v }
func (dtSumFn) MergeAccumulators(a, b int) int { return a + b }
func (dtSumFn) ExtractOutput(a int) int        { return a }

// dtAdd is a combine function given as a binary function.
func dtAdd(a, b int) int { return a + b }

// dtSide adds the sum of a side input's values (mod Mod, Mod positive) to
// each main input value.
type dtSide struct{ Mod int }

func (f *dtSide) ProcessElement(k string, v int, side func(*string, *int) bool) (string, int) {
	sum, sk, sv := 0, "", 0
	for side(&sk, &sv) {
		sum += sv
	}
	return k, v + sum%f.Mod
}

// dtState is the stateful DoFn. Each element (ts, v) of a key and window
// is due at d = min(ts + DelayMs, the window's max timestamp); it goes into
// the bag, and the event-time timer is set to the earliest due time of the
// bag (set, or re-set earlier). When the timer fires at T it emits (key,
// the sum of the bag's values due at or before T), removes them, and sets
// the timer to the earliest due time left, if any. With ClearMod > 0, an
// element whose value is ClearRem mod ClearMod clears the timer and marks
// the key and window cleared: nothing more is buffered or fired for it.
//
// The output is independent of the order of elements between two
// watermark advances (the Beam model leaves that open) as long as no
// element arrives behind the watermark; with ClearMod > 0 only when every
// element arrives before the watermark moves (a Create): the generator
// keeps to that.
type dtState struct {
	DelayMs  int64
	ClearMod int
	ClearRem int

	Bag     state.Bag[string]
	Next    state.Value[int64]
	Cleared state.Value[bool]
	Fire    timers.EventTime
}

func (f *dtState) ProcessElement(w beam.Window, ts beam.EventTime, sp state.Provider, tp timers.Provider, k string, v int, _ func(string, int)) error {
	return stateElement(f.cells(), f.DelayMs, f.ClearMod, f.ClearRem, w, ts, sp, tp, v)
}

func (f *dtState) cells() *stateCells     { return &stateCells{f.Bag, f.Next, f.Cleared, f.Fire} }
func (f *dtStateSide) cells() *stateCells { return &stateCells{f.Bag, f.Next, f.Cleared, f.Fire} }

// stateCells are the state and timer of dtState and dtStateSide (copies
// of their handles: a handle is its state id).
type stateCells struct {
	Bag     state.Bag[string]
	Next    state.Value[int64]
	Cleared state.Value[bool]
	Fire    timers.EventTime
}

func stateElement(f *stateCells, delayMs int64, clearMod, clearRem int, w beam.Window, ts beam.EventTime, sp state.Provider, tp timers.Provider, v int) error {
	cleared, _, err := f.Cleared.Read(sp)
	if err != nil || cleared {
		return err
	}
	if clearMod > 0 && v%clearMod == clearRem {
		f.Fire.Clear(tp)
		if err := f.Next.Clear(sp); err != nil {
			return err
		}
		return f.Cleared.Write(sp, true)
	}
	d := int64(ts) + delayMs
	if m := int64(w.MaxTimestamp()); d > m {
		d = m
	}
	if err := f.Bag.Add(sp, fmt.Sprintf("%d:%d", d, v)); err != nil {
		return err
	}
	next, ok, err := f.Next.Read(sp)
	if err != nil {
		return err
	}
	if !ok || d < next {
		f.Fire.Set(tp, mtime.Time(d).ToTime())
		return f.Next.Write(sp, d)
	}
	return nil
}

func (f *dtState) OnTimer(_ context.Context, ts beam.EventTime, sp state.Provider, tp timers.Provider, k string, _ timers.Context, emit func(string, int)) error {
	return stateTimer(f.cells(), ts, sp, tp, k, emit)
}

// dtStateSide is dtState with a side input: each main input value gets
// the sum of the side input's values mod Mod added first (Mod positive).
// The generator builds it with Options.StatefulSideInputs (on in
// DefaultOptions; this runner refused it before issue 14).
type dtStateSide struct {
	DelayMs  int64
	ClearMod int
	ClearRem int
	Mod      int

	Bag     state.Bag[string]
	Next    state.Value[int64]
	Cleared state.Value[bool]
	Fire    timers.EventTime
}

func (f *dtStateSide) ProcessElement(w beam.Window, ts beam.EventTime, sp state.Provider, tp timers.Provider, k string, v int, side func(*string, *int) bool, _ func(string, int)) error {
	sum, sk, sv := 0, "", 0
	for side(&sk, &sv) {
		sum += sv
	}
	return stateElement(f.cells(), f.DelayMs, f.ClearMod, f.ClearRem, w, ts, sp, tp, v+sum%f.Mod)
}

// OnTimer takes the side input too: the Go SDK passes OnTimer the same
// side inputs and emitters as ProcessElement (without it, its invoker
// panicked, index out of range, when the timer fired: seed 139).
func (f *dtStateSide) OnTimer(_ context.Context, ts beam.EventTime, sp state.Provider, tp timers.Provider, k string, _ timers.Context, _ func(*string, *int) bool, emit func(string, int)) error {
	return stateTimer(f.cells(), ts, sp, tp, k, emit)
}

func stateTimer(f *stateCells, ts beam.EventTime, sp state.Provider, tp timers.Provider, k string, emit func(string, int)) error {
	entries, _, err := f.Bag.Read(sp)
	if err != nil {
		return err
	}
	sum, fired := 0, false
	var rest []string
	next := int64(0)
	for _, e := range entries {
		ds, vs, _ := strings.Cut(e, ":")
		d, _ := strconv.ParseInt(ds, 10, 64)
		v, _ := strconv.Atoi(vs)
		if d <= int64(ts) {
			sum += v
			fired = true
			continue
		}
		if len(rest) == 0 || d < next {
			next = d
		}
		rest = append(rest, e)
	}
	if fired {
		emit(k, sum)
	}
	if err := f.Bag.Clear(sp); err != nil {
		return err
	}
	for _, e := range rest {
		if err := f.Bag.Add(sp, e); err != nil {
			return err
		}
	}
	if len(rest) == 0 {
		return f.Next.Clear(sp)
	}
	f.Fire.Set(tp, mtime.Time(next).ToTime())
	return f.Next.Write(sp, next)
}

// dtFormat formats an element reaching sink Sink as one output line:
// "s<Sink>|<key>|<value>|<window>|<timestamp>|<pane>", the fields
// Observation parses.
type dtFormat struct{ Sink int }

func (f *dtFormat) ProcessElement(pn typex.PaneInfo, w beam.Window, ts beam.EventTime, k string, v int) string {
	return fmt.Sprintf("s%d|%s|%d|%s|%s|%s", f.Sink, k, v, fmtWindow(w), fmtTime(mtime.Time(ts)), fmtPane(pn))
}

func fmtWindow(w typex.Window) string {
	switch w := w.(type) {
	case window.GlobalWindow:
		return "global"
	case window.IntervalWindow:
		return fmt.Sprintf("[%d,%d)", int64(w.Start), int64(w.End))
	}
	return fmt.Sprint(w)
}

func fmtTime(t mtime.Time) string {
	switch t {
	case mtime.EndOfGlobalWindowTime:
		return "eogw"
	case mtime.MaxTimestamp:
		return "max"
	case mtime.MinTimestamp:
		return "min"
	}
	return strconv.FormatInt(int64(t), 10)
}

func fmtPane(p typex.PaneInfo) string {
	t := map[typex.PaneTiming]string{typex.PaneEarly: "EARLY", typex.PaneOnTime: "ON_TIME", typex.PaneLate: "LATE", typex.PaneUnknown: "UNKNOWN"}[p.Timing]
	return fmt.Sprintf("%s/%d/%d/first=%v/last=%v", t, p.Index, p.NonSpeculativeIndex, p.IsFirst, p.IsLast)
}

// collected holds the lines dtCollect saw, per run id: how a test reads
// the output of a pipeline run in this process (Prism's loopback workers).
var collected = struct {
	sync.Mutex
	lines map[string][]string
}{lines: map[string][]string{}}

// dtCollect records each line under its Run id (see Collected).
type dtCollect struct{ Run string }

func (f *dtCollect) ProcessElement(s string) {
	collected.Lock()
	defer collected.Unlock()
	collected.lines[f.Run] = append(collected.lines[f.Run], s)
}

// Collected returns (and forgets) the lines the collector of run id saw,
// sorted.
func Collected(id string) []string {
	collected.Lock()
	defer collected.Unlock()
	out := collected.lines[id]
	delete(collected.lines, id)
	sort.Strings(out)
	return out
}

func init() {
	register.Function2x1(dtParse)
	register.Function1x3(dtSplit)
	register.DoFn2x2[string, int, string, int](&dtMap{})
	register.DoFn3x0[string, int, func(string, int)](&dtFilter{})
	register.DoFn3x0[string, int, func(string, int)](&dtDup{})
	register.Function2x2(dtSum)
	register.Function2x2(dtMax)
	register.Function3x2(dtCoSum)
	register.Combiner1[int](&dtSumFn{})
	register.Function2x1(dtAdd)
	register.DoFn3x2[string, int, func(*string, *int) bool, string, int](&dtSide{})
	register.DoFn8x1[beam.Window, beam.EventTime, state.Provider, timers.Provider, string, int, func(*string, *int) bool, func(string, int), error](&dtStateSide{})
	register.DoFn7x1[beam.Window, beam.EventTime, state.Provider, timers.Provider, string, int, func(string, int), error](&dtState{})
	register.DoFn5x1[typex.PaneInfo, beam.Window, beam.EventTime, string, int, string](&dtFormat{})
	register.DoFn1x0[string](&dtCollect{})
	register.Emitter2[string, int]()
	register.Emitter3[beam.EventTime, string, int]()
	register.Iter1[int]()
	register.Iter2[string, int]()
}

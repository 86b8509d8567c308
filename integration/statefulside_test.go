package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"
)

// ssSideFn is a stateful DoFn with a timer that reads a side input: each
// element adds value × (the side input's sum) to its window's total in
// user state and sets an event-time timer at the window's end, which
// emits the total and the side input's sum.
type ssSideFn struct {
	Total state.Value[int]
	End   timers.EventTime
}

func (f *ssSideFn) ProcessElement(w beam.Window, sp state.Provider, tp timers.Provider, key string, v int, side func(*int) bool, emit func(string)) error {
	factor, x := 0, 0
	for side(&x) {
		factor += x
	}
	n, _, err := f.Total.Read(sp)
	if err != nil {
		return err
	}
	f.End.Set(tp, w.MaxTimestamp().ToTime())
	return f.Total.Write(sp, n+v*factor)
}

// OnTimer reads the side input too (the Go SDK hands a DoFn's side inputs
// to its timer callbacks as to ProcessElement): a timer may fire only once
// the side input is ready for its window, as an element.
func (f *ssSideFn) OnTimer(_ context.Context, ts beam.EventTime, sp state.Provider, _ timers.Provider, key string, _ timers.Context, side func(*int) bool, emit func(string)) error {
	factor, x := 0, 0
	for side(&x) {
		factor += x
	}
	n, _, err := f.Total.Read(sp)
	if err != nil {
		return err
	}
	emit(fmt.Sprintf("%s timer at %d total=%d side=%d", key, int64(ts), n, factor))
	return f.Total.Clear(sp)
}

func init() {
	register.DoFn7x1[beam.Window, state.Provider, timers.Provider, string, int, func(*int) bool, func(string), error](&ssSideFn{})
}

// TestStatefulDoFnWithSideInput: a stateful DoFn (value state and an
// event-time timer) that reads an iterable side input, on the real broker
// (a stateful DoFn with side inputs was refused before). The side input
// (2 + 3 + 5 = 10, in the global window) comes from a stage that takes 2 s
// per element, so the TestStream's elements reach the stateful stage long
// before it is ready: the step holds them back (step.SideInputGate) until
// the side input's watermark reaches the end of the global window, and
// every element sees the whole side input. In fixed windows of 10 s:
//
//	1@1 s, 2@2 s; wm 11 s -> [0,10) total (1+2)×10 = 30, timer at 9999
//	3@12 s; end of stream -> [10,20) total 3×10 = 30, timer at 19999
func TestStatefulDoFnWithSideInput(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	side := beam.ParDo(s, &gbkSlow{SlowMillis: 2000}, beam.Create(s, 2, 3, 5))
	con := teststream.NewConfig()
	for _, step := range []func() error{
		func() error { return con.AddElements(1000, 1) },
		func() error { return con.AddElements(2000, 2) },
		func() error { return con.AdvanceWatermark(11000) },
		func() error { return con.AddElements(12000, 3) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	kv := beam.ParDo(s, tsKeyed, teststream.Create(s, con))
	kv = beam.WindowInto(s, window.NewFixedWindows(10*time.Second), kv)
	out := beam.ParDo(s, &ssSideFn{Total: state.MakeValueState[int]("total"), End: timers.InEventTime("end")}, kv, beam.SideInput{Input: side})
	_ = beam.Reshuffle(s, out)
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, true), []string{
		fmt.Sprintf("k timer at %d total=30 side=10", int64(mtime.Time(9999))),
		fmt.Sprintf("k timer at %d total=30 side=10", int64(mtime.Time(19999))),
	})
}

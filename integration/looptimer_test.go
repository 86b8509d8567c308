package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"

	"github.com/kafkastreams/kafkastreams/runner"
)

// ltLoopFn is Beam's looping timer: a key's element sets an event-time
// timer one Period later, and each firing counts itself and sets the next
// one Period on, until Times firings; the last emits the count and its
// time.
type ltLoopFn struct {
	PeriodMs int64
	Times    int
	Count    state.Value[int]
	Tick     timers.EventTime
}

func (f *ltLoopFn) ProcessElement(ts beam.EventTime, _ state.Provider, tp timers.Provider, _ string, _ int, _ func(string)) {
	f.Tick.Set(tp, mtime.Time(ts).ToTime().Add(time.Duration(f.PeriodMs)*time.Millisecond))
}

func (f *ltLoopFn) OnTimer(_ context.Context, ts beam.EventTime, sp state.Provider, tp timers.Provider, key string, _ timers.Context, emit func(string)) error {
	n, _, err := f.Count.Read(sp)
	if err != nil {
		return err
	}
	n++
	if n < f.Times {
		f.Tick.Set(tp, mtime.Time(ts).ToTime().Add(time.Duration(f.PeriodMs)*time.Millisecond))
		return f.Count.Write(sp, n)
	}
	emit(fmt.Sprintf("%s looped %d times, last at %d", key, n, int64(ts)))
	return f.Count.Clear(sp)
}

func init() {
	register.DoFn6x0[beam.EventTime, state.Provider, timers.Provider, string, int, func(string)](&ltLoopFn{})
	register.Emitter1[string]()
}

// TestLoopingTimerPastMaxRounds: a looping timer of 1 500 one-minute
// periods, all made due by one watermark report (the TestStream's end of
// time, read by a stateful stage started after it: one attempt) fires
// every period in order and the job ends. The step runs at most 1 000
// bundles at one point: the stage failed every attempt with "timers keep
// firing timers" and the job never ended (Prism fires all 1 500); the head
// now leaves the rest of a long loop to the next attempts (userstate
// timerRoundsPerAttempt).
func TestLoopingTimerPastMaxRounds(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	con := teststream.NewConfig()
	if err := con.AddElements(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := con.AdvanceWatermarkToInfinity(); err != nil {
		t.Fatal(err)
	}
	const times, period = 1500, int64(60_000)
	kv := beam.ParDo(s, tmKeyed, teststream.Create(s, con))
	out := beam.ParDo(s, &ltLoopFn{PeriodMs: period, Times: times, Count: state.MakeValueState[int]("count"), Tick: timers.InEventTime("tick")}, kv)
	_ = beam.Reshuffle(s, out)
	r := runApp(t, runner.WithUpstreamsFirst(ctx), b.BootstrapServers(), uniqueName(t, "app"), p, func(o *runner.Options) { o.InternalTopicPartitions = 1 })
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), []string{fmt.Sprintf("k looped %d times, last at %d", times, times*period)})
}

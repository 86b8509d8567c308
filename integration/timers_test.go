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

// Event-time timers in the order of the watermark reports (issue 9). A
// stateful DoFn counts the elements of a key; the key's first element sets
// an event-time timer at its timestamp + OffsetMs, the fifth clears the
// timer and resets the count. A TestStream feeds one key two batches of
// five elements, each followed by a watermark advance to its timestamp +
// 1 s. Whether the timer fires depends only on where the watermark passes
// it in the stream, never on how the stateful stage's records happened to
// be batched into bundles and transactions.

// tmBatchFn is the DoFn.
type tmBatchFn struct {
	OffsetMs int64
	Count    state.Value[int]
	Fire     timers.EventTime
}

func (f *tmBatchFn) ProcessElement(ts beam.EventTime, sp state.Provider, tp timers.Provider, key string, _ int, emit func(string)) error {
	n, _, err := f.Count.Read(sp)
	if err != nil {
		return err
	}
	n++
	if n == 1 {
		f.Fire.Set(tp, mtime.Time(ts).ToTime().Add(time.Duration(f.OffsetMs)*time.Millisecond))
	}
	if n == 5 {
		f.Fire.Clear(tp)
		emit(fmt.Sprintf("%s batch-done at %d", key, int64(ts)))
		return f.Count.Clear(sp)
	}
	return f.Count.Write(sp, n)
}

func (f *tmBatchFn) OnTimer(_ context.Context, ts beam.EventTime, _ state.Provider, _ timers.Provider, key string, _ timers.Context, emit func(string)) {
	emit(fmt.Sprintf("%s fired at %d", key, int64(ts)))
}

func tmKeyed(v int) (string, int) { return "k", v }

func init() {
	register.DoFn6x1[beam.EventTime, state.Provider, timers.Provider, string, int, func(string), error](&tmBatchFn{})
	register.Function1x2(tmKeyed)
}

// tmBatchPipeline: the TestStream (one key, value 1, at 0..4000 and
// 20000..24000 ms, the watermark advanced to each timestamp + 1000 after
// its element, then to the end of time) into tmBatchFn, reshuffled (the sink
// topic the test reads).
func tmBatchPipeline(t *testing.T, offsetMs int64) *beam.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	con := teststream.NewConfig()
	for _, base := range []int64{0, 20000} {
		for i := int64(0); i < 5; i++ {
			ts := base + i*1000
			if err := con.AddElements(ts, 1); err != nil {
				t.Fatal(err)
			}
			if err := con.AdvanceWatermark(ts + 1000); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := con.AdvanceWatermarkToInfinity(); err != nil {
		t.Fatal(err)
	}
	kv := beam.ParDo(s, tmKeyed, teststream.Create(s, con))
	out := beam.ParDo(s, &tmBatchFn{OffsetMs: offsetMs, Count: state.MakeValueState[int]("count"), Fire: timers.InEventTime("fire")}, kv)
	_ = beam.Reshuffle(s, out)
	return p
}

// tmSituations are ways the stateful stage meets the same input; the
// output must be the same in each:
//
//   - one_batch: the stage starts once the TestStream stage has reported
//     the end of time (runner.WithUpstreamsFirst) and reads its ten
//     elements and their reports in one batch, one transaction;
//   - bundles_of_3: the same, with one input partition and
//     --max_bundle_size=3: the 21 records (e0 R1000 e1000 R2000 … e24000
//     R25000 R∞) come in seven batches of three, so a timer's set and its
//     clear are in different bundles and transactions, and the last batch
//     holds the fifth element (the clear) and the report that would make
//     the timer due;
//   - concurrent: every stage runs from the start with the defaults; the
//     stateful stage reads while the TestStream stage writes, about one
//     segment per batch (how many is up to timing).
var tmSituations = []struct {
	name           string
	upstreamsFirst bool
	partitions     int
	maxBundle      int
}{
	{"one_batch", true, 4, 10000},
	{"bundles_of_3", true, 1, 3},
	{"concurrent", false, 4, 10000},
}

func runTimerCase(t *testing.T, offsetMs int64, want []string) {
	b := needBroker(t)
	for _, sit := range tmSituations {
		t.Run(sit.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rctx := ctx
			if sit.upstreamsFirst {
				rctx = runner.WithUpstreamsFirst(ctx)
			}
			r := runApp(t, rctx, b.BootstrapServers(), uniqueName(t, "app"), tmBatchPipeline(t, offsetMs), func(o *runner.Options) { o.MaxBundleSize, o.InternalTopicPartitions = sit.maxBundle, sit.partitions })
			checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), want)
		})
	}
}

// TestTimerFiresAtItsReport: with a 2 s offset each batch's timer is due
// once the watermark passes first + 2 s, before the batch's fourth element:
// it fires, whether the stateful stage read the ten elements and their
// reports in one batch or one by one (Prism gives these four lines; before
// the fix, in one batch, the fifth element cleared the timers first and
// only the batch-done lines came out).
func TestTimerFiresAtItsReport(t *testing.T) {
	runTimerCase(t, 2000, []string{
		"k fired at 2000",
		"k batch-done at 4000",
		"k fired at 22000",
		"k batch-done at 24000",
	})
}

// TestClearedTimerNeverFires: with a 10 s offset the fifth element clears
// each batch's timer before it is due: no timer fires, whether the set and
// the clear met in one bundle or came in different bundles and
// transactions (before the fix, bundles of three gave a third line,
// "k fired at 0": the last attempt popped the second batch's timer at the
// end-of-time report and delivered it in the bundle of the fifth element,
// which cleared it; the SDK then fires the clear, at 0).
func TestClearedTimerNeverFires(t *testing.T) {
	runTimerCase(t, 10000, []string{
		"k batch-done at 4000",
		"k batch-done at 24000",
	})
}

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"

	"github.com/kafkastreams/kafkastreams/runner"
)

func tsKeyed(v int) (string, int) { return "k", v }

func init() { register.Function1x2(tsKeyed) }

// lateDataPipeline is TestTestStreamLateData's pipeline: the TestStream
// below, keyed, in fixed windows of 10 s with 5 s of allowed lateness,
// summed per key and window, reshuffled (the sink topic the tests read);
// with reshuffle, a Reshuffle stage sits between the source and the
// GroupByKey.
func lateDataPipeline(t *testing.T, reshuffle bool) *beam.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	con := teststream.NewConfig()
	for _, step := range []func() error{
		func() error { return con.AddElements(1000, 1) },
		func() error { return con.AddElements(2000, 2) },
		func() error { return con.AdvanceWatermark(11000) },
		func() error { return con.AddElements(3000, 3) },
		func() error { return con.AddElements(15000, 10) },
		func() error { return con.AdvanceWatermark(12000) },
		func() error { return con.AddElements(4000, 4) },
		func() error { return con.AdvanceWatermark(16000) },
		func() error { return con.AddElements(5000, 5) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	in := teststream.Create(s, con)
	if reshuffle {
		in = beam.Reshuffle(s, in)
	}
	kv := beam.ParDo(s, tsKeyed, in)
	kv = beam.WindowInto(s, window.NewFixedWindows(10*time.Second), kv, beam.AllowedLateness(5*time.Second))
	_ = beam.Reshuffle(s, beam.ParDo(s, gbkSum, beam.GroupByKey(s, kv)))
	return p
}

// checkLateData checks a run of lateDataPipeline: every pane exactly once
// with its exact pane info, and one value dropped.
func checkLateData(t *testing.T, ctx context.Context, bs string, r *runner.Result) {
	t.Helper()
	checkLines(t, sinkStrings(t, ctx, bs, r.Plan, true), []string{
		"k [0,10000) ts=9999 LATE/1/1/first=false/last=false n=1 sum=3",
		"k [0,10000) ts=9999 LATE/2/2/first=false/last=true n=1 sum=4",
		"k [0,10000) ts=9999 ON_TIME/0/0/first=true/last=false n=2 sum=3",
		"k [10000,20000) ts=19999 ON_TIME/0/0/first=true/last=true n=1 sum=10",
	})
	var dropped int64
	for _, n := range r.LateDropped {
		dropped += n
	}
	if dropped != 1 {
		t.Errorf("late values dropped: got %d (%v), want 1 (5@5000 after the window expired)", dropped, r.LateDropped)
	}
}

// TestTestStreamLateData replays a TestStream whose watermark advances
// between its elements, through fixed windows of 10 s with 5 s of allowed
// lateness and a GroupByKey sum, on the real broker. Window [0,10000) has
// max timestamp 9999 and expires once the watermark passes 14999:
//
//	add 1@1000, 2@2000; wm 11000  -> ON_TIME pane [1 2]
//	add 3@3000, 10@15000; wm 12000 -> LATE pane [3] (late, within lateness)
//	add 4@4000; wm 16000          -> LATE pane [4], the last: the window closes
//	add 5@5000                    -> dropped (expired) and counted
//	end of stream (end of time)   -> [10000,20000) ON_TIME pane [10], the last
//
// Every pane exactly once in the sink topic (read_committed), with its
// exact pane info; one value dropped.
func TestTestStreamLateData(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), lateDataPipeline(t, false))
	checkLateData(t, ctx, b.BootstrapServers(), r)
}

// TestLateDataThroughAStatelessStage: the TestStream of
// TestTestStreamLateData, with a Reshuffle stage between the source and the
// GroupByKey, in two situations: every stage running from the start, and
// each stage starting once its upstream has finished
// (runner.WithUpstreamsFirst), so that the Reshuffle stage reads every
// segment's elements and reports in one batch. The panes and the drop count
// must be the same: the Reshuffle stage writes each upstream report after
// the outputs of the records before it and before those after it (a point
// in the stream), so 3@3000 stays late at the GroupByKey however the
// records were batched. (Before the step, one batch put every report after
// every element, and the late values were on time.)
//
// With one partition per internal topic: with P tasks the GroupByKey's
// input watermark is the minimum over P parallel Reshuffle tasks, and
// whether a value that is late at the source is still late there depends
// on how far the other tasks have got, as in any parallel runner (Flink's
// operator watermark is the minimum over its input channels too).
func TestLateDataThroughAStatelessStage(t *testing.T) {
	b := needBroker(t)
	for _, upstreamsFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("upstreams_first=%v", upstreamsFirst), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rctx := ctx
			if upstreamsFirst {
				rctx = runner.WithUpstreamsFirst(ctx)
			}
			r := runApp(t, rctx, b.BootstrapServers(), uniqueName(t, "app"), lateDataPipeline(t, true), func(o *runner.Options) { o.InternalTopicPartitions = 1 })
			checkLateData(t, ctx, b.BootstrapServers(), r)
		})
	}
}

// procTimePipeline is the stream of the Beam primitives
// TriggerAfterProcessingTime (advance 5000) and ...NotTriggered (advance
// 4999): processing time +100, 1 2 3 at 1000, processing time +advance, 4
// at 22000; keyed, in the global window with trigger tr, discarding,
// summed per key (gbkSum: pane info and sum), reshuffled (the sink topic).
func procTimePipeline(t *testing.T, advance int64, tr trigger.Trigger) *beam.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	con := teststream.NewConfig()
	for _, step := range []func() error{
		func() error { con.AdvanceProcessingTime(100); return nil },
		func() error { return con.AddElements(1000, 1, 2, 3) },
		func() error { con.AdvanceProcessingTime(advance); return nil },
		func() error { return con.AddElements(22000, 4) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	kv := beam.ParDo(s, tsKeyed, teststream.Create(s, con))
	kv = beam.WindowInto(s, window.NewGlobalWindows(), kv, beam.Trigger(tr), beam.PanesDiscard())
	_ = beam.Reshuffle(s, beam.ParDo(s, gbkSum, beam.GroupByKey(s, kv)))
	return p
}

// TestTestStreamProcessingTime: TestStream's AdvanceProcessingTime moves
// the job clock (step.Config.JobClock): the GroupByKey's
// AfterProcessingTime(+5 s) trigger, set at clock 100 by the first
// element, fires at the report that moves the clock to 5100, before 4
// arrives, in one batch (runner.WithUpstreamsFirst) as in many:
//
//   - once (the primitive TriggerAfterProcessingTime's pipeline): the EARLY
//     pane [1 2 3] is the last: the trigger finished, so by the Beam model
//     the window is closed and 4 is dropped (Java's ReduceFnRunner counts
//     it droppedDueToClosedWindow). The primitive expects [6 4], as Prism
//     gives; that is why it stays skipped (primitives_test.go).
//   - Repeatedly: [1 2 3] EARLY at 5100, then [4] ON_TIME at the end of
//     the global window (end of time: the stream ended).
//   - once, with an advance of 4999 (the primitive
//     TriggerAfterProcessingTimeNotTriggered): the deadline 5100 is never
//     reached; [1 2 3 4] ON_TIME at the end of the window.
func TestTestStreamProcessingTime(t *testing.T) {
	b := needBroker(t)
	cases := []struct {
		name    string
		advance int64
		tr      trigger.Trigger
		want    []string
	}{
		{"once", 5000, trigger.AfterProcessingTime().PlusDelay(5 * time.Second), []string{
			"k global ts=eogw EARLY/0/-1/first=true/last=true n=3 sum=6",
		}},
		{"repeatedly", 5000, trigger.Repeat(trigger.AfterProcessingTime().PlusDelay(5 * time.Second)), []string{
			"k global ts=eogw EARLY/0/-1/first=true/last=false n=3 sum=6",
			"k global ts=eogw ON_TIME/1/0/first=false/last=true n=1 sum=4",
		}},
		{"not_triggered", 4999, trigger.AfterProcessingTime().PlusDelay(5 * time.Second), []string{
			"k global ts=eogw ON_TIME/0/0/first=true/last=true n=4 sum=10",
		}},
	}
	for _, c := range cases {
		for _, upstreamsFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/upstreams_first=%v", c.name, upstreamsFirst), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				rctx := ctx
				if upstreamsFirst {
					rctx = runner.WithUpstreamsFirst(ctx)
				}
				r := runApp(t, rctx, b.BootstrapServers(), uniqueName(t, "app"), procTimePipeline(t, c.advance, c.tr))
				checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), c.want)
			})
		}
	}
}

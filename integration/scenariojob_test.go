package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// The scenario job: one unbounded pipeline that the five scenarios of
// scenarios_test.go run as OS processes sharing one --application_id
// (instances_test.go's child processes). Three stages:
//
//  1. the Kafka source (kafkaio.Read of the input topic, bounded
//     out-of-orderness scOutOfOrder, idleness scIdleness), the stateless
//     parse (scParse) and the Combine's pre-combine;
//  2. the Combine's GroupByKey: per key, the sum of the amounts in fixed
//     windows of scWindow (stats.SumPerKey), each window's sum re-windowed
//     into the global window;
//  3. a stateful DoFn (scRunningTotal) that keeps per key the windows'
//     sums not emitted yet and the running total, and emits, when the
//     event-time timer at a window's end fires, "start|sum|total" for that
//     window and every earlier one not emitted yet, in window order; its
//     output goes to the output topic (kafkaio.Write, in the stage's
//     transactions).
//
// An input record is key "k<n>" with value the amount (decimal) and its
// CreateTime the event time; a record keyed scTickKey is no element (the
// parse drops it): the test writes one far ahead in event time to every
// partition at the end, to move every partition's watermark past the last
// window.

// Environment of the "scenario" child pipeline.
const (
	envScenarioIn       = "KAFKASTREAMS_SCENARIO_IN"        // the input topic
	envScenarioOut      = "KAFKASTREAMS_SCENARIO_OUT"       // the output topic
	envScenarioStateDir = "KAFKASTREAMS_SCENARIO_STATE_DIR" // --state_dir of this copy
)

const (
	// scWindow is the job's fixed window.
	scWindow = 2 * time.Second
	// scOutOfOrder is the source's bounded out-of-orderness: a partition's
	// watermark is its newest event time minus this.
	scOutOfOrder = time.Second
	// scIdleness is the source's idleness.
	scIdleness = 5 * time.Second
	// scTickKey marks the records that only move the watermark.
	scTickKey = "tick"
)

// scParse turns an input record into (key, amount); ticks and records
// whose value is no number are dropped (the test writes none of the
// latter: a drop would show as a missing amount).
func scParse(key, value []byte, emit func(string, int64)) {
	if string(key) == scTickKey {
		return
	}
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return
	}
	emit(string(key), n)
}

// scWindowSum formats a window's sum as "start|sum", the window's start in
// Unix ms.
func scWindowSum(w beam.Window, key string, sum int64) (string, string) {
	iw := w.(window.IntervalWindow)
	return key, fmt.Sprintf("%d|%d", int64(iw.Start), sum)
}

// scRunningTotal keeps, per key, the window sums ("start|sum") not emitted
// yet and the total of those emitted. The first window sum of a window
// sets an event-time timer at the element's timestamp (the window's last
// millisecond, tagged with the window's start); when a timer fires, every
// pending window that ends at or before the timer's time is emitted in
// window order as "start|sum|total", total the running total through that
// window. The output is thus one record per (key, window), whatever order
// the sums and timers came in, and a window fired early (before an
// earlier one of its key) shows as a wrong total.
type scRunningTotal struct {
	Pending state.Bag[string]
	Total   state.Value[int64]
	Fire    timers.EventTime
}

// ProcessElement emits nothing (emit is there because Beam wants the same
// emitters as OnTimer).
func (f *scRunningTotal) ProcessElement(ts beam.EventTime, sp state.Provider, tp timers.Provider, key, startSum string, _ func([]byte, []byte)) error {
	if err := f.Pending.Add(sp, startSum); err != nil {
		return err
	}
	start, _, _ := strings.Cut(startSum, "|")
	f.Fire.Set(tp, ts.ToTime(), timers.WithTag(start))
	return nil
}

func (f *scRunningTotal) OnTimer(_ context.Context, ts beam.EventTime, sp state.Provider, _ timers.Provider, key string, _ timers.Context, emit func([]byte, []byte)) error {
	pending, _, err := f.Pending.Read(sp)
	if err != nil {
		return err
	}
	total, _, err := f.Total.Read(sp)
	if err != nil {
		return err
	}
	type win struct{ start, sum int64 }
	var due []win
	var keep []string
	for _, p := range pending {
		s, v, _ := strings.Cut(p, "|")
		start, err1 := strconv.ParseInt(s, 10, 64)
		sum, err2 := strconv.ParseInt(v, 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("scRunningTotal: pending %q", p)
		}
		if start+scWindow.Milliseconds()-1 <= int64(ts) {
			due = append(due, win{start, sum})
		} else {
			keep = append(keep, p)
		}
	}
	if len(due) == 0 {
		return nil
	}
	sort.Slice(due, func(i, j int) bool { return due[i].start < due[j].start })
	for _, w := range due {
		total += w.sum
		emit([]byte(key), []byte(fmt.Sprintf("%d|%d|%d", w.start, w.sum, total)))
	}
	if err := f.Total.Write(sp, total); err != nil {
		return err
	}
	if err := f.Pending.Clear(sp); err != nil {
		return err
	}
	for _, p := range keep {
		if err := f.Pending.Add(sp, p); err != nil {
			return err
		}
	}
	return nil
}

func init() {
	register.Function3x0(scParse)
	register.Emitter2[string, int64]()
	register.Function3x2(scWindowSum)
	register.DoFn6x1[beam.EventTime, state.Provider, timers.Provider, string, string, func([]byte, []byte), error](&scRunningTotal{})
	register.Emitter2[[]byte, []byte]()
	childPipelines["scenario"] = func(o *runner.Options) *beam.Pipeline {
		o.StateDir = os.Getenv(envScenarioStateDir)
		// Log times to the millisecond (slog's text format): the test
		// reads the task assignments from the log.
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
		// The scenarios measure the runner's own handover settings, not
		// the short session timeout runChild gives other children.
		delete(o.KafkaProperties, "session.timeout.ms")
		return scenarioPipeline(os.Getenv(envScenarioIn), os.Getenv(envScenarioOut))
	}
}

// scenarioPipeline is the scenario job: in → parse → fixed windows → sum
// per key → global window → running total per key → out.
func scenarioPipeline(in, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	recs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(scOutOfOrder), kafkaio.WithIdleness(scIdleness))
	amounts := beam.ParDo(s, scParse, recs)
	sums := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(scWindow), amounts))
	perWindow := beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, scWindowSum, sums))
	totals := beam.ParDo(s, &scRunningTotal{
		Pending: state.MakeBagState[string]("pending"),
		Total:   state.MakeValueState[int64]("total"),
		Fire:    timers.InEventTime("fire"),
	}, perWindow)
	kafkaio.Write(s, out, totals)
	return p
}

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// ptSum formats a key's sum as a plain record value.
func ptSum(key []byte, n int) []byte { return []byte(fmt.Sprintf("%s %d", key, n)) }

func init() { register.Function2x1(ptSum) }

// ptTimerFn counts a key's values in state; the first sets a
// processing-time timer 1 s ahead, which emits "<key> <count>" (the Go SDK
// wants the same emitters on ProcessElement and OnTimer).
type ptTimerFn struct {
	Count state.Value[int]
	Fire  timers.ProcessingTime
}

func (f *ptTimerFn) ProcessElement(sp state.Provider, tp timers.Provider, key []byte, v int, _ func([]byte)) error {
	n, _, err := f.Count.Read(sp)
	if err != nil {
		return err
	}
	if n == 0 {
		f.Fire.Set(tp, time.Now().Add(time.Second))
	}
	return f.Count.Write(sp, n+v)
}

func (f *ptTimerFn) OnTimer(_ context.Context, sp state.Provider, _ timers.Provider, key []byte, _ timers.Context, emit func([]byte)) error {
	n, _, err := f.Count.Read(sp)
	if err != nil {
		return err
	}
	emit([]byte(fmt.Sprintf("%s %d", key, n)))
	return f.Count.Clear(sp)
}

func init() {
	register.DoFn5x1[state.Provider, timers.Provider, []byte, int, func([]byte), error](&ptTimerFn{})
}

// TestProcessingTimeOnQuietInput: three records, then nothing: an unbounded
// Kafka read (idleness off, so no report follows the first) whose output
// only processing time can bring, on the wall clock, though no record or
// report arrives after the three. Before, both fired only at the task's
// next record or report, so on a quiet input never.
//
//   - trigger: the global window with Repeatedly(AfterProcessingTime(+1 s)),
//     discarding: the GroupByKey's task is woken when the trigger's
//     deadline passes (its head's Wake) and fires the pane [3].
//   - timer: a stateful DoFn sets a processing-time timer 1 s after its
//     first element: the stateful task is woken when the timer is due
//     (userstate.Head.Wake) and fires it.
//
// Either way the output is "all 3", once.
func TestProcessingTimeOnQuietInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		// build adds the part under test to s: ones are (key, 1) pairs read
		// from the input; it returns the lines to write.
		build func(s beam.Scope, ones beam.PCollection) beam.PCollection
	}{
		{"trigger", func(s beam.Scope, ones beam.PCollection) beam.PCollection {
			win := beam.WindowInto(s, window.NewGlobalWindows(), ones,
				beam.Trigger(trigger.Repeat(trigger.AfterProcessingTime().PlusDelay(time.Second))), beam.PanesDiscard())
			return beam.ParDo(s, ptSum, stats.SumPerKey(s, win))
		}},
		{"timer", func(s beam.Scope, ones beam.PCollection) beam.PCollection {
			return beam.ParDo(s, &ptTimerFn{Count: state.MakeValueState[int]("count"), Fire: timers.InProcessingTime("fire")}, ones)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := needBroker(t)
			bs := b.BootstrapServers()
			in, out := uniqueName(t, "in"), uniqueName(t, "out")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1)); err != nil {
				t.Fatal(err)
			}
			produceAt(t, bs, in, 0,
				kioRec{key: []byte("k"), value: []byte("a"), ts: 1_700_000_000_000},
				kioRec{key: []byte("k"), value: []byte("b"), ts: 1_700_000_001_000},
				kioRec{key: []byte("k"), value: []byte("c"), ts: 1_700_000_002_000})
			p, s := beam.NewPipelineWithRoot()
			kvs := kafkaio.Read(s, in, kafkaio.WithIdleness(-1))
			kafkaio.Write(s, out, tc.build(s, beam.ParDo(s, kioConst, kvs)))
			jctx, jcancel := context.WithCancel(ctx)
			done := startJob(jctx, bs, uniqueName(t, "app"), p)
			defer func() { jcancel(); <-done }()
			start := time.Now()
			got := readValues(t, bs, out, 1, 30*time.Second)
			if strings.Join(got, "|") != "all 3" {
				t.Fatalf("output %q after %v, want \"all 3\" fired by processing time", got, time.Since(start).Round(time.Millisecond))
			}
			t.Logf("fired on a quiet input %v after the job started", time.Since(start).Round(time.Millisecond))
			if got := readValues(t, bs, out, 2, 3*time.Second); len(got) != 1 {
				t.Errorf("output %q, want one line only (no new value, no new output)", got)
			}
		})
	}
}

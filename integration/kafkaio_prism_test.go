package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// An unbounded kafkaio.Read on Prism: the splittable DoFn of runner/kafkaio
// (one restriction per partition, self-checkpointing, a watermark estimator
// per partition), against the real broker.

// TestKafkaUnboundedReadOnPrism: an unbounded Read (bounded out-of-orderness
// 10 s) of a topic of three partitions; 1-minute windows; a count per
// window, written to an output topic; the test cancels the Prism job once
// it has checked the windows. B is a minute boundary in 2023; partition p's
// records are at B + 0, 10, …, 170 s (+ p × 100 ms).
//
//   - "closing records": idleness off; every partition holds 18 records and
//     then one closing record at B + 600 s. The windows [B, B+60 s), [B+60,
//     B+120 s) and [B+120, B+180 s) fire with 18 records each, and only
//     once every partition's watermark (its closing record's B + 590 s) has
//     passed them: the last one has no record of its own to move the
//     watermark past its end. The closing records' window [B+600, B+660 s)
//     never fires (the watermark stays at B + 590 s).
//   - "empty partition": WithLimitedDelay(10 s); partitions 0 and 1 hold
//     18 records each, partition 2 none. The three windows fire with 12
//     records each once the partitions have been read to their ends: their
//     newest event times (2023) are more than 10 s behind the wall clock,
//     so each follows it less 10 s (Beam Java's limited delay), and the
//     empty partition does too. (It used idleness, under which an idle
//     partition followed the wall clock on Prism only; idleness is refused
//     there now: TestLimitedDelaySameOnBothRunners.)
//
// Each fails if the Read reads nothing, reads a record twice or not at
// all, or its watermark does not advance as its strategy says.
func TestKafkaUnboundedReadOnPrism(t *testing.T) {
	win := func(i, n int) string {
		return fmt.Sprintf("all [%d,%d) %d", prismBase+int64(i)*60_000, prismBase+int64(i+1)*60_000, n)
	}
	t.Run("closing records", func(t *testing.T) {
		unboundedOnPrism(t, []int32{0, 1, 2}, true, []kafkaio.Option{kafkaio.WithIdleness(-1)}, []string{win(0, 18), win(1, 18), win(2, 18)})
	})
	t.Run("empty partition", func(t *testing.T) {
		unboundedOnPrism(t, []int32{0, 1}, false, []kafkaio.Option{kafkaio.WithLimitedDelay(10 * time.Second)}, []string{win(0, 12), win(1, 12), win(2, 12)})
	})
}

// prismBase is TestKafkaUnboundedReadOnPrism's B: a minute boundary in
// 2023, in ms since the Unix epoch.
const prismBase = 1_700_000_040_000

// unboundedOnPrism runs TestKafkaUnboundedReadOnPrism's pipeline on Prism
// over a new topic of three partitions, of which parts get 18 records each
// (and a closing record each if closing), with the Read's options opts
// besides a 10 s out-of-orderness bound; it checks that the output topic
// holds exactly want, also a moment after the last of them came, and
// cancels the job.
func unboundedOnPrism(t *testing.T, parts []int32, closing bool, opts []kafkaio.Option, want []string) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 3), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		var recs []kioRec
		for i := int64(0); i < 18; i++ {
			recs = append(recs, kioRec{key: []byte(fmt.Sprintf("k%d", i%3)), value: []byte("v"), ts: prismBase + i*10_000 + int64(p)*100})
		}
		if closing {
			recs = append(recs, kioRec{key: []byte("close"), value: []byte("v"), ts: prismBase + 600_000})
		}
		produceAt(t, bs, in, p, recs...)
	}

	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, append([]kafkaio.Option{kafkaio.WithBoundedOutOfOrderness(10 * time.Second)}, opts...)...)
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioFormat, beam.ParDo(s, kioBytesKey, counted)))

	t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs) // kafkaio's DoFns on Prism
	if !beam.Initialized() {
		beam.Init()
	}
	jobCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := prism.Execute(jobCtx, p)
		done <- err
	}()
	defer func() {
		stop()
		select {
		case err := <-done:
			t.Logf("prism job ended after cancel: %v", err)
		case <-time.After(30 * time.Second):
			t.Errorf("the prism job did not end within 30 s of its cancel")
		}
	}()

	got := readValues(t, bs, out, len(want), 60*time.Second)
	t.Logf("%d windows after %v", len(got), time.Since(start).Round(time.Millisecond))
	select {
	case err := <-done:
		t.Fatalf("the unbounded prism job ended by itself: %v", err)
	default:
	}
	// No other window fires: read again, for a moment longer than a few
	// checkpoint rounds, asking for one record more.
	time.Sleep(2 * time.Second)
	got = readValues(t, bs, out, len(want)+1, 3*time.Second)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("windows on Prism:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// kioBytesKey turns a string key back into bytes for kioFormat's caller.
func kioBytesKey(key []byte, n int) (string, int) { return string(key), n }

func init() {
	register.Function2x2(kioBytesKey)
}

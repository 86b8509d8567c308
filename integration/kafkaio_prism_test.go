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
// 10 s, idleness off) of a topic of three partitions, each holding 18
// records at B + 0, 10, …, 170 s (+ p × 100 ms) and then one closing record
// at B + 600 s; 1-minute windows; a count per window, written to an output
// topic. On Prism the windows [B, B+60 s), [B+60, B+120 s) and [B+120,
// B+180 s) fire with 18 records each, and only once every partition's
// watermark (its closing record's B + 590 s) has passed them: the last one
// has no record of its own to move the watermark past its end. The
// closing records' window [B+600, B+660 s) never fires (the watermark stays
// at B + 590 s, the job never ends), and the test then cancels the job. It
// fails if the Read reads nothing, reads a record twice or not at all, or
// its watermark does not advance from the records' Kafka timestamps.
func TestKafkaUnboundedReadOnPrism(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 3), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000 // a minute boundary in 2023
	for p := int32(0); p < 3; p++ {
		var recs []kioRec
		for i := int64(0); i < 18; i++ {
			recs = append(recs, kioRec{key: []byte(fmt.Sprintf("k%d", i%3)), value: []byte("v"), ts: base + i*10_000 + int64(p)*100})
		}
		recs = append(recs, kioRec{key: []byte("close"), value: []byte("v"), ts: base + 600_000})
		produceAt(t, bs, in, p, recs...)
	}

	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(10*time.Second), kafkaio.WithIdleness(-1))
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

	want := []string{
		fmt.Sprintf("all [%d,%d) 18", base, base+60_000),
		fmt.Sprintf("all [%d,%d) 18", base+60_000, base+120_000),
		fmt.Sprintf("all [%d,%d) 18", base+120_000, base+180_000),
	}
	got := readValues(t, bs, out, len(want), 60*time.Second)
	t.Logf("%d windows after %v", len(got), time.Since(start).Round(time.Millisecond))
	select {
	case err := <-done:
		t.Fatalf("the unbounded prism job ended by itself: %v", err)
	default:
	}
	// The closing window must not fire: read again, for a moment longer
	// than a checkpoint round, asking for one record more.
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

package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// TestDrainKafkaSource: an unbounded job reads a topic of two partitions
// (records at B+0, 10, …, 170 s in each, idleness off) and counts them in
// 1-minute windows. The watermark (B+170 s) fires [B, B+60 s) and
// [B+60, B+120 s) and holds the last window open; the job runs on. A drain
// asked with SIGUSR1 to the running instance (this test process: the
// runner's handler writes the request to the control topic; TestDrain in
// the primitives asks with runner.Drain) takes the source's watermark to
// the end of time: the
// last window fires with its 12 records and the job ends by itself. Every
// window is in the output exactly once. A record written to the topic after
// the drain is not read (the job has ended, its offsets stay uncommitted).
func TestDrainKafkaSource(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000 // a minute boundary
	for p := int32(0); p < 2; p++ {
		var recs []kioRec
		for s := int64(0); s < 180; s += 10 {
			recs = append(recs, kioRec{key: []byte("k"), value: []byte("v"), ts: base + s*1000})
		}
		produceAt(t, bs, in, p, recs...)
	}
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1))
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))
	app := uniqueName(t, "app")
	done := startJob(ctx, bs, app, p)

	window := func(m int64) string { return fmt.Sprintf("[%d,%d) 12", base+m*60000, base+(m+1)*60000) }
	if got := readValues(t, bs, out, 2, 60*time.Second); strings.Join(got, "|") != window(0)+"|"+window(1) {
		t.Fatalf("before the drain: output %q, want the first two windows", got)
	}
	select {
	case err := <-done:
		t.Fatalf("the unbounded job ended before the drain: %v", err)
	case <-time.After(2 * time.Second):
	}
	if got := readValues(t, bs, out, 3, time.Second); len(got) != 2 {
		t.Fatalf("before the drain: %d windows, want 2 (the last is held open)", len(got))
	}
	start := time.Now()
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drained job: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the job did not end after the drain")
	}
	t.Logf("the drained job ended %v after the request", time.Since(start).Round(time.Millisecond))
	produceAt(t, bs, in, 0, kioRec{key: []byte("k"), value: []byte("late"), ts: base + 10_000})
	want := window(0) + "|" + window(1) + "|" + window(2)
	if got := readValues(t, bs, out, 0, 5*time.Second); strings.Join(got, "|") != want {
		t.Fatalf("after the drain: output %q, want %q (each window once)", got, want)
	}
}

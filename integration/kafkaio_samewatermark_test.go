package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// The same watermark for the same source on every runner (issue 21,
// section 3): one pipeline, run on Prism and on this runner.

// quietDelay is the limited delay of these tests' Reads.
const quietDelay = 2 * time.Second

// quietTopic creates a one-partition input topic and an output topic per
// name of outs, and writes the records to the input: three at
// now − 30 s, now − 15 s and now (CreateTime), then silence. It returns the
// input topic, the output topics, the windows the records fall in as
// kioWindowCount writes them ("[start,end) n", sorted), and the end of the
// last of those windows.
func quietTopic(t *testing.T, ctx context.Context, bs string, outs ...string) (in string, out map[string]string, want []string, lastEnd time.Time) {
	t.Helper()
	in = uniqueName(t, "in")
	out = map[string]string{}
	specs := []kafkaenv.TopicSpec{userTopic(in, 1)}
	for _, o := range outs {
		out[o] = uniqueName(t, "out-"+o)
		specs = append(specs, userTopic(out[o], 1))
	}
	if err := kafkaenv.CreateTopics(ctx, bs, specs...); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	counts := map[int64]int{}
	var recs []kioRec
	for i, back := range []int64{30_000, 15_000, 0} {
		ts := now - back
		recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", i)), value: []byte("v"), ts: ts})
		counts[ts-ts%60_000]++
	}
	produceAt(t, bs, in, 0, recs...)
	var end int64
	for start, n := range counts {
		want = append(want, fmt.Sprintf("[%d,%d) %d", start, start+60_000, n))
		end = max(end, start+60_000)
	}
	slices.Sort(want)
	t.Logf("records at %d − 30 s … %d; windows %q", now, now, want)
	return in, out, want, time.UnixMilli(end)
}

// quietPipeline is the pipeline: kafkaio.Read of in with opts,
// 1-minute fixed windows, a count per window, kafkaio.Write to out.
func quietPipeline(in, out string, opts ...kafkaio.Option) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, opts...)
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))
	return p
}

// TestLimitedDelaySameOnBothRunners: the case (one partition, three
// records at now − 30 s … now, then silence; 1-minute windows; a count per
// window) with kafkaio.WithLimitedDelay(2 s), run at once on Prism (in
// this process) and on this runner against the real broker: both write the
// same window counts, each within 6 s of the end of the last window (its
// end plus the delay, plus a report a second on this runner, a checkpoint
// every 200 ms on Prism), with no record after the quiet topic's last.
// Then the default strategy (idleness, here 3 s) of the same pipeline is
// refused on Prism, naming WithLimitedDelay and WithIdleness(-1)
// (TestKafkaSourceAllIdleHolds shows this runner holding it). Before,
// there was no limited delay, and Prism fired a window kafkastreams held
// 1.6 s after its end.
func TestLimitedDelaySameOnBothRunners(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, want, lastEnd := quietTopic(t, ctx, bs, "prism", "kafkastreams")

	t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs) // kafkaio's DoFns on Prism
	if !beam.Initialized() {
		beam.Init()
	}
	jctx, jcancel := context.WithCancel(ctx)
	prismDone := make(chan error, 1)
	go func() {
		_, err := prism.Execute(jctx, quietPipeline(in, out["prism"], kafkaio.WithLimitedDelay(quietDelay)))
		prismDone <- err
	}()
	ksDone := startJob(jctx, bs, uniqueName(t, "app"), quietPipeline(in, out["kafkastreams"], kafkaio.WithLimitedDelay(quietDelay)))
	defer func() {
		jcancel()
		for name, done := range map[string]<-chan error{"prism": prismDone, "kafkastreams": ksDone} {
			select {
			case err := <-done:
				t.Logf("%s job ended after cancel: %v", name, err)
			case <-time.After(30 * time.Second):
				t.Errorf("the %s job did not end within 30 s of its cancel", name)
			}
		}
	}()

	type result struct {
		runner string
		got    []string
		after  time.Duration // after the last window's end
	}
	results := make(chan result, 2)
	for _, r := range []string{"prism", "kafkastreams"} {
		go func() {
			recs, err := kafkaenv.Consume(ctx, bs, out[r], len(want), kafkaenv.ReadCommitted, time.Until(lastEnd)+30*time.Second)
			if err != nil && !errors.Is(err, kafkaenv.ErrTimeout) {
				t.Errorf("%s: read %s: %v", r, out[r], err)
			}
			var got []string
			for _, rec := range recs {
				got = append(got, string(rec.Value))
			}
			slices.Sort(got)
			results <- result{r, got, time.Since(lastEnd)}
		}()
	}
	got := map[string][]string{}
	for range 2 {
		r := <-results
		got[r.runner] = r.got
		t.Logf("%s: %q, %v after the last window's end", r.runner, r.got, r.after.Round(10*time.Millisecond))
		if len(r.got) == len(want) && r.after > 6*time.Second {
			t.Errorf("%s fired %v after the last window's end, want within 6 s (its end plus the 2 s delay, plus a report)", r.runner, r.after.Round(10*time.Millisecond))
		}
	}
	for _, r := range []string{"prism", "kafkastreams"} {
		select {
		case err := <-map[string]<-chan error{"prism": prismDone, "kafkastreams": ksDone}[r]:
			t.Fatalf("the unbounded %s job ended by itself: %v", r, err)
		default:
		}
	}
	// No other window fires: read again a moment later, asking for one more.
	time.Sleep(2 * time.Second)
	for _, r := range []string{"prism", "kafkastreams"} {
		got[r] = readValues(t, bs, out[r], len(want)+1, 3*time.Second)
		if !slices.Equal(got[r], want) {
			t.Errorf("%s wrote %q, want %q", r, got[r], want)
		}
	}
	if !slices.Equal(got["prism"], got["kafkastreams"]) {
		t.Errorf("the runners differ: prism %q, kafkastreams %q", got["prism"], got["kafkastreams"])
	}

	t.Run("default strategy refused on prism", func(t *testing.T) {
		pctx, pcancel := context.WithTimeout(ctx, time.Minute)
		defer pcancel()
		_, err := prism.Execute(pctx, quietPipeline(in, uniqueName(t, "unused"), kafkaio.WithIdleness(3*time.Second)))
		if err == nil || !strings.Contains(err.Error(), "WithLimitedDelay") || !strings.Contains(err.Error(), "WithIdleness(-1)") {
			t.Fatalf("prism with WithIdleness(3s): %v; want the refusal naming WithLimitedDelay and WithIdleness(-1)", err)
		}
		t.Logf("refused: %v", err)
	})
}

// TestKafkaSourceAllIdleHolds: the default strategy (bounded
// out-of-orderness 0, idleness 3 s) on this runner, with the issue's
// records: the only partition idles out 3 s after its last record, and a
// source whose every partition is idle holds its watermark, so the window
// of its newest record does not fire (an earlier one the newest record
// passed does), 8 s after that window's end (when WithLimitedDelay(2 s) has
// fired it: TestLimitedDelaySameOnBothRunners); GET /watermarks shows the
// partition idle. A record two minutes later then fires them with their
// counts: the watermark held, the pipeline was not stuck.
func TestKafkaSourceAllIdleHolds(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, want, lastEnd := quietTopic(t, ctx, bs, "kafkastreams")

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), quietPipeline(in, out["kafkastreams"], kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(3*time.Second)))
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)

	// The records span one or two windows (now − 30 s may be in the minute
	// before now's): a window ending at or before the newest record is
	// passed by the watermark (newest − 0) and fires; the last one, whose
	// end is after it, must not while the partition is idle. (A CI run
	// failed here when the three records straddled a minute: the first
	// window fired, as it should.)
	early := want[:len(want)-1]
	if got := readValues(t, bs, out["kafkastreams"], len(early)+1, time.Until(lastEnd)+8*time.Second); !slices.Equal(got, early) {
		t.Fatalf("every partition idle: windows %q fired, want only those the newest record passed, %q", got, early)
	}
	rows := sourcePartitionRows(t, "http://"+addr+"/watermarks")
	if len(rows) != 1 || !strings.Contains(rows[0], "idle=true") {
		t.Errorf("GET /watermarks source partitions %q, want partition 0 idle", rows)
	}
	closer := lastEnd.Add(2 * time.Minute).UnixMilli()
	produceAt(t, bs, in, 0, kioRec{key: []byte("close"), value: []byte("v"), ts: closer})
	got := readValues(t, bs, out["kafkastreams"], len(want), 30*time.Second)
	if !slices.Equal(got, want) {
		t.Errorf("after a record at the last window's end + 2 min: %q, want %q", got, want)
	}
}

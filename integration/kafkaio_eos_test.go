package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// Exactly once through the Kafka sink across a SIGKILL: a child instance
// reading topic A and writing topics B and C with kafkaio is killed
// mid-stream and restarted.

// Environment of the "kafkaio-eos" child pipeline (besides instances_test.go's).
const (
	envEOSIn       = "KAFKASTREAMS_CHILD_EOS_IN"        // topic A
	envEOSOut      = "KAFKASTREAMS_CHILD_EOS_OUT"       // topic B: every record, mapped
	envEOSCounts   = "KAFKASTREAMS_CHILD_EOS_COUNTS"    // topic C: per-key counts in 1-minute windows
	envEOSStateDir = "KAFKASTREAMS_CHILD_EOS_STATE_DIR" // --state_dir
)

var eosMapped = beam.NewCounter("kafkastreams.test", "eos_mapped")

// kioEOSMap maps record (key, value) to (key, "B:"+value), sleeping
// SlowMicros µs per record so that a test can kill the job mid-stream.
type kioEOSMap struct {
	SlowMicros int
}

func (f *kioEOSMap) ProcessElement(ctx context.Context, key, value []byte, emit func([]byte, []byte)) {
	if f.SlowMicros > 0 {
		time.Sleep(time.Duration(f.SlowMicros) * time.Microsecond)
	}
	eosMapped.Inc(ctx, 1)
	emit(key, append([]byte("B:"), value...))
}

func init() {
	register.DoFn4x0[context.Context, []byte, []byte, func([]byte, []byte)](&kioEOSMap{})
	register.Emitter2[[]byte, []byte]()
	childPipelines["kafkaio-eos"] = func(o *runner.Options) *beam.Pipeline {
		slow, _ := strconv.Atoi(os.Getenv(envChildSlow))
		o.StateDir = os.Getenv(envEOSStateDir)
		// Small transactions: output is committed to B early and often, so
		// that a kill finds some committed and some still to do.
		o.MaxBundleSize = 100
		return kioEOSPipeline(os.Getenv(envEOSIn), os.Getenv(envEOSOut), os.Getenv(envEOSCounts), slow)
	}
}

// kioEOSPipeline: a bounded Read of in (bounded out-of-orderness 0,
// idleness off: a partition is done only at its end, so no record is
// late), each record mapped by kioEOSMap and written to out (the source
// stage's transactions), and per key a count in 1-minute windows written
// to counts (a GroupByKey stage's transactions, its state in a changelog).
func kioEOSPipeline(in, out, counts string, slowMicros int) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1))
	kafkaio.Write(s, out, beam.ParDo(s, &kioEOSMap{SlowMicros: slowMicros}, kvs))
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioKeyOf, kvs)))
	kafkaio.Write(s, counts, beam.ParDo(s, kioFormat, counted))
	return p
}

// TestKafkaSinkExactlyOnceAfterSIGKILL is the test 7: exactly once
// through the sink. Topic A (3 partitions, 3 000 records, event times
// 100 ms apart per partition) is read by a bounded kafkaio.Read in a child
// process that writes every record, mapped, to B (kafkaio.Write from the
// source stage) and per-key counts in 1-minute windows to C (from the
// GroupByKey stage), 100 records per transaction. Once B holds 300
// committed records, the child is SIGKILLed, at the first moment a
// transaction with records in B is seen open (B's log end past its last
// stable offset), and started again with the same --application_id and
// --state_dir: it takes over the killed instance's transactional ids
// (aborting what it left open), resumes from the committed offsets and
// ends by itself (exit 0); its source stage reads what the killed one had
// not committed. Then B, read read_committed, holds each of the 3 000 records
// exactly once, with its key and "B:"+value; C holds each window's count
// exactly once, equal to a direct computation; and the application's
// counter of mapped records is 3 000 (the killed instance's committed
// bundles counted once, its open transaction's not at all). It guards the
// sink's records being in the producing stage's transactions, the source
// offsets committed in the same transactions, and the take-over's abort of
// what the killed instance left open.
func TestKafkaSinkExactlyOnceAfterSIGKILL(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, counts := uniqueName(t, "a"), uniqueName(t, "b"), uniqueName(t, "c")
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 3, Config: keepOld}, kafkaenv.TopicSpec{Name: out, Partitions: 4, Config: keepOld}, kafkaenv.TopicSpec{Name: counts, Partitions: 2, Config: keepOld}); err != nil {
		t.Fatal(err)
	}
	const (
		parts   = 3
		perPart = 1000
		n       = parts * perPart
		base    = 1_700_000_040_000 // a minute boundary
	)
	wantB := map[string]int{}        // "key=value" → 1
	windowCounts := map[string]int{} // "key [start,end)" → count
	for p := int32(0); p < parts; p++ {
		var recs []kioRec
		for i := 0; i < perPart; i++ {
			key, value, ts := fmt.Sprintf("k%d", i%7), fmt.Sprintf("p%d-%d", p, i), int64(base+i*100)
			recs = append(recs, kioRec{key: []byte(key), value: []byte(value), ts: ts})
			wantB[key+"=B:"+value] = 1
			start := ts - (ts-base)%60_000
			windowCounts[fmt.Sprintf("%s [%d,%d)", key, start, start+60_000)]++
		}
		produceAt(t, bs, in, p, recs...)
	}
	wantC := map[string]int{}
	for w, c := range windowCounts {
		wantC[fmt.Sprintf("%s %d", w, c)] = 1
	}

	app := uniqueName(t, "app")
	t.Setenv(envEOSIn, in)
	t.Setenv(envEOSOut, out)
	t.Setenv(envEOSCounts, counts)
	t.Setenv(envEOSStateDir, t.TempDir())
	// 2 ms per record in the source stage: 6 s of work, 100 records per
	// transaction.
	const slowMicros = 2000
	start := time.Now()
	first := startPipelineChild(t, b, "kafkaio-eos", app, 0, slowMicros, 0)
	exited := make(chan error, 1)
	go func() { exited <- first.cmd.Wait() }()
	defer func() { _ = first.cmd.Process.Kill() }()

	// Kill once B holds committed output.
	const atLeast = 300
	for {
		recs, err := kafkaenv.Consume(ctx, bs, out, atLeast, kafkaenv.ReadCommitted, time.Second)
		if err == nil {
			t.Logf("%v after the start: B holds %d committed records (at least %d)", time.Since(start).Round(time.Millisecond), len(recs), atLeast)
			break
		}
		if !errors.Is(err, kafkaenv.ErrTimeout) {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			t.Fatalf("the first instance exited (%v) before B held %d committed records:\n%s", err, atLeast, tail(first.log.String(), 4000))
		default:
		}
		if ctx.Err() != nil || time.Since(start) > 90*time.Second {
			t.Fatalf("B holds %d committed records after %v, want %d before the kill:\n%s", len(recs), time.Since(start).Round(time.Second), atLeast, tail(first.log.String(), 4000))
		}
	}
	// Kill while a transaction with records in B is open if possible:
	// the first moment B's log end is past its last stable offset.
	open := waitOpenTransaction(t, bs, out, 5*time.Second)
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v after the start: SIGKILL (%s)", time.Since(start).Round(time.Millisecond), open)
	<-exited
	if _, err := os.Stat(first.out); err == nil {
		t.Fatalf("the first instance finished before the kill: the kill tested nothing (slow the job)")
	}

	second := startPipelineChild(t, b, "kafkaio-eos", app, 0, slowMicros, 1)
	done := make(chan error, 1)
	go func() { done <- second.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the restarted instance exited with %v, want 0:\n%s", err, tail(second.log.String(), 4000))
		}
	case <-time.After(2 * time.Minute):
		_ = second.cmd.Process.Kill()
		t.Fatalf("the restarted instance did not end by itself within 2 minutes (a bounded read):\n%s", tail(second.log.String(), 4000))
	}
	r := second.result(t)
	if r.Err != "" {
		t.Fatalf("the restarted instance failed: %s", r.Err)
	}
	t.Logf("restarted instance: %.1fs, counters %v (application's: %v), elements in %v; %v in all", r.Seconds, r.Counters, r.ApplicationMetrics, r.ElementsIn, time.Since(start).Round(time.Millisecond))
	if !strings.Contains(second.log.String(), "instance slot taken over") {
		t.Errorf("the restarted instance did not take over the killed instance's slot (same --state_dir):\n%s", tail(second.log.String(), 4000))
	}
	var sourceIn uint64
	for name, c := range r.ElementsIn {
		if strings.Contains(name, "kafkaio") {
			sourceIn += c
		}
	}
	if sourceIn == 0 || sourceIn >= n {
		t.Errorf("the restarted instance's source stage read %d records, want between 1 and %d: the kill was not mid-stream", sourceIn, n-1)
	}
	if !r.ApplicationMetrics || r.Counters["eos_mapped"] != n {
		t.Errorf("counter eos_mapped = %d (application's: %v), want the application's, %d", r.Counters["eos_mapped"], r.ApplicationMetrics, n)
	}

	gotB := kioRecordCounts(t, ctx, bs, out, kafkaenv.ReadCommitted, true)
	checkRecordsOnce(t, "B", gotB, wantB)
	gotC := kioRecordCounts(t, ctx, bs, counts, kafkaenv.ReadCommitted, false)
	checkRecordsOnce(t, "C", gotC, wantC)
	uncommitted := kioRecordCounts(t, ctx, bs, out, kafkaenv.ReadUncommitted, true)
	total := 0
	for _, c := range uncommitted {
		total += c
	}
	t.Logf("B read read_uncommitted: %d records (%d beyond the committed %d: the killed instance's aborted transactions)", total, total-n, n)
}

// waitOpenTransaction polls the log end and last stable offsets of topic's
// partitions until one has records of an open transaction (end > last
// stable offset) or timeout passes, and says which.
func waitOpenTransaction(t *testing.T, bs, topic string, timeout time.Duration) string {
	t.Helper()
	var cs [2]*kafka.Consumer
	for i, iso := range []string{"read_uncommitted", "read_committed"} {
		c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": "kafkaenv-offsets", "isolation.level": iso})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	md, err := cs[0].GetMetadata(&topic, false, 10000)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, p := range md.Topics[topic].Partitions {
			_, end, err1 := cs[0].QueryWatermarkOffsets(topic, p.ID, 1000)
			_, lso, err2 := cs[1].QueryWatermarkOffsets(topic, p.ID, 1000)
			if err1 == nil && err2 == nil && end > lso {
				return fmt.Sprintf("a transaction open in B: partition %d end %d, last stable offset %d", p.ID, end, lso)
			}
		}
	}
	return fmt.Sprintf("no open transaction in B seen within %v", timeout)
}

// kioRecordCounts reads topic to its end with isolation and counts its
// records: "key=value" with keyed, else the value.
func kioRecordCounts(t *testing.T, ctx context.Context, bs, topic string, isolation kafkaenv.Isolation, keyed bool) map[string]int {
	t.Helper()
	recs, err := kafkaenv.Consume(ctx, bs, topic, 0, isolation, 60*time.Second)
	if err != nil {
		t.Fatalf("read %s (%s): %v", topic, isolation, err)
	}
	out := map[string]int{}
	for _, r := range recs {
		k := string(r.Value)
		if keyed {
			k = string(r.Key) + "=" + k
		}
		out[k]++
	}
	return out
}

// checkRecordsOnce fails unless got holds exactly the records of want, each
// once, naming the topic and a few of the differences.
func checkRecordsOnce(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	var dup, missing, extra []string
	for k, c := range got {
		if c > 1 {
			dup = append(dup, fmt.Sprintf("%s (%dx)", k, c))
		}
		if want[k] == 0 {
			extra = append(extra, k)
		}
	}
	for k := range want {
		if got[k] == 0 {
			missing = append(missing, k)
		}
	}
	if len(dup)+len(missing)+len(extra) > 0 {
		for _, s := range [][]string{dup, missing, extra} {
			sort.Strings(s)
		}
		t.Errorf("%s: %d distinct records, want %d, each once: %d twice or more (e.g. %v), %d missing (e.g. %v), %d not expected (e.g. %v)",
			what, len(got), len(want), len(dup), firstN(dup, 5), len(missing), firstN(missing, 5), len(extra), firstN(extra, 5))
		return
	}
	t.Logf("%s: %d records, each exactly once, as expected", what, len(want))
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

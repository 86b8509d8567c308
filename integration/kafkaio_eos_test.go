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
// committed records, the child is SIGKILLed with a transaction open that
// has records in B (seen open, B's log end past its last stable offset,
// and still open 500 ms after a SIGSTOP), and started again with the same --application_id and
// --state_dir: it takes over the killed instance's transactional ids
// (aborting what it left open), resumes from the committed offsets and
// ends by itself (exit 0); its source stage reads what the killed one had
// not committed. Then B, read read_committed, holds each of the 3 000 records
// exactly once, with its key and "B:"+value; C holds each window's count
// exactly once, equal to a direct computation; and the application's
// counter of mapped records is 3 000 (the killed instance's committed
// bundles counted once, its open transaction's not at all); the open
// transaction's first record in B is read read_uncommitted only. It guards the
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
	// Kill while a transaction with records in B is open (issue 23: it
	// was killed whether one was or not): the first moment B's log end is
	// past its last stable offset, the instance is stopped, and if after a
	// pause (a commit sent before the stop has ended by then) that
	// partition's last stable offset has not moved, the transaction is
	// open and stays open: SIGKILL. Else it is continued and watched again.
	probe := newOpenInTopic(t, bs, out)
	var open string
	for attempt := 1; ; attempt++ {
		o, ok := probe.wait(5 * time.Second)
		if !ok {
			t.Fatalf("attempt %d: %s", attempt, o)
		}
		if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if probe.still() {
			open = fmt.Sprintf("%s, still open 500 ms after SIGSTOP (attempt %d)", o, attempt)
			break
		}
		if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if attempt >= 20 {
			t.Fatalf("in %d attempts, no transaction with records in B stayed open while the instance was stopped", attempt)
		}
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v after the start: SIGKILL (%s)", time.Since(start).Round(time.Millisecond), open)
	if err := <-exited; !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("the first instance did not die of the SIGKILL: %v", err)
	}
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
	// The transaction open at the kill was aborted: its first record in B
	// is read read_uncommitted, not read_committed.
	at := map[kafkaenv.Isolation]bool{}
	for _, iso := range []kafkaenv.Isolation{kafkaenv.ReadCommitted, kafkaenv.ReadUncommitted} {
		recs, err := kafkaenv.Consume(ctx, bs, out, 0, iso, time.Minute)
		if err != nil {
			t.Fatalf("read %s (%s): %v", out, iso, err)
		}
		for _, r := range recs {
			if r.Partition == probe.partition && r.Offset == probe.lso {
				at[iso] = true
			}
		}
	}
	if at[kafkaenv.ReadCommitted] || !at[kafkaenv.ReadUncommitted] {
		t.Errorf("B's partition %d offset %d, the first record of the transaction open at the kill: read_committed %v, read_uncommitted %v; want only read_uncommitted (aborted)", probe.partition, probe.lso, at[kafkaenv.ReadCommitted], at[kafkaenv.ReadUncommitted])
	} else {
		t.Logf("the transaction open at the kill was aborted: its first record in B (partition %d, offset %d) is read read_uncommitted only", probe.partition, probe.lso)
	}
}

// openInTopic watches a topic one instance writes for that instance's open
// transaction: a partition whose log end is past its last stable offset.
type openInTopic struct {
	t     *testing.T
	topic string
	cs    [2]*kafka.Consumer // read_uncommitted, read_committed
	parts []int32
	// partition and lso are where wait last found an open transaction:
	// its first record in the topic is at offset lso of partition.
	partition int32
	lso       int64
}

func newOpenInTopic(t *testing.T, bs, topic string) *openInTopic {
	t.Helper()
	o := &openInTopic{t: t, topic: topic}
	for i, iso := range []string{"read_uncommitted", "read_committed"} {
		c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": "kafkaenv-offsets", "isolation.level": iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		o.cs[i] = c
	}
	md, err := o.cs[0].GetMetadata(&topic, false, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range md.Topics[topic].Partitions {
		o.parts = append(o.parts, p.ID)
	}
	return o
}

// offsets returns partition p's log end and last stable offset.
func (o *openInTopic) offsets(p int32) (end, lso int64, err error) {
	_, end, err = o.cs[0].QueryWatermarkOffsets(o.topic, p, 1000)
	if err == nil {
		_, lso, err = o.cs[1].QueryWatermarkOffsets(o.topic, p, 1000)
	}
	return end, lso, err
}

// wait polls the partitions' offsets until one has records of an open
// transaction (end > last stable offset) or timeout passes, and says
// which.
func (o *openInTopic) wait(timeout time.Duration) (string, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, p := range o.parts {
			end, lso, err := o.offsets(p)
			if err == nil && end > lso {
				o.partition, o.lso = p, lso
				return fmt.Sprintf("a transaction open in %s: partition %d end %d, last stable offset %d", o.topic, p, end, lso), true
			}
		}
	}
	return fmt.Sprintf("no open transaction in %s seen within %v", o.topic, timeout), false
}

// still reports whether the transaction wait found is still open: its
// partition's last stable offset has not moved.
func (o *openInTopic) still() bool {
	end, lso, err := o.offsets(o.partition)
	return err == nil && lso == o.lso && end > lso
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

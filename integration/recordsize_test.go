package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// Issue 23, record size: every record a user's topic can hold must cross
// every stage (its Envelope in the internal topics, its value in a
// GroupByKey's changelog), and a record too large for a sink topic ends the
// job with one error naming where it came from, not a restart loop.

// sizeUngroup emits every value of a grouped key as its own (key, value).
func sizeUngroup(key []byte, values func(*[]byte) bool, emit func([]byte, []byte)) {
	var v []byte
	for values(&v) {
		emit(key, v)
	}
}

func init() {
	register.Function3x0(sizeUngroup)
	register.Emitter2[[]byte, []byte]()
	register.Iter1[[]byte]()
}

// topicMaxMessageBytes is topic's max.message.bytes as the broker
// answers DescribeConfigs (its own, or the broker's message.max.bytes
// it defaults to).
func topicMaxMessageBytes(t *testing.T, ctx context.Context, bs, topic string) int {
	t.Helper()
	ad, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	res, err := ad.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic, Config: []kafka.ConfigEntry{{Name: "max.message.bytes"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("describe configs of %s: %v", topic, r.Error)
		}
		if e, ok := r.Config["max.message.bytes"]; ok {
			n, err := strconv.Atoi(e.Value)
			if err != nil {
				t.Fatalf("max.message.bytes of %s: %q: %v", topic, e.Value, err)
			}
			return n
		}
	}
	t.Fatalf("the broker did not say topic %s's max.message.bytes", topic)
	return 0
}

// batchOfOne is the size in bytes of a Kafka record batch (magic 2, no
// compression) holding one record with a key of k bytes, a value of v
// bytes and no headers, as the broker compares it with max.message.bytes:
// the batch's 61 bytes of header (with the log's offset and length), then
// the record: its length, attributes, timestamp and offset deltas (0: one
// byte each), key and value each with its length, the header count.
func batchOfOne(k, v int) int {
	zz := func(n int) int { // a zigzag varint's size
		u, s := uint64(n)<<1, 1
		for ; u >= 0x80; u >>= 7 {
			s++
		}
		return s
	}
	body := 1 + 1 + 1 + zz(k) + k + zz(v) + v + zz(0)
	return 61 + zz(body) + body
}

// largestValue is the largest value whose record, with a key of k bytes,
// fits a batch of max bytes alone.
func largestValue(k, max int) int {
	v := max - 61 - k
	for batchOfOne(k, v) > max {
		v--
	}
	return v
}

// produceSized writes recs (their Partition set) to topic with a producer
// whose message.max.bytes lets any of them through (so the broker's topic
// limit is what decides), one at a time, and returns the first record's
// delivery error, naming it.
func produceSized(ctx context.Context, bs, topic string, recs ...kafkaenv.Record) error {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "message.max.bytes": 100 << 20, "acks": "all", "enable.idempotence": false, "max.in.flight": 1})
	if err != nil {
		return err
	}
	defer p.Close()
	dr := make(chan kafka.Event, 1)
	for i, r := range recs {
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: r.Partition}, Key: r.Key, Value: r.Value}, dr); err != nil {
			return fmt.Errorf("record %d (%d+%d bytes): %w", i, len(r.Key), len(r.Value), err)
		}
		select {
		case ev := <-dr:
			if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
				return fmt.Errorf("record %d (%d+%d bytes): %w", i, len(r.Key), len(r.Value), m.TopicPartition.Error)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// sizeDigest names a record by its key and its value's length and hash.
func sizeDigest(key, value []byte) string {
	h := sha256.Sum256(value)
	return fmt.Sprintf("%s/%d/%s", key, len(value), hex.EncodeToString(h[:6]))
}

// TestRecordSizeLargestRecordsCrossEveryStage (issue 23, record size): a
// user's topic of two partitions holds, besides 20 small records, six of
// the largest size it accepts (its max.message.bytes as the broker says,
// 1 048 588 by default: a key of 100 bytes and a value that fills the
// batch to the byte; one byte more is refused, checked on a topic of its
// own), the three of a partition under one key. A bounded kafkaio.Read, a GroupByKey on the record key (its
// values stored in the stage's changelog, the records crossing the
// internal topic between the source and the GroupByKey stage in
// Envelopes a few bytes larger than the record; a pane of three large
// values goes to the SDK as one element), a DoFn that emits every value
// as its own record and a kafkaio.Write to a topic whose
// max.message.bytes is twice as large, one record per transaction: the
// sink holds every input record once, and the changelog holds the six
// large values. Before the fix the
// source stage could not produce the Envelope (librdkafka's
// message.max.bytes 1 000 000, then the internal topic's broker default),
// restarted its clients five times and failed the job.
func TestRecordSizeLargestRecordsCrossEveryStage(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, over, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "over"), uniqueName(t, "app")
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 2}, kafkaenv.TopicSpec{Name: over, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	limit := topicMaxMessageBytes(t, ctx, bs, in)
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: out, Partitions: 2, Config: map[string]string{"max.message.bytes": strconv.Itoa(2 * limit)}}); err != nil {
		t.Fatal(err)
	}
	const keyLen = 100
	vmax := largestValue(keyLen, limit)
	t.Logf("%s: max.message.bytes %d: the largest record has a key of %d bytes and a value of %d", in, limit, keyLen, vmax)
	key := func(name string) []byte { return []byte(name + strings.Repeat("k", keyLen-len(name))) }
	value := func(id string, n int) []byte {
		v := bytes.Repeat([]byte{'v'}, n)
		copy(v, id)
		return v
	}
	// One byte more than the largest is refused: vmax is the largest.
	err := produceSized(ctx, bs, over, kafkaenv.Record{Key: key("over"), Value: value("over", vmax+1)})
	if err == nil {
		t.Fatalf("%s took a record of %d bytes (a key of %d, a value of %d): the test's size arithmetic is wrong", over, batchOfOne(keyLen, vmax+1), keyLen, vmax+1)
	}
	t.Logf("one byte more is refused: %v", err)

	var recs []kafkaenv.Record
	want := map[string]int{}
	for p := int32(0); p < 2; p++ {
		for i := 0; i < 13; i++ {
			var r kafkaenv.Record
			if i%4 == 1 {
				// The three of a partition share a key: their pane
				// holds three values of the largest size.
				id := fmt.Sprintf("big-p%d-%d", p, i)
				r = kafkaenv.Record{Partition: p, Key: key(fmt.Sprintf("big-p%d", p)), Value: value(id, vmax)}
			} else {
				id := fmt.Sprintf("small-p%d-%d", p, i)
				r = kafkaenv.Record{Partition: p, Key: []byte(id), Value: []byte(id)}
			}
			recs = append(recs, r)
			want[sizeDigest(r.Key, r.Value)]++
		}
	}
	if err := produceSized(ctx, bs, in, recs...); err != nil {
		t.Fatalf("writing the records to %s: %v", in, err)
	}

	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1))
	kafkaio.Write(s, out, beam.ParDo(s, sizeUngroup, beam.GroupByKey(s, kvs)))
	start := time.Now()
	// One record per transaction: each value reaches the changelog in an
	// attempt of its own, before the one that fires its pane (a value put
	// and deleted in one attempt never reaches the changelog).
	runApp(t, ctx, bs, app, p, func(o *runner.Options) { o.MaxBundleSize = 1 })
	t.Logf("the job ran in %v", time.Since(start).Round(time.Millisecond))

	got, err := kafkaenv.Consume(ctx, bs, out, -1, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]int{}
	for _, r := range got {
		have[sizeDigest(r.Key, r.Value)]++
	}
	var diff []string
	for d, n := range want {
		if have[d] != n {
			diff = append(diff, fmt.Sprintf("%s: %d, want %d", d, have[d], n))
		}
	}
	for d, n := range have {
		if want[d] == 0 {
			diff = append(diff, fmt.Sprintf("%s: %d, want none", d, n))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatalf("%s holds %d records, want each of the %d input records once:\n  %s", out, len(got), len(recs), strings.Join(diff, "\n  "))
	}

	// The GroupByKey stored the large values in its changelog.
	changelog := ""
	ad, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	md, err := ad.GetMetadata(nil, true, 10_000)
	ad.Close()
	if err != nil {
		t.Fatal(err)
	}
	for name := range md.Topics {
		if strings.HasPrefix(name, app+"-") && strings.HasSuffix(name, "-changelog") {
			changelog = name
		}
	}
	if changelog == "" {
		t.Fatalf("no changelog topic of application %s: the GroupByKey stored nothing?", app)
	}
	if n := topicMaxMessageBytes(t, ctx, bs, changelog); n != 64<<20 {
		t.Errorf("changelog %s: max.message.bytes %d, want the runner's 64 MiB", changelog, n)
	}
	cl, err := kafkaenv.Consume(ctx, bs, changelog, -1, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	large := 0
	for _, r := range cl {
		if len(r.Value) >= vmax {
			large++
		}
	}
	if large != 6 {
		t.Fatalf("changelog %s holds %d values of %d bytes or more, want the 6 large ones", changelog, large, vmax)
	}
}

// logCounter is a slog handler that passes records on to next and counts
// those whose message contains one of its substrings.
type logCounter struct {
	next   slog.Handler
	subs   []string
	counts []*atomic.Int64
}

// countLogs makes slog's default logger, until the test ends, a
// logCounter of subs that prints every record to stderr through a
// TextHandler of its own, and returns the counter. The counter must not
// wrap slog.Default's handler: when that is the log package's default
// handler, slog.SetDefault sends the log package's output back through
// the new handler, and the first record deadlocks on the log package's
// mutex (seen: a test hung until the binary's timeout) or reaches the
// output without being counted.
func countLogs(t *testing.T, subs ...string) *logCounter {
	t.Helper()
	c := newLogCounter(slog.NewTextHandler(os.Stderr, nil), subs...)
	prev := slog.Default()
	slog.SetDefault(slog.New(c))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return c
}

func newLogCounter(next slog.Handler, subs ...string) *logCounter {
	c := &logCounter{next: next, subs: subs}
	for range subs {
		c.counts = append(c.counts, &atomic.Int64{})
	}
	return c
}

func (c *logCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || c.next.Enabled(ctx, l)
}

func (c *logCounter) Handle(ctx context.Context, r slog.Record) error {
	for i, s := range c.subs {
		if strings.Contains(r.Message, s) {
			c.counts[i].Add(1)
		}
	}
	if c.next.Enabled(ctx, r.Level) {
		return c.next.Handle(ctx, r)
	}
	return nil
}

func (c *logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCounter{next: c.next.WithAttrs(as), subs: c.subs, counts: c.counts}
}

func (c *logCounter) WithGroup(name string) slog.Handler {
	return &logCounter{next: c.next.WithGroup(name), subs: c.subs, counts: c.counts}
}

// TestRecordSizeTooLargeForSinkFailsOnce (issue 23, record size): a
// record of 20 000 bytes, at offset 5 of partition 0 of a user's topic,
// read by a bounded kafkaio.Read and written by kafkaio.Write (in the
// source stage's transactions) to a topic whose max.message.bytes is
// 10 000. The job ends within a minute with one error naming the input
// topic, partition and offset of the record, the sink topic, the record's
// size and the limit; the stage never restarts its Kafka clients and
// aborts at most one attempt (the batch holding the record, before the
// records are taken one by one to find it), and the sink holds the five records
// before it, each once, and none after it. Before the fix the broker's
// MESSAGE_TOO_LARGE aborted the transaction, which was retried four times
// per client life, the clients restarted five times, and the job's error
// named neither the record nor the topics.
func TestRecordSizeTooLargeForSinkFailsOnce(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}, kafkaenv.TopicSpec{Name: out, Partitions: 1, Config: map[string]string{"max.message.bytes": "10000"}}); err != nil {
		t.Fatal(err)
	}
	var recs []kafkaenv.Record
	for i := 0; i < 8; i++ {
		v := []byte(fmt.Sprintf("small-%d", i))
		if i == 5 {
			v = bytes.Repeat([]byte{'x'}, 20_000)
		}
		recs = append(recs, kafkaenv.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: v})
	}
	if err := produceSized(ctx, bs, in, recs...); err != nil {
		t.Fatal(err)
	}

	counter := countLogs(t, "restarting the stage's Kafka clients", "transaction aborted, rewinding")

	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1)))
	jctx, jcancel := context.WithTimeout(ctx, 90*time.Second)
	defer jcancel()
	start := time.Now()
	done := startJob(jctx, bs, app, p)
	var jobErr error
	select {
	case jobErr = <-done:
	case <-time.After(100 * time.Second):
		t.Fatal("the job did not end within 100 s")
	}
	took := time.Since(start).Round(time.Millisecond)
	restarts, aborts := counter.counts[0].Load(), counter.counts[1].Load()
	t.Logf("the job ended after %v: %v (client restarts %d, aborted attempts %d)", took, jobErr, restarts, aborts)
	if jobErr == nil || jctx.Err() != nil {
		t.Fatalf("the job ended with %v after %v (its context: %v), want an error of its own", jobErr, took, jctx.Err())
	}
	msg := jobErr.Error()
	for _, w := range []string{
		fmt.Sprintf("input topic %s, partition 0, offset 5", in),
		"topic " + out,
		"max.message.bytes 10000",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("the job's error does not say %q: %v", w, jobErr)
		}
	}
	if restarts != 0 {
		t.Errorf("the stage restarted its Kafka clients %d times, want none: a record too large is no Kafka error a restart gets past", restarts)
	}
	if aborts > 1 {
		t.Errorf("the stage aborted %d attempts, want at most 1", aborts)
	}
	if took > time.Minute {
		t.Errorf("the job took %v to fail, want under a minute", took)
	}
	got := readValues(t, bs, out, -1, 30*time.Second)
	if w := "small-0|small-1|small-2|small-3|small-4"; strings.Join(got, "|") != w {
		t.Errorf("%s holds %q, want the records before the large one, each once: %q", out, got, w)
	}
}

// setMaxMessageBytes sets topic's max.message.bytes to n and waits (up to
// 30 s) until the broker describes it so.
func setMaxMessageBytes(t *testing.T, ctx context.Context, bs, topic string, n int) {
	t.Helper()
	ad, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	res, err := ad.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic, Config: []kafka.ConfigEntry{{
		Name: "max.message.bytes", Value: strconv.Itoa(n), IncrementalOperation: kafka.AlterConfigOpTypeSet}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("set max.message.bytes of %s: %v", topic, r.Error)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); topicMaxMessageBytes(t, ctx, bs, topic) != n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's max.message.bytes is not %d 30 s after it was set", topic, n)
		}
	}
}

// TestRecordSizeSinkLimitLoweredFailsOnce (issue 23, record size): the
// same as TestRecordSizeTooLargeForSinkFailsOnce, but the sink's
// max.message.bytes is lowered to 10 000 while the job runs, after the
// runner read it: the stage's own check lets the record of 20 000 bytes
// through and the broker refuses it at the commit (librdkafka's
// MESSAGE_TOO_LARGE, "current transaction must be aborted"). The job
// still ends with one error naming the input record (topic, partition
// 0, offset 5) and the sink, without restarting its clients, and the sink
// holds the records before it once. It aborts at most two attempts: the
// batch holding the record, and the next transaction, which librdkafka
// may fail once after failed deliveries ("skipped sequence numbers",
// OUT_OF_ORDER_SEQUENCE_NUMBER: seen in each of three runs). The refusal can land while the offsets are sent,
// which then fail with a bare state error (seen: "Erroneous state"): the
// loop's refusedForSize finds the cause.
func TestRecordSizeSinkLimitLoweredFailsOnce(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}, kafkaenv.TopicSpec{Name: out, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	rec := func(i int) kafkaenv.Record {
		v := []byte(fmt.Sprintf("small-%d", i))
		if i == 5 {
			v = bytes.Repeat([]byte{'x'}, 20_000)
		}
		return kafkaenv.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: v}
	}
	if err := produceSized(ctx, bs, in, rec(0), rec(1)); err != nil {
		t.Fatal(err)
	}

	counter := countLogs(t, "restarting the stage's Kafka clients", "transaction aborted, rewinding")

	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1)))
	jctx, jcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer jcancel()
	done := startJob(jctx, bs, app, p)
	if got := readValues(t, bs, out, 2, time.Minute); strings.Join(got, "|") != "small-0|small-1" {
		jcancel()
		<-done
		t.Fatalf("%s holds %q, want small-0 and small-1", out, got)
	}
	setMaxMessageBytes(t, ctx, bs, out, 10_000)
	start := time.Now()
	if err := produceSized(ctx, bs, in, rec(2), rec(3), rec(4), rec(5), rec(6), rec(7)); err != nil {
		t.Fatal(err)
	}
	var jobErr error
	select {
	case jobErr = <-done:
	case <-time.After(100 * time.Second):
		t.Fatal("the job did not end within 100 s of the large record")
	}
	took := time.Since(start).Round(time.Millisecond)
	restarts, aborts := counter.counts[0].Load(), counter.counts[1].Load()
	t.Logf("the job ended %v after the large record was written: %v (client restarts %d, aborted attempts %d)", took, jobErr, restarts, aborts)
	if jobErr == nil || jctx.Err() != nil {
		t.Fatalf("the job ended with %v (its context: %v), want an error of its own", jobErr, jctx.Err())
	}
	for _, w := range []string{
		fmt.Sprintf("input topic %s, partition 0, offset 5", in),
		out,
		"max.message.bytes",
	} {
		if !strings.Contains(jobErr.Error(), w) {
			t.Errorf("the job's error does not say %q: %v", w, jobErr)
		}
	}
	if restarts != 0 {
		t.Errorf("the stage restarted its Kafka clients %d times, want none", restarts)
	}
	if aborts > 2 {
		t.Errorf("the stage aborted %d attempts, want at most 2 (the batch holding the record, and the transaction after it)", aborts)
	}
	got := readValues(t, bs, out, -1, 30*time.Second)
	if w := "small-0|small-1|small-2|small-3|small-4"; strings.Join(got, "|") != w {
		t.Errorf("%s holds %q, want the records before the large one, each once: %q", out, got, w)
	}
}

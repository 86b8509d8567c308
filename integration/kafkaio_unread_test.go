package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// Issue 21, section 2: a partition that has records in its log the source
// has not read is never idle, whatever librdkafka's partition EOF says.
// Each test below is one way a partition holds records its consumer cannot
// see yet while its EOF says it is at its end, and each failed before the
// fix (the note of issue 21 has the output): the window those records fall
// in fired without them and they were dropped as late.
//
// The pipeline of each: kafkaio.Read of a 2-partition topic with bound 0
// and idleness 3 s, 1-minute fixed windows, a count per window, written as
// "[start,end) n". Partition 0 holds records at B+5 s … B+125 s (one every
// 10 s: 6 in [B, B+60 s)); partition 1 one record at B+5 s that the source
// reads at once, then the records it cannot see yet, inside [B, B+60 s).
// Partition 0's watermark (B+125 s) would close [B, B+60 s) as soon as
// partition 1 counted as idle.

// unreadBase is a minute boundary in 2023 (B).
const unreadBase = 1_700_000_040_000

// unreadIdleness is the sources' idleness in these tests.
const unreadIdleness = 3 * time.Second

// unreadSetup creates the topics, writes partition 0's records and
// partition 1's first one, and returns the pipeline reading in with opts
// and writing the window counts to out.
func unreadSetup(t *testing.T, ctx context.Context, bs, in, out string, opts ...kafkaio.Option) *beam.Pipeline {
	t.Helper()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	var recs []kioRec
	for s := int64(5); s <= 125; s += 10 {
		recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", s)), value: []byte("v"), ts: unreadBase + s*1000})
	}
	produceAt(t, bs, in, 0, recs...)
	produceAt(t, bs, in, 1, kioRec{key: []byte("first"), value: []byte("v"), ts: unreadBase + 5000})
	p, s := beam.NewPipelineWithRoot()
	opts = append([]kafkaio.Option{kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(unreadIdleness)}, opts...)
	kvs := kafkaio.Read(s, in, opts...)
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))
	return p
}

// unreadWindow is the output line of [B+m min, B+(m+1) min) with n records.
func unreadWindow(m, n int64) string {
	return fmt.Sprintf("[%d,%d) %d", unreadBase+m*60000, unreadBase+(m+1)*60000, n)
}

// waitSourceRead waits (up to a minute) until GET /watermarks shows
// partition 0 of the source at its last event time, B+125 s: the source
// has read partition 0 to its end.
func waitSourceRead(t *testing.T, addr string) {
	t.Helper()
	want := fmt.Sprintf("lastEventTimeMs=%d", unreadBase+125000)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		rows := sourcePartitionRows(t, "http://"+addr+"/watermarks")
		if len(rows) > 0 && strings.HasPrefix(rows[0], "0 ") && strings.Contains(rows[0], want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /watermarks: the source has not read partition 0 within a minute: %q", rows)
		}
	}
}

// TestKafkaSourceOpenTransactionNotIdle: way (a). A producer's transaction
// is open on partition 1 with two records at B+30 s and B+40 s. The source
// reads read_committed: librdkafka's fetch stops, and its partition EOF
// comes, at the last stable offset (1), though the high watermark (3) is
// past it. Before the fix partition 1 idled out 3 s after its first
// record, [B, B+60 s) fired with 7 records, and the two came late at the
// commit. Now partition 1 holds the watermark while the transaction is
// open (ListOffsets: last stable offset < high watermark), GET
// /watermarks/explain says why, and at the commit the window fires with
// all 9.
func TestKafkaSourceOpenTransactionNotIdle(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := unreadSetup(t, ctx, bs, in, out)
	// GET /watermarks/explain says why a stage is stuck once its
	// watermark has not moved for this long.

	// The open transaction, written before the job starts.
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "transactional.id": uniqueName(t, "txn"), "transaction.timeout.ms": 120000, "go.delivery.reports": false})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pr.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int64{30, 40} {
		if err := pr.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &in, Partition: 1}, Key: []byte(fmt.Sprint("t", s)), Value: []byte("v"), Timestamp: time.UnixMilli(unreadBase + s*1000)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := kafkaclient.Drain(pr, 30*time.Second); n > 0 {
		t.Fatalf("%d transactional records not delivered", n)
	}

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), p, func(o *runner.Options) { o.WatermarkStuckThreshold = 2 * time.Second })
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)
	waitSourceRead(t, addr)

	// Three idleness timeouts with the transaction open: nothing fires.
	if got := readValues(t, bs, out, 1, 3*unreadIdleness); len(got) != 0 {
		t.Fatalf("with a transaction open on partition 1, windows fired: %q (partition 1 was taken for idle; its 2 records are late)", got)
	}
	explainSays(t, addr, fmt.Sprintf("partition 1 of topic %s holds records it cannot read yet because a transaction is open (last stable offset 1, high watermark 3)", in))

	if err := pr.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{unreadWindow(0, 9), unreadWindow(1, 6)}
	if got := readValues(t, bs, out, 2, 30*time.Second); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("after the commit: output %q, want %q (none late)", got, want)
	}
}

// TestKafkaSourceUndeliveredFetchNotIdle: way (c). The source's consumer
// waits for a fetch to fill (fetch.min.bytes 10 MB, fetch.wait.max.ms
// 4 s: throughput tuning), so its fetch responses come every 4 s, and a
// record written just after one stays in the broker until the next while
// the partition's last EOF says it is at its end. The topic is empty when
// the job starts; partition 0's records and partition 1's first one are
// written together and come in one response (R, partition 1's last
// activity); partition 1's EOF comes in the next (R + 4 s), and its
// idleness (6 s) runs out at R + 6 s. The record at B+30 s is written at
// about R + 4.8 s: it comes at R + 8 s. Before the fix partition 1 idled
// out at R + 6 s on its EOF, [B, B+60 s) fired with 7 and the record came
// late; now the ListOffsets answer at the deadline shows the high
// watermark past the consumer's position, and partition 1 holds the
// watermark until the record is read.
func TestKafkaSourceUndeliveredFetchNotIdle(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(6*time.Second),
		kafkaio.WithProperty("fetch.min.bytes", "10000000"), kafkaio.WithProperty("fetch.wait.max.ms", "4000"))
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)
	// The source's partitions are assigned and fetching (both reported,
	// idle: an empty topic).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		rows := sourcePartitionRows(t, "http://"+addr+"/watermarks")
		if len(rows) == 2 && strings.Contains(rows[0], "idle=true") && strings.Contains(rows[1], "idle=true") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source's partitions did not idle out on an empty topic: %q", rows)
		}
	}
	var recs []kioRec
	for s := int64(5); s <= 125; s += 10 {
		recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", s)), value: []byte("v"), ts: unreadBase + s*1000})
	}
	produceAt(t, bs, in, 0, recs...)
	produceAt(t, bs, in, 1, kioRec{key: []byte("first"), value: []byte("v"), ts: unreadBase + 5000})
	// R: the response that brought them (seen on the page a moment later).
	want1 := fmt.Sprintf("lastEventTimeMs=%d", unreadBase+5000)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		rows := sourcePartitionRows(t, "http://"+addr+"/watermarks")
		if len(rows) == 2 && strings.Contains(rows[1], want1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source did not read partition 1's first record: %q", rows)
		}
	}
	seen := time.Now()
	time.Sleep(4500 * time.Millisecond)
	produceAt(t, bs, in, 1, kioRec{key: []byte("slow"), value: []byte("v"), ts: unreadBase + 30000})
	t.Logf("the record at B+30 s written %v after partition 1's first record was seen", time.Since(seen).Round(time.Millisecond))

	want := []string{unreadWindow(0, 8), unreadWindow(1, 6)}
	got := readValues(t, bs, out, 2, 40*time.Second)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("output %q, want %q (the record at B+30 s waited in the broker for the fetch to fill; partition 1 was taken for idle meanwhile)", got, want)
	}
}

// explainSays waits (up to 15 s) until GET /watermarks/explain holds
// sentence.
func explainSays(t *testing.T, addr, sentence string) {
	t.Helper()
	var body string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		body = getText(t, "http://"+addr+"/watermarks/explain")
		if strings.Contains(body, sentence) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /watermarks/explain does not say %q:\n%s", sentence, body)
		}
	}
}

// getText returns the body of GET url.
func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// throttledIdleness is the idleness of TestKafkaSourceThrottledNotIdle:
// short, and shorter than the broker's throttle (6-7 s on the test
// broker), with room for the page's lag (the test writes partition 1's
// record within it of seeing partition 1's first one read).
const throttledIdleness = 2 * time.Second

// TestKafkaSourceThrottledNotIdle: way (d), a fetch stopped with the
// leader up. The broker throttles the source's consumer: a client quota
// (consumer_byte_rate 1 000 bytes/s) on the client.id the source is given.
// Partition 0 holds an 8 KB record besides its small ones, which the first
// fetch brings with the rest (within the quota's 10 s window, on a quota
// set seconds before). When the test sees partition 1's first record read
// (R), it writes a second 8 KB record to partition 0, then the record at
// B+30 s to partition 1: the fetch that would bring them overdraws the
// quota, the broker answers it empty with a throttle time (6-7 s, twice,
// measured) and librdkafka sends no fetch until it has passed (KIP-219),
// so the record stays in the broker past partition 1's idleness deadline
// (R + 2 s) while partition 1's last EOF says it is at its end. Before the
// fix partition 1 idled out at the deadline, [B, B+60 s) fired with 7 and
// the record came late; now the ListOffsets answer at the deadline (the
// source's admin client: its own connection and client id, which the
// throttle does not mute) shows the high watermark past the consumer's
// position: partition 1 holds the watermark, GET /watermarks says why
// (unreadBecause), and [B, B+60 s) fires with all 8 once the record is
// read.
//
// The test writes 600 ms after R, when the fetch after the first
// (fetch.wait.max.ms 500, the default) has come back and raised partition
// 1's EOF (librdkafka raises one on a fetch answered with the partition
// already at its high watermark, not on the fetch that brings its last
// records). Written sooner, as it was, the write could meet that fetch
// still waiting at the broker: the quota answered it empty, no EOF came,
// and the page said nothing for the 12 s partition 1 held the watermark
// (CI, 2026-12-05): a partition past its deadline with no EOF since its
// latest record was never asked about. It is now (LogEndsWanted; the head
// test TestHeadNotIdleSaysWhy), but that order is not made here on
// purpose: both ways tried (partition 1's first record written once
// partition 0 was read, or partition 0 empty until R, each with
// fetch.wait.max.ms 10 s) failed in other ways: a first fetch of an empty
// partition alone waits the whole 10 s, and a woken task without a
// committed offset asks its log start on the consumer's connection, which
// the throttle holds.
func TestKafkaSourceThrottledNotIdle(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out, client := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "client")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	if err := kafkaenv.SetClientQuotas(ctx, bs, client, map[string]string{"consumer_byte_rate": "1000"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("quota consumer_byte_rate=1000 set on client.id %s in %v", client, time.Since(began).Round(time.Millisecond))
	p := unreadSetup(t, ctx, bs, in, out, kafkaio.WithIdleness(throttledIdleness), kafkaio.WithProperty("client.id", client))
	produceAt(t, bs, in, 0, kioRec{key: []byte("large"), value: make([]byte, 8000), ts: unreadBase + 125000})

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)
	url := "http://" + addr + "/watermarks"
	// R: the first fetch's records are read (seen on the page a moment
	// later); partition 1 has not idled out yet.
	first := fmt.Sprintf("lastEventTimeMs=%d", unreadBase+5000)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		rows := sourcePartitionRows(t, url)
		if len(rows) == 2 && strings.Contains(rows[1], first) {
			if strings.Contains(rows[1], "idle=true") {
				t.Fatalf("partition 1 idled out before the test wrote its record (the page came %v late: a loaded machine): %q", throttledIdleness, rows)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source did not read partition 1's first record: %q", rows)
		}
	}
	seen := time.Now()
	time.Sleep(600 * time.Millisecond)
	if rows := sourcePartitionRows(t, url); strings.Contains(rows[1], "idle=true") {
		t.Fatalf("partition 1 idled out 600ms after the test saw its first record read (a loaded machine): %q", rows)
	}
	// The large record first: a fetch that brought the small one alone
	// would come at once.
	produceAt(t, bs, in, 0, kioRec{key: []byte("overdraw"), value: make([]byte, 8000), ts: unreadBase + 125000})
	produceAt(t, bs, in, 1, kioRec{key: []byte("throttled"), value: []byte("v"), ts: unreadBase + 30000})
	written := time.Now()
	t.Logf("the record at B+30 s written %v after partition 1's first record was seen read", written.Sub(seen).Round(time.Millisecond))

	// Until the record is read: partition 1 never idle, and the page says
	// why it holds the watermark.
	read := fmt.Sprintf("lastEventTimeMs=%d", unreadBase+30000)
	var because string
	var readAt time.Time
	for deadline := time.Now().Add(40 * time.Second); readAt.IsZero(); time.Sleep(50 * time.Millisecond) {
		rows := sourcePartitionRows(t, url)
		if len(rows) != 2 {
			t.Fatalf("GET /watermarks source partitions %q, want 2", rows)
		}
		switch {
		case strings.Contains(rows[1], read):
			readAt = time.Now()
		case strings.Contains(rows[1], "idle=true"):
			t.Fatalf("partition 1 reported idle %v after its record at B+30 s was written, unread (its consumer throttled): %q", time.Since(written).Round(time.Millisecond), rows)
		case because == "" && strings.Contains(rows[1], "unreadBecause="):
			because = rows[1][strings.Index(rows[1], "unreadBecause="):]
			t.Logf("%v after the write, GET /watermarks: partition 1 %s", time.Since(written).Round(time.Millisecond), because)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record at B+30 s was not read within 40 s: %q", rows)
		}
	}
	t.Logf("the record at B+30 s was read (seen on the page) %v after it was written (without the quota: 0.2 s); idleness %v", readAt.Sub(written).Round(time.Millisecond), throttledIdleness)
	if unread := readAt.Sub(written); because == "" && unread < throttledIdleness+time.Second {
		// The page says why only past the idleness deadline: the record
		// was read before partition 1 could have idled out.
		t.Fatalf("GET /watermarks never said why partition 1 holds the watermark: the record was read %v after it was written, before partition 1's idleness deadline (%v); the throttle did not keep it unread, the test proves nothing", unread.Round(time.Millisecond), throttledIdleness)
	} else if because == "" {
		t.Fatalf("GET /watermarks never said why partition 1 holds the watermark, for the %v its record at B+30 s stayed unread (its idleness %v)", unread.Round(time.Millisecond), throttledIdleness)
	}
	want := []string{unreadWindow(0, 8), unreadWindow(1, 6)}
	if got := readValues(t, bs, out, 2, 30*time.Second); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("output %q, want %q (none late)", got, want)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
)

// The Kafka source and sink (runner/kafkaio) on the real broker.

// produceAt writes records (key, value) to partition p of topic, each with
// its CreateTime timestamp (ms), and waits for them.
func produceAt(t *testing.T, bs, topic string, p int32, recs ...kioRec) {
	t.Helper()
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "go.delivery.reports": false})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	for _, r := range recs {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p}, Key: r.key, Value: r.value, Timestamp: time.UnixMilli(r.ts)}
		if err := pr.Produce(m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := pr.Flush(30000); n > 0 {
		t.Fatalf("%d records not delivered", n)
	}
}

// keepOld is the configuration of a topic whose records carry event times
// years in the past (1_700_000_000_000 ms is 2023-11-14) as their
// timestamps: without it the broker's time-based retention (7 days, checked
// every minute by the test broker) deletes them, records not read yet
// included, and a test that reads them flakes (seen: a source that found
// its partitions empty).
var keepOld = map[string]string{"retention.ms": "-1"}

type kioRec struct {
	key, value []byte
	ts         int64
}

// kioWindowCount formats a window's count as "[start,end) n".
func kioWindowCount(w beam.Window, _ []byte, n int) string {
	iw := w.(window.IntervalWindow)
	return fmt.Sprintf("[%d,%d) %d", iw.Start, iw.End, n)
}

func kioConst(key, _ []byte) ([]byte, int) { return []byte("all"), 1 }

func kioToBytes(s string) []byte { return []byte(s) }

func init() {
	register.Function3x1(kioWindowCount)
	register.Function2x2(kioConst)
	register.Function1x1(kioToBytes)
}

// startJob runs p in the background under ctx (an unbounded job runs until
// ctx is cancelled) and returns the channel of its result.
func startJob(ctx context.Context, bs, app string, p *beam.Pipeline) <-chan error {
	*runner.BootstrapServers = bs
	*runner.ApplicationID = app
	done := make(chan error, 1)
	go func() {
		_, err := beam.Run(ctx, runner.Name, p)
		done <- err
	}()
	return done
}

// readValues reads topic read_committed until it holds n records or
// timeout passes, and returns the values sorted.
func readValues(t *testing.T, bs, topic string, n int, timeout time.Duration) []string {
	t.Helper()
	recs, err := kafkaenv.Consume(context.Background(), bs, topic, n, kafkaenv.ReadCommitted, timeout)
	if err != nil && !errors.Is(err, kafkaenv.ErrTimeout) {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Value))
	}
	sort.Strings(out)
	return out
}

// freeAddr returns a free 127.0.0.1 port for --watermarks_addr.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestKafkaSourceIdleness is the first scenario: a topic of three
// partitions whose records (event times B + 0, 10, …, 180 s) are all in
// partition 0; partitions 1 and 2 never get a record. With 5 s of
// idleness their clocks start when they are assigned, they idle out, and
// the 1-minute windows the watermark (B + 180 s, partition 0's) has passed
// fire: [B, B+60 s), [B+60, B+120 s), [B+120, B+180 s), six records each.
// Without idleness nothing fires, and GET /watermarks names partitions 1
// and 2 of the source stage as what holds it. (B is a minute boundary in
// 2023, not 0: a producer's CreateTime of 0 means "now" to librdkafka.)
func TestKafkaSourceIdleness(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	for _, idle := range []bool{true, false} {
		t.Run(fmt.Sprintf("idleness=%v", idle), func(t *testing.T) {
			in, out := uniqueName(t, "in"), uniqueName(t, "out")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 3, Config: keepOld}, kafkaenv.TopicSpec{Name: out, Partitions: 1, Config: keepOld}); err != nil {
				t.Fatal(err)
			}
			const base = 1_700_000_040_000 // a minute boundary
			var recs []kioRec
			for s := int64(0); s <= 180; s += 10 {
				recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", s)), value: []byte("v"), ts: base + s*1000})
			}
			produceAt(t, bs, in, 0, recs...)

			idleness := 5 * time.Second
			if !idle {
				idleness = -1
			}
			p, s := beam.NewPipelineWithRoot()
			kvs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(idleness))
			counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
			kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))

			addr := freeAddr(t)
			old := *runner.WatermarksAddr
			*runner.WatermarksAddr = addr
			defer func() { *runner.WatermarksAddr = old }()
			jctx, jcancel := context.WithCancel(ctx)
			done := startJob(jctx, bs, uniqueName(t, "app"), p)
			defer func() { jcancel(); <-done }()

			var want []string
			for m := int64(0); m < 3; m++ {
				want = append(want, fmt.Sprintf("[%d,%d) 6", base+m*60000, base+(m+1)*60000))
			}
			if idle {
				got := readValues(t, bs, out, 3, 60*time.Second)
				if strings.Join(got, "|") != strings.Join(want, "|") {
					t.Fatalf("output %q, want %q", got, want)
				}
				return
			}
			if got := readValues(t, bs, out, 1, 12*time.Second); len(got) != 0 {
				t.Fatalf("without idleness, windows fired: %q", got)
			}
			held := heldSourcePartitions(t, "http://"+addr+"/watermarks", in)
			if held != "[1 2]" {
				t.Fatalf("GET /watermarks: the source stage's missing partitions are %s, want [1 2]", held)
			}
		})
	}
}

// heldSourcePartitions returns the missing partitions GET /watermarks shows
// for the stage whose name says it reads topic (the Kafka source stage).
func heldSourcePartitions(t *testing.T, url, topic string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	stages, _ := body["stages"].(map[string]any)
	for name, st := range stages {
		if !strings.Contains(name, "kafkaio") {
			continue
		}
		m, _ := st.(map[string]any)
		return fmt.Sprint(m["missingPartitions"])
	}
	b, _ := json.Marshal(body)
	t.Fatalf("no Kafka source stage in GET /watermarks: %s", b)
	return ""
}

// TestKafkaSinkPlainRecords: Read → Write copies a topic's records as
// plain records (no envelope), each once in a read_committed read, with
// its key, value and timestamp, on the partition the Java client's default
// partitioner gives its key.
func TestKafkaSinkPlainRecords(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 2, Config: keepOld}, kafkaenv.TopicSpec{Name: out, Partitions: 5, Config: keepOld}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for p := int32(0); p < 2; p++ {
		var recs []kioRec
		for i := 0; i < n/2; i++ {
			recs = append(recs, kioRec{key: []byte(fmt.Sprintf("user-%d-%d", p, i)), value: []byte(fmt.Sprintf("v%d-%d", p, i)), ts: 1_700_000_000_000 + int64(i)*1000})
		}
		produceAt(t, bs, in, p, recs...)
	}
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second)))
	jctx, jcancel := context.WithCancel(ctx)
	done := startJob(jctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()

	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": uniqueName(t, "check"), "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(out, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		m, err := c.ReadMessage(time.Second)
		if err != nil {
			continue
		}
		k := string(m.Key)
		seen[k]++
		var pi, i int
		if _, err := fmt.Sscanf(k, "user-%d-%d", &pi, &i); err != nil {
			t.Fatalf("record with key %q", k)
		}
		if want := fmt.Sprintf("v%d-%d", pi, i); string(m.Value) != want {
			t.Errorf("key %s: value %q, want %q (plain, no envelope)", k, m.Value, want)
		}
		if want := stage.JavaPartition(m.Key, 5); m.TopicPartition.Partition != want {
			t.Errorf("key %s on partition %d, want %d (the Java client's default partitioner)", k, m.TopicPartition.Partition, want)
		}
		if want := time.UnixMilli(1_700_000_000_000 + int64(i)*1000); !m.Timestamp.Equal(want) {
			t.Errorf("key %s: timestamp %v, want %v (the event time)", k, m.Timestamp, want)
		}
	}
	if len(seen) != n {
		t.Fatalf("read %d distinct records, want %d", len(seen), n)
	}
	// Until 2 s pass without a record: nothing is written twice.
	for {
		m, err := c.ReadMessage(2 * time.Second)
		if err != nil {
			break
		}
		seen[string(m.Key)]++
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("key %s read %d times", k, c)
		}
	}
}

// TestNoWatermarksRefused: a source with kafkaio.WithNoWatermarks() beside
// a windowed GroupByKey is refused before any topic exists, the error
// naming the source and the operator (seed 002's noWatermarks() trap).
func TestNoWatermarksRefused(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in := uniqueName(t, "in")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithNoWatermarks())
	_ = stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	app := uniqueName(t, "app")
	*runner.BootstrapServers = bs
	*runner.ApplicationID = app
	_, err := beam.Run(ctx, runner.Name, p)
	if err == nil {
		t.Fatal("the job ran")
	}
	for _, want := range []string{"kafkaio.Read(" + in + ")", "WithNoWatermarks", "windowed GroupByKey"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	a, aerr := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if aerr != nil {
		t.Fatal(aerr)
	}
	defer a.Close()
	md, merr := a.GetMetadata(nil, true, 10000)
	if merr != nil {
		t.Fatal(merr)
	}
	for name := range md.Topics {
		if strings.HasPrefix(name, app) {
			t.Errorf("topic %s exists after the refusal", name)
		}
	}
}

// kioKeyOf keys a record by its key for a per-key count.
func kioKeyOf(key, _ []byte) (string, int) { return string(key), 1 }

// kioFormat formats a window's per-key count as a plain record value.
func kioFormat(w beam.Window, key string, n int) []byte {
	iw := w.(window.IntervalWindow)
	return []byte(fmt.Sprintf("%s [%d,%d) %d", key, iw.Start, iw.End, n))
}

func init() {
	register.Function2x2(kioKeyOf)
	register.Function3x1(kioFormat)
}

// kioBoundedPipeline: a bounded Read of in (bounded out-of-orderness 10 s),
// 1-minute windows, a count per key, each count written to out as a plain
// record value.
func kioBoundedPipeline(in, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(10*time.Second), kafkaio.WithIdleness(2*time.Second))
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioKeyOf, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioFormat, counted))
	return p
}

// TestKafkaBoundedReadMatchesPrism: the same bounded pipeline over the same
// topic (three partitions, one of them empty, 600 records in event-time
// order per partition) on Prism (kafkaio's DoFns read and write) and on
// this runner (a source stage, a bounded read that ends at the start's end
// offsets, the sink in the transactions): the two output topics hold the
// same records, each once, and this runner's job ends by itself.
func TestKafkaBoundedReadMatchesPrism(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, outP, outK := uniqueName(t, "in"), uniqueName(t, "out-prism"), uniqueName(t, "out-ks")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 3, Config: keepOld}, kafkaenv.TopicSpec{Name: outP, Partitions: 2, Config: keepOld}, kafkaenv.TopicSpec{Name: outK, Partitions: 2, Config: keepOld}); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000
	for p := int32(0); p < 2; p++ {
		var recs []kioRec
		for i := 0; i < 300; i++ {
			recs = append(recs, kioRec{key: []byte(fmt.Sprintf("k%d", i%4)), value: []byte("v"), ts: base + int64(i)*1500 + int64(p)*100})
		}
		produceAt(t, bs, in, p, recs...)
	}
	t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs) // kafkaio's DoFns on Prism
	if !beam.Initialized() {
		beam.Init() // Prism's universal runner insists; kafkastreams does it itself
	}
	if _, err := prism.Execute(ctx, kioBoundedPipeline(in, outP)); err != nil {
		t.Fatalf("prism: %v", err)
	}
	want := readValues(t, bs, outP, 0, 30*time.Second)
	if len(want) == 0 {
		t.Fatal("prism wrote nothing")
	}
	r := runApp(t, ctx, bs, uniqueName(t, "app"), kioBoundedPipeline(in, outK))
	got := readValues(t, bs, outK, 0, 30*time.Second)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kafkastreams wrote %d records, prism %d:\n  %s\nwant\n  %s", len(got), len(want), strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	t.Logf("%d records, equal; stats %+v", len(got), r.Stats)
}

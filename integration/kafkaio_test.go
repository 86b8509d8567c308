package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
)

// The Kafka source and sink (runner/kafkaio) on the real broker.

// keepOld is the configuration of a topic whose records carry event times
// years old: the broker's default 7-day retention (checked every minute on
// the test broker) would delete them.
var keepOld = map[string]string{"retention.ms": "-1"}

// userTopic is a user's topic for these tests: records stamped years ago
// (event times in 2023, as librdkafka reads a CreateTime of 0 as "now")
// must outlive the broker's default 7-day retention, whose check runs
// every minute on the test broker.
func userTopic(name string, partitions int) kafkaenv.TopicSpec {
	return kafkaenv.TopicSpec{Name: name, Partitions: partitions, Config: keepOld}
}

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
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p}, Key: r.key, Value: r.value, Timestamp: time.UnixMilli(r.ts), Headers: r.headers}
		// A partition added a moment ago (CreatePartitions returned) can
		// be missing from the metadata the new producer got first: its
		// Produce fails at once with "Local: Unknown partition" (the
		// fresh-clone CI run of f31199b, TestKafkaSourcePartitionAdded).
		// Asked again, with fresh metadata, for up to 10 s.
		for deadline := time.Now().Add(10 * time.Second); ; {
			err := pr.Produce(m, nil)
			var ke kafka.Error
			if err == nil {
				break
			}
			if !errors.As(err, &ke) || ke.Code() != kafka.ErrUnknownPartition || time.Now().After(deadline) {
				t.Fatal(err)
			}
			_, _ = pr.GetMetadata(&topic, false, 1000)
			time.Sleep(100 * time.Millisecond)
		}
	}
	if n := kafkaclient.Drain(pr, 30*time.Second); n > 0 {
		t.Fatalf("%d records not delivered", n)
	}
}

type kioRec struct {
	key, value []byte
	ts         int64
	headers    []kafka.Header
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
func startJob(ctx context.Context, bs, app string, p *beam.Pipeline, set ...func(*runner.Options)) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := beam.Run(withJob(ctx, bs, app, set...), runner.Name, p)
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

// serving makes the job started under the returned context serve GET
// /watermarks on a port the kernel picks (jobOptions' WatermarksAddr, the
// default 127.0.0.1:0, and runner.WithServing), and returns a function giving that address: "" until
// the job listens. (A port the test chose and released before the job bound
// it could be taken meanwhile: a CI run failed so, "address already in use",
// and the test waited 30 s for output of a job that had ended.)
func serving(t *testing.T, ctx context.Context) (context.Context, func() string) {
	t.Helper()
	var mu sync.Mutex
	var addr string
	ctx = runner.WithServing(ctx, func(a string) {
		mu.Lock()
		addr = a
		mu.Unlock()
	})
	return ctx, func() string {
		mu.Lock()
		defer mu.Unlock()
		return addr
	}
}

// servingAddr waits (up to a minute) for the address addrOf gives.
func servingAddr(t *testing.T, addrOf func() string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if a := addrOf(); a != "" {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not serve GET /watermarks within a minute (did it fail? see its log)")
		}
	}
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
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			idleness := 5 * time.Second
			if !idle {
				idleness = -1
			}
			in, out, p := idlenessJob(t, ctx, bs, 3, kafkaio.WithIdleness(idleness))

			jctx, jcancel := context.WithCancel(ctx)
			sctx, addrOf := serving(t, jctx)
			done := startJob(sctx, bs, uniqueName(t, "app"), p)
			defer func() { jcancel(); <-done }()
			addr := servingAddr(t, addrOf)

			want := idlenessWindows()
			if idle {
				got := readValues(t, bs, out, 3, 60*time.Second)
				if strings.Join(got, "|") != strings.Join(want, "|") {
					t.Fatalf("output %q, want %q", got, want)
				}
				// Seed 002's view of the source partitions (the embedded
				// WatermarkManager reads the report topic a moment behind).
				wantRows := []string{
					fmt.Sprintf("0 topic=%s idle=* lastEventTimeMs=%d idlenessTimeoutMs=5000 alignmentGroup=<nil> alignmentHeld=false drift=0", in, idlenessBase+180000),
					fmt.Sprintf("1 topic=%s idle=true lastEventTimeMs=<nil> idlenessTimeoutMs=5000 alignmentGroup=<nil> alignmentHeld=false drift=0", in),
					fmt.Sprintf("2 topic=%s idle=true lastEventTimeMs=<nil> idlenessTimeoutMs=5000 alignmentGroup=<nil> alignmentHeld=false drift=0", in),
				}
				var rows []string
				for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					rows = sourcePartitionRows(t, "http://"+addr+"/watermarks")
					if len(rows) > 0 {
						// Partition 0 idles out too, 5 s after its last record.
						rows[0] = strings.Replace(strings.Replace(rows[0], "idle=false", "idle=*", 1), "idle=true", "idle=*", 1)
					}
					if strings.Join(rows, "\n") == strings.Join(wantRows, "\n") || time.Now().After(deadline) {
						break
					}
				}
				if strings.Join(rows, "\n") != strings.Join(wantRows, "\n") {
					t.Errorf("GET /watermarks source partitions:\n  %s\nwant\n  %s", strings.Join(rows, "\n  "), strings.Join(wantRows, "\n  "))
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

// idlenessBase is idlenessJob's B: a minute boundary in 2023, not 0 (a
// producer's CreateTime of 0 means "now" to librdkafka).
const idlenessBase = 1_700_000_040_000

// idlenessJob makes the idleness tests' topics and job: an input topic of
// parts partitions whose records (event times B + 0, 10, …, 180 s,
// B = idlenessBase) are all in partition 0, and an output topic; the job
// reads the input with kafkaio.WithBoundedOutOfOrderness(0) and opts,
// counts the records of each 1-minute window and writes "[start,end) n"
// rows (idlenessWindows: the three the watermark B + 180 s passes).
func idlenessJob(t *testing.T, ctx context.Context, bs string, parts int, opts ...kafkaio.Option) (in, out string, p *beam.Pipeline) {
	t.Helper()
	in, out = uniqueName(t, "in"), uniqueName(t, "out")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, parts), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	var recs []kioRec
	for s := int64(0); s <= 180; s += 10 {
		recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", s)), value: []byte("v"), ts: idlenessBase + s*1000})
	}
	produceAt(t, bs, in, 0, recs...)
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, append([]kafkaio.Option{kafkaio.WithBoundedOutOfOrderness(0)}, opts...)...)
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))
	return in, out, p
}

// idlenessWindows are the rows idlenessJob's job writes once partition
// 0's watermark holds alone: [B, B+60 s), [B+60, B+120 s) and
// [B+120, B+180 s), six records each.
func idlenessWindows() []string {
	var want []string
	for m := int64(0); m < 3; m++ {
		want = append(want, fmt.Sprintf("[%d,%d) 6", idlenessBase+m*60000, idlenessBase+(m+1)*60000))
	}
	return want
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

// sourcePartitionRows returns the Kafka source stage's partitions in GET
// /watermarks as "<p> topic=… idle=… lastEventTimeMs=… idlenessTimeoutMs=…
// alignmentGroup=… alignmentHeld=… drift=…", and " unreadBecause=%q" when the
// page says why the partition holds records it has not read, sorted.
func sourcePartitionRows(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Stages map[string]struct {
			Partitions map[string]map[string]any `json:"partitions"`
		} `json:"stages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for name, st := range body.Stages {
		if !strings.Contains(name, "kafkaio") {
			continue
		}
		for key, p := range st.Partitions {
			num := func(k string) string {
				if v, ok := p[k].(float64); ok {
					return fmt.Sprintf("%d", int64(v))
				}
				return fmt.Sprint(p[k])
			}
			row := fmt.Sprintf("%s topic=%v idle=%v lastEventTimeMs=%s idlenessTimeoutMs=%s alignmentGroup=%v alignmentHeld=%v drift=%s",
				key[strings.LastIndex(key, ":")+1:], p["topic"], p["idle"], num("lastEventTimeMs"), num("idlenessTimeoutMs"), p["alignmentGroup"], p["alignmentHeld"], num("driftFromGroupMinMs"))
			if u, ok := p["unreadBecause"].(string); ok {
				row += fmt.Sprintf(" unreadBecause=%q", u)
			}
			rows = append(rows, row)
		}
	}
	sort.Strings(rows)
	return rows
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
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 5)); err != nil {
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
		if want := javapartition.ForKey(m.Key, 5); m.TopicPartition.Partition != want {
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
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1)); err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithNoWatermarks())
	_ = stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	app := uniqueName(t, "app")
	_, err := beam.Run(withJob(ctx, bs, app), runner.Name, p)
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
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 3), userTopic(outP, 2), userTopic(outK, 2)); err != nil {
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

// TestKafkaSourcePartitionAdded is the fourth scenario: a
// partition is added to the source topic while the job runs. The 5 records
// written to it right after the add and 5 more later are all read (from
// the new partition's start), each once; the source stage's reports carry
// the new total, so GET /watermarks shows the stage with 3 partitions, all
// reported, no longer held.
func TestKafkaSourcePartitionAdded(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000
	rec := func(name string, i int) kioRec {
		return kioRec{key: []byte(name), value: []byte(name), ts: base + int64(i)*1000}
	}
	produceAt(t, bs, in, 0, rec("p0-a", 0))
	produceAt(t, bs, in, 1, rec("p1-a", 1))

	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.WithIdleness(time.Hour), kafkaio.WithProperty("topic.metadata.refresh.interval.ms", "1000")))
	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)
	if got := readValues(t, bs, out, 2, 30*time.Second); len(got) != 2 {
		t.Fatalf("before the add: %q", got)
	}

	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: in, IncreaseTo: 3}})
	a.Close()
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("add a partition: %v %v", err, res)
	}
	var want []string
	for i := 0; i < 5; i++ {
		r := rec(fmt.Sprintf("p2-%d", i), 10+i)
		produceAt(t, bs, in, 2, r)
		want = append(want, string(r.value))
	}
	time.Sleep(3 * time.Second)
	for i := 5; i < 10; i++ {
		r := rec(fmt.Sprintf("p2-%d", i), 10+i)
		produceAt(t, bs, in, 2, r)
		want = append(want, string(r.value))
	}
	want = append(want, "p0-a", "p1-a")
	sort.Strings(want)
	got := readValues(t, bs, out, len(want), 60*time.Second)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("output %q, want %q (each once)", got, want)
	}
	// The source stage knows 3 partitions, all reported.
	deadline := time.Now().Add(30 * time.Second)
	for {
		total, held, missing := sourceStageState(t, "http://"+addr+"/watermarks")
		if total == 3 && !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /watermarks: source stage total=%d held=%v missing=%v, want 3 partitions, not held", total, held, missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Nothing more arrives: each record once.
	if got := readValues(t, bs, out, len(want)+1, 3*time.Second); len(got) != len(want) {
		t.Fatalf("output %q, want %d records", got, len(want))
	}
}

// sourceStageState returns the Kafka source stage's total, held flag and
// missing partitions from GET /watermarks.
func sourceStageState(t *testing.T, url string) (int, bool, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Stages map[string]struct {
			Total   int     `json:"totalSourcePartitions"`
			Held    bool    `json:"held"`
			Missing []int32 `json:"missingPartitions"`
		} `json:"stages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for name, st := range body.Stages {
		if strings.Contains(name, "kafkaio") {
			return st.Total, st.Held, fmt.Sprint(st.Missing)
		}
	}
	return 0, true, "no source stage"
}

// kioTimestampFromValue reads a record's event time from its value: ms
// since the epoch as decimal text.
func kioTimestampFromValue(r kafkaio.Record) (time.Time, error) {
	var ms int64
	if _, err := fmt.Sscanf(string(r.Value), "%d", &ms); err != nil {
		return time.Time{}, fmt.Errorf("value %q is not a timestamp", r.Value)
	}
	if ms < 0 {
		panic("a negative timestamp")
	}
	return time.UnixMilli(ms), nil
}

// kioStamp formats an element with its event time.
func kioStamp(ts beam.EventTime, _, value []byte) []byte {
	return []byte(fmt.Sprintf("%s@%d", value, int64(ts)))
}

func init() {
	register.Function1x2(kioTimestampFromValue)
	register.Function3x1(kioStamp)
}

// TestKafkaTimestampFnDeadLetter: a source whose event times come from the
// record values (kafkaio.WithTimestampFn), on this runner and on Prism (a
// bounded Read, whose DoFn shares the bad-record handling of the unbounded
// one; it ignored WithTimestampFn before session 4): good records are
// elements at those times; the records the function fails on (an error, a
// panic) are no elements, and land once each, as they were, on the
// dead-letter topic (on this runner in the source stage's transactions).
func TestKafkaTimestampFnDeadLetter(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	for _, on := range []string{"kafkastreams", "prism"} {
		t.Run(on, func(t *testing.T) {
			in, out, dlq := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "dlq")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1), userTopic(dlq, 1)); err != nil {
				t.Fatal(err)
			}
			produceAt(t, bs, in, 0,
				kioRec{key: []byte("a"), value: []byte("1700000040000"), ts: 1},
				kioRec{key: []byte("b"), value: []byte("not a time"), ts: 1_700_000_002_000, headers: []kafka.Header{{Key: "trace", Value: []byte("b-1")}}},
				kioRec{key: []byte("c"), value: []byte("1700000041000"), ts: 3},
				kioRec{key: []byte("d"), value: []byte("-5"), ts: 4})
			p, s := beam.NewPipelineWithRoot()
			kvs := kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithIdleness(time.Second),
				kafkaio.WithTimestampFn(kioTimestampFromValue), kafkaio.WithDeadLetterTopic(dlq))
			kafkaio.Write(s, out, beam.ParDo(s, kioStamp, kvs))
			if on == "prism" {
				t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs)
				if !beam.Initialized() {
					beam.Init()
				}
				if _, err := prism.Execute(ctx, p); err != nil {
					t.Fatalf("prism: %v", err)
				}
			} else {
				runApp(t, ctx, bs, uniqueName(t, "app"), p)
			}
			if got, want := readValues(t, bs, out, 0, 30*time.Second), []string{"1700000040000@1700000040000", "1700000041000@1700000041000"}; strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("output %q, want %q", got, want)
			}
			if got, want := readValues(t, bs, dlq, 0, 30*time.Second), []string{"-5", "not a time"}; strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("dead-letter topic %q, want %q", got, want)
			}
			if on == "kafkastreams" {
				// As it was read: its headers and its Kafka timestamp too
				// (the source stage's dead letters kept only key and
				// value).
				m := readRecord(t, bs, dlq, "b")
				if len(m.Headers) != 1 || m.Headers[0].Key != "trace" || string(m.Headers[0].Value) != "b-1" {
					t.Errorf("dead letter b: headers %v, want trace=b-1", m.Headers)
				}
				if m.Timestamp.UnixMilli() != 1_700_000_002_000 {
					t.Errorf("dead letter b: timestamp %v, want %v (the record's)", m.Timestamp, time.UnixMilli(1_700_000_002_000))
				}
			}
		})
	}
}

// readRecord returns the first record of topic whose key is key, read
// read_committed from the beginning (fails the test after 30 s).
func readRecord(t *testing.T, bs, topic, key string) *kafka.Message {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": uniqueName(t, "read"), "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(topic, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if m, err := c.ReadMessage(time.Second); err == nil && string(m.Key) == key {
			return m
		}
	}
	t.Fatalf("no record of key %q in %s", key, topic)
	return nil
}

// TestKafkaSourceAlignment: watermark alignment (seed 002, FLIP-217). A
// topic of two partitions: partition 1 holds 31 records (B + 0 … 30 s)
// and then stays quiet; partition 0 holds 3 000 (B + 0 … 600 s, every
// 200 ms). With the source in an alignment group with a drift of 60 s and
// bundles of 50 records, partition 0 is paused once its watermark is more
// than 60 s ahead of the group's minimum (partition 1's, B + 30 s): GET
// /watermarks shows it held, its latest event time within a bundle of B +
// 90 s. Partition 1 then idles out (6 s), which releases the group: every
// record is read, each once.
func TestKafkaSourceAlignment(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000
	var p0, p1 []kioRec
	for i := 0; i < 3000; i++ {
		p0 = append(p0, kioRec{key: []byte("a"), value: []byte(fmt.Sprint("p0-", i)), ts: base + int64(i)*200})
	}
	for i := 0; i <= 30; i++ {
		p1 = append(p1, kioRec{key: []byte("b"), value: []byte(fmt.Sprint("p1-", i)), ts: base + int64(i)*1000})
	}
	produceAt(t, bs, in, 1, p1...)
	produceAt(t, bs, in, 0, p0...)

	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithIdleness(6*time.Second), kafkaio.WithWatermarkAlignment("g", time.Minute))
	kafkaio.Write(s, out, kvs)
	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), p, func(o *runner.Options) { o.MaxBundleSize = 50 })
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)

	// Partition 0 held, within a bundle of B + 90 s, before partition 1 idles.
	waitHTTP(t, "http://"+addr+"/watermarks")
	sawHeld := false
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) && !sawHeld {
		for _, row := range sourcePartitionRows(t, "http://"+addr+"/watermarks") {
			if !strings.HasPrefix(row, "0 ") || !strings.Contains(row, "alignmentHeld=true") {
				continue
			}
			sawHeld = true
			var last int64
			if _, err := fmt.Sscanf(row[strings.Index(row, "lastEventTimeMs=")+len("lastEventTimeMs="):], "%d", &last); err != nil {
				t.Fatalf("row %q", row)
			}
			if limit := int64(base + 90_000 + 50*200); last > limit {
				t.Errorf("partition 0 held at event time %d, past the group minimum + 60 s + one bundle (%d): %s", last, limit, row)
			}
			if !strings.Contains(row, "alignmentGroup=g") {
				t.Errorf("row %q does not name the group", row)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sawHeld {
		t.Fatalf("partition 0 was never shown held: %q", sourcePartitionRows(t, "http://"+addr+"/watermarks"))
	}
	got := readValues(t, bs, out, 3031, 60*time.Second)
	if len(got) != 3031 {
		t.Fatalf("read %d records, want 3031 (alignment released once partition 1 idled)", len(got))
	}
	seen := map[string]bool{}
	for _, v := range got {
		if seen[v] {
			t.Fatalf("%s twice", v)
		}
		seen[v] = true
	}
}

// waitHTTP waits up to 30 s for url to answer (the job's HTTP server starts
// with the job).
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kioValue keeps a record's value.
func kioValue(_, value []byte) []byte { return value }

func init() { register.Function2x1(kioValue) }

// TestKafkaReadPatternAndStartAt: on this runner and on Prism, ReadPattern reads every topic whose name
// matches (two topics here, of 2 and 1 partitions; a third, whose name
// does not match, is not read), each as its own source stage flattened
// into one PCollection, and WithStartAt starts each partition at its first
// record stamped at or after the start time. Each topic holds 4 records
// per partition before the start time and 6 at or after it; the output
// (bounded reads, written as plain values) is exactly the 18 later ones,
// each once.
func TestKafkaReadPatternAndStartAt(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	prefix := uniqueName(t, "src")
	a, c, other, out := prefix+"-a", prefix+"-c", prefix+"x-b", uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(a, 2), userTopic(c, 1), userTopic(other, 1), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	const start = 1_700_000_100_000
	var want []string
	for _, tp := range []struct {
		topic string
		parts int32
	}{{a, 2}, {c, 1}, {other, 1}} {
		for p := int32(0); p < tp.parts; p++ {
			var recs []kioRec
			for i := 0; i < 10; i++ {
				ts := start + int64(i-4)*1000 // i < 4: before the start time
				v := fmt.Sprintf("%s/%d/%d", tp.topic, p, i)
				recs = append(recs, kioRec{key: []byte("k"), value: []byte(v), ts: ts})
				if i >= 4 && tp.topic != other {
					want = append(want, v)
				}
			}
			produceAt(t, bs, tp.topic, p, recs...)
		}
	}
	sort.Strings(want)
	setFlag(t, "bootstrap_servers", bs) // ReadPattern lists the topics of the cluster of the runner's --bootstrap_servers, at construction
	pipe := func(out string) *beam.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		recs := kafkaio.ReadPattern(s, regexp.QuoteMeta(prefix)+"-[a-c]", kafkaio.Bounded(), kafkaio.WithStartAt(time.UnixMilli(start)), kafkaio.WithIdleness(time.Second))
		kafkaio.Write(s, out, beam.ParDo(s, kioValue, recs))
		return p
	}
	runApp(t, ctx, bs, uniqueName(t, "app"), pipe(out))
	got := readValues(t, bs, out, 0, 20*time.Second)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("wrote %d values:\n  %s\nwant %d:\n  %s", len(got), strings.Join(got, "\n  "), len(want), strings.Join(want, "\n  "))
	}
	// The same pipeline on Prism (kafkaio's DoFns read and write).
	outP := uniqueName(t, "out-prism")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(outP, 1)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs)
	if !beam.Initialized() {
		beam.Init()
	}
	if _, err := prism.Execute(ctx, pipe(outP)); err != nil {
		t.Fatalf("prism: %v", err)
	}
	if got := readValues(t, bs, outP, 0, 20*time.Second); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("on Prism: wrote %d values:\n  %s\nwant %d", len(got), strings.Join(got, "\n  "), len(want))
	}
}

// kioFailedOnce is set once kioFailOnce has failed its first call.
var kioFailedOnce atomic.Bool

// kioFailOnce returns its record's value, except that its first call in
// the process fails the bundle (the attempt aborts and its tasks rewind).
func kioFailOnce(_, v []byte) ([]byte, error) {
	if kioFailedOnce.CompareAndSwap(false, true) {
		return nil, errors.New("kioFailOnce: the first call fails")
	}
	return v, nil
}

func init() { register.Function2x2(kioFailOnce) }

// TestStartAtRewindStaysAtStart: a source starting at a time
// (WithStartAt) whose first attempt aborts (its first bundle fails once)
// is rewound to where it began, the first record at or after the start
// time, not to the log start: the output is the 6 records stamped at or
// after it, each once, and none of the 4 before. A task with nothing
// committed was sought back to the log start (kafka.OffsetBeginning)
// whatever its start, so a `latest` or start-time source output what it
// was never to read.
func TestStartAtRewindStaysAtStart(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	const start = 1_700_000_100_000
	var recs []kioRec
	var want []string
	for i := 0; i < 10; i++ {
		v := fmt.Sprintf("r%d", i)
		recs = append(recs, kioRec{key: []byte("k"), value: []byte(v), ts: start + int64(i-4)*1000}) // i < 4: before the start time
		if i >= 4 {
			want = append(want, v)
		}
	}
	produceAt(t, bs, in, 0, recs...)
	kioFailedOnce.Store(false)
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithStartAt(time.UnixMilli(start)), kafkaio.WithIdleness(time.Second))
	kafkaio.Write(s, out, beam.ParDo(s, kioFailOnce, kvs))
	runApp(t, ctx, bs, uniqueName(t, "app"), p)
	if !kioFailedOnce.Load() {
		t.Fatal("the first bundle did not fail: this run cannot show the rewind")
	}
	if got := readValues(t, bs, out, 0, 10*time.Second); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("output %q, want %q (the records from the start time, each once)", got, want)
	}
}

package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	xkafkaio "github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
)

// Beam's cross-language Kafka transforms (the Go SDK's io/xlang/kafkaio),
// expanded by the runner in this process (runner/xlang.go), on the real
// broker.

// xlangAll keys every record alike: one count per window.
func xlangAll(_, _ []byte) string { return "all" }

// xlangFormat makes a window's count a Kafka record: key "<key>
// [start,end)" (ms), value the count.
func xlangFormat(w beam.Window, key string, n int) ([]byte, []byte) {
	iw := w.(window.IntervalWindow)
	return []byte(fmt.Sprintf("%s [%d,%d)", key, iw.Start, iw.End)), []byte(strconv.Itoa(n))
}

func init() {
	register.Function2x1(xlangAll)
	register.Function3x2(xlangFormat)
}

// xlangCountPipeline counts the records of topic in per fixed minute of
// their Kafka timestamps and writes one record per window to topic out. It
// is written against Beam's cross-language kafkaio only, as it would be for
// Flink or Dataflow with Java's expansion service at addr: nothing in it
// names this runner.
func xlangCountPipeline(addr, servers, in, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	recs := xkafkaio.Read(s, addr, servers, []string{in},
		xkafkaio.TimestampPolicy(xkafkaio.CreateTime),
		xkafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"}))
	windowed := beam.WindowInto(s, window.NewFixedWindows(time.Minute), recs)
	counts := stats.Count(s, beam.ParDo(s, xlangAll, windowed))
	xkafkaio.Write(s, addr, servers, out, beam.ParDo(s, xlangFormat, counts))
	return p
}

// TestXlangKafkaWindowedCount: a pipeline written only against Beam's
// cross-language kafkaio runs unchanged with --runner=kafkastreams, with
// no Java and no expansion service: its expansion address is
// "localhost:8097", where Java's service usually listens and nothing
// listens here, so the build itself shows that nothing was dialled. The
// input's records (event times B + 0, 10, …, 180 s in one partition; B a
// minute boundary in 2023, not 0, which a producer's CreateTime takes as
// "now") fill the windows [B, B+60 s), [B+60, B+120 s) and
// [B+120, B+180 s) with six records each; the watermark, B + 180 s, has
// passed them, so each is written once: a plain record "all [start,end)"
// → "6" at the window's last millisecond, on the Java client's partition
// for its key, read once by a read_committed consumer.
func TestXlangKafkaWindowedCount(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const outPartitions = 3
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, outPartitions)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000 // a minute boundary
	var recs []kioRec
	for s := int64(0); s <= 180; s += 10 {
		recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", s)), value: []byte("v"), ts: base + s*1000})
	}
	produceAt(t, bs, in, 0, recs...)

	p := xlangCountPipeline("localhost:8097", bs, in, out)
	jctx, jcancel := context.WithCancel(ctx)
	done := startJob(jctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()

	want := map[string]int64{} // key -> record timestamp (ms)
	for m := int64(0); m < 3; m++ {
		start, end := base+m*60_000, base+(m+1)*60_000
		want[fmt.Sprintf("all [%d,%d)", start, end)] = end - 1
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": uniqueName(t, "check"), "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(out, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	check := func(m *kafka.Message) {
		k := string(m.Key)
		seen[k]++
		ts, ok := want[k]
		if !ok {
			t.Errorf("unexpected record %q → %q", k, m.Value)
			return
		}
		if string(m.Value) != "6" {
			t.Errorf("record %q: value %q, want \"6\"", k, m.Value)
		}
		if !m.Timestamp.Equal(time.UnixMilli(ts)) {
			t.Errorf("record %q: timestamp %d, want %d (the window's last millisecond)", k, m.Timestamp.UnixMilli(), ts)
		}
		if p := javapartition.ForKey(m.Key, outPartitions); m.TopicPartition.Partition != p {
			t.Errorf("record %q on partition %d, want %d (the Java client's default partitioner)", k, m.TopicPartition.Partition, p)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for len(seen) < len(want) && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the job ended before its output was read: %v", err)
		default:
		}
		if m, err := c.ReadMessage(time.Second); err == nil {
			check(m)
		}
	}
	if len(seen) < len(want) {
		t.Fatalf("after 90 s, %d of the %d windows were written: %v", len(seen), len(want), seen)
	}
	// Until 3 s pass without a record: nothing is written twice.
	for {
		m, err := c.ReadMessage(3 * time.Second)
		if err != nil {
			break
		}
		check(m)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("record %q read %d times", k, n)
		}
	}
}

package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
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

// TestDrainLeavesUnreadRecordsUncommitted: a drain asked while records
// keep coming (a producer writes 2 000 records/s to two partitions, each
// value "<partition>/<seq>") ends the job with every record it did not
// process left uncommitted: per partition, the source stage's committed
// offset is exactly the number of records in the output, and those are
// the records 0 … n-1 of the partition, each once. A rerun of the
// application (the new version of a drained job) reads on from there.
// The drained loop still polls while its tasks report the end of time,
// and drops what it polls; a task woken to report committed its
// consumer's position, past those records, which a rerun never read.
func TestDrainLeavesUnreadRecordsUncommitted(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "linger.ms": 5})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	go func() {
		for range pr.Events() {
		}
	}()
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		seq := [2]int{}
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			for i := 0; i < 20; i++ { // 2 000 records/s
				p := int32(i % 2)
				m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &in, Partition: p}, Value: []byte(fmt.Sprintf("%d/%d", p, seq[p]))}
				if err := pr.Produce(m, nil); err != nil {
					t.Errorf("producer: %v", err)
					return
				}
				seq[p]++
			}
		}
	}()
	defer func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		<-stopped
	}()

	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in))
	app := uniqueName(t, "app")
	done := startJob(ctx, bs, app, p)
	if got := readValues(t, bs, out, 2000, 60*time.Second); len(got) < 2000 {
		t.Fatalf("before the drain: %d records in the output after 60 s, want 2 000", len(got))
	}
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
	close(quit)
	<-stopped
	if n := kafkaclient.Drain(pr, 30*time.Second); n > 0 {
		t.Fatalf("%d records not delivered", n)
	}

	// The output, per input partition.
	got := map[int32][]int{}
	for _, v := range readValues(t, bs, out, 1<<30, 5*time.Second) {
		var part int32
		var seq int
		if _, err := fmt.Sscanf(v, "%d/%d", &part, &seq); err != nil {
			t.Fatalf("output record %q: %v", v, err)
		}
		got[part] = append(got[part], seq)
	}
	// The source stage's committed offsets.
	ad, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	ls, err := ad.ListConsumerGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	committed := map[int32]int64{}
	for _, g := range ls.Valid {
		if !strings.HasPrefix(g.GroupID, app+".") {
			continue
		}
		res, err := ad.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: g.GroupID}}, kafka.SetAdminRequireStableOffsets(true))
		if err != nil {
			t.Fatal(err)
		}
		for _, gp := range res.ConsumerGroupsTopicPartitions {
			for _, tp := range gp.Partitions {
				if tp.Topic != nil && *tp.Topic == in && tp.Offset >= 0 {
					committed[tp.Partition] = int64(tp.Offset)
				}
			}
		}
	}
	// The records written after the drain's commits (the scenario: the
	// drained loop had records to poll and drop).
	ends := map[int32]int64{}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": app + "-check"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for part := int32(0); part < 2; part++ {
		_, high, err := c.QueryWatermarkOffsets(in, part, 10000)
		if err != nil {
			t.Fatal(err)
		}
		ends[part] = high
	}
	for part := int32(0); part < 2; part++ {
		seqs := got[part]
		sort.Ints(seqs)
		for i, s := range seqs {
			if s != i {
				t.Fatalf("partition %d: output records %d… are not the partition's first records, each once (at %d: %d)", part, len(seqs), i, s)
			}
		}
		off, ok := committed[part]
		if !ok {
			t.Fatalf("partition %d: no committed offset of the source stage (groups of %s: %v)", part, app, committed)
		}
		t.Logf("partition %d: %d records out, committed offset %d, log end %d", part, len(seqs), off, ends[part])
		if off != int64(len(seqs)) {
			t.Errorf("partition %d: the drained source committed offset %d with %d records in the output: %d records skipped for a rerun", part, off, len(seqs), off-int64(len(seqs)))
		}
		if ends[part] <= off {
			t.Errorf("partition %d: log end %d, committed %d: no record came after the drain's commits; this run cannot show a drain leaving records unread", part, ends[part], off)
		}
	}
}

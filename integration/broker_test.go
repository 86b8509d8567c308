package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// TestTransactionalConsumeTransformProduce proves the broker is a real Kafka
// with transactions: the loop every stage of the runner runs (DESIGN.md,
// "The transaction").
//
//  1. A transaction that consumes inputs, produces transformed outputs and
//     sends the consumed offsets with the consumer's group metadata
//     (KIP-447), then commits: read_committed sees the outputs and the
//     group's committed offsets moved to the end of the input.
//  2. A transaction doing the same on new inputs, then aborted: its outputs
//     are invisible to read_committed but present for read_uncommitted
//     (they were written), and the offsets did not move.
//  3. The consumer rewinds to the committed offsets and redoes that work
//     in a committed transaction: every output appears exactly once.
func TestTransactionalConsumeTransformProduce(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	group, txnID := uniqueName(t, "group"), uniqueName(t, "txn")
	must(t, kafkaenv.CreateTopics(ctx, bs,
		kafkaenv.TopicSpec{Name: in, Partitions: 2},
		kafkaenv.TopicSpec{Name: out, Partitions: 2}))

	must(t, kafkaenv.Produce(ctx, bs, in, records("a", 10)...))

	consumer, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":  bs,
		"group.id":           group,
		"isolation.level":    "read_committed",
		"enable.auto.commit": false,
		"auto.offset.reset":  "earliest",
	})
	must(t, err)
	defer consumer.Close()
	must(t, consumer.Subscribe(in, nil))
	producer, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": bs,
		"transactional.id":  txnID,
		"linger.ms":         5,
		// No delivery reports: nobody reads p.Events(), and Flush (before an
		// abort) would count the unread reports as still queued.
		"go.delivery.reports": false,
	})
	must(t, err)
	defer producer.Close()
	must(t, producer.InitTransactions(ctx))

	// 1. Commit.
	got := poll(t, consumer, 10)
	offsetsAfterTxn1 := transact(t, ctx, producer, consumer, out, got, "", true)
	outputs := consumeValues(t, ctx, bs, out, kafkaenv.ReadCommitted)
	assertValues(t, "read_committed after commit", outputs, upper(values("a", 10)))
	committed := committedOffsets(t, ctx, bs, group, in)
	assertOffsets(t, "after commit", committed, offsetsAfterTxn1)
	if total(committed) != 10 {
		t.Fatalf("committed offsets %v sum to %d, want 10", committed, total(committed))
	}

	// 2. Abort.
	must(t, kafkaenv.Produce(ctx, bs, in, records("b", 5)...))
	got = poll(t, consumer, 5)
	transact(t, ctx, producer, consumer, out, got, "aborted-", false)
	assertValues(t, "read_committed after abort", consumeValues(t, ctx, bs, out, kafkaenv.ReadCommitted), upper(values("a", 10)))
	uncommitted := consumeValues(t, ctx, bs, out, kafkaenv.ReadUncommitted)
	assertValues(t, "read_uncommitted after abort", uncommitted,
		append(upper(values("a", 10)), prefixed("aborted-", upper(values("b", 5)))...))
	assertOffsets(t, "after abort", committedOffsets(t, ctx, bs, group, in), offsetsAfterTxn1)

	// 3. Rewind to the committed offsets and redo the aborted work.
	rewind(t, consumer, in, offsetsAfterTxn1)
	got = poll(t, consumer, 5)
	transact(t, ctx, producer, consumer, out, got, "", true)
	assertValues(t, "read_committed after redo", consumeValues(t, ctx, bs, out, kafkaenv.ReadCommitted),
		upper(append(values("a", 10), values("b", 5)...)))
	if c := committedOffsets(t, ctx, bs, group, in); total(c) != 15 {
		t.Fatalf("committed offsets after redo %v sum to %d, want 15", c, total(c))
	}
}

// TestNoDockerDaemonFallsBackToLocalProcess runs the round trip above in a
// child copy of this test binary whose DOCKER_HOST names a socket nobody
// listens on: kafkaenv must say it falls back and start a local java broker.
func TestNoDockerDaemonFallsBackToLocalProcess(t *testing.T) {
	b := needBroker(t)
	switch b.Mode() {
	case kafkaenv.ModeProcess:
		t.Skip("needs a container broker in TestMain: the package's broker is already a local process, so the fallback already ran there")
	case kafkaenv.ModeExternal:
		t.Skipf("%s is set: no broker is started here", kafkaenv.EnvBootstrapServers)
	}
	if _, err := exec.LookPath("java"); err != nil && os.Getenv("JAVA_HOME") == "" {
		t.Skip("needs a JDK: the local-process fallback cannot run here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestTransactionalConsumeTransformProduce$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(),
		"DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-docker.sock"),
		kafkaenv.EnvBootstrapServers+"=",
		kafkaenv.EnvMode+"=",
	)
	outb, err := cmd.CombinedOutput()
	output := string(outb)
	t.Logf("child test binary output:\n%s", indent(output))
	if err != nil {
		t.Fatalf("child run failed: %v", err)
	}
	for _, want := range []string{
		"no Docker daemon (",
		"falling back to a local Kafka process",
		"broker: local process",
		"kafka ready in",
		"--- PASS: TestTransactionalConsumeTransformProduce",
	} {
		if !strings.Contains(output, want) {
			t.Errorf("child output lacks %q", want)
		}
	}
}

// transact runs one transaction over msgs: it produces each value, prefixed
// and upper-cased, to out, sends the offsets after msgs for the consumer's
// group, then commits or aborts. It returns the offsets sent.
func transact(t *testing.T, ctx context.Context, p *kafka.Producer, c *kafka.Consumer, out string, msgs []*kafka.Message, prefix string, commit bool) map[int32]int64 {
	t.Helper()
	must(t, p.BeginTransaction())
	next := map[int32]int64{}
	var in string
	for _, m := range msgs {
		in = *m.TopicPartition.Topic
		must(t, p.Produce(&kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &out, Partition: kafka.PartitionAny},
			Key:            m.Key,
			Value:          []byte(prefix + strings.ToUpper(string(m.Value))),
		}, nil))
		if o := int64(m.TopicPartition.Offset) + 1; o > next[m.TopicPartition.Partition] {
			next[m.TopicPartition.Partition] = o
		}
	}
	var offsets []kafka.TopicPartition
	for p, o := range next {
		offsets = append(offsets, kafka.TopicPartition{Topic: &in, Partition: p, Offset: kafka.Offset(o)})
	}
	meta, err := c.GetConsumerGroupMetadata()
	must(t, err)
	must(t, p.SendOffsetsToTransaction(ctx, offsets, meta))
	if commit {
		must(t, p.CommitTransaction(ctx))
	} else {
		// AbortTransaction purges what is still queued: flush first so the
		// aborted records reach the log (read_uncommitted must see them).
		if n := kafkaclient.Drain(p, 30*time.Second); n > 0 {
			t.Fatalf("%d records still queued after 30 s", n)
		}
		must(t, p.AbortTransaction(ctx))
	}
	return next
}

// poll reads exactly n records from the subscribed consumer within 60 s.
func poll(t *testing.T, c *kafka.Consumer, n int) []*kafka.Message {
	t.Helper()
	var got []*kafka.Message
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d records in 60s", len(got), n)
		}
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			must(t, ev.TopicPartition.Error)
			got = append(got, ev)
		case kafka.Error:
			if ev.IsFatal() {
				t.Fatalf("consumer: %v", ev)
			}
		}
	}
	return got
}

// rewind seeks the consumer back to offsets on topic.
func rewind(t *testing.T, c *kafka.Consumer, topic string, offsets map[int32]int64) {
	t.Helper()
	for p, o := range offsets {
		must(t, c.Seek(kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)}, 10000))
	}
}

func consumeValues(t *testing.T, ctx context.Context, bs, topic string, iso kafkaenv.Isolation) []string {
	t.Helper()
	recs, err := kafkaenv.Consume(ctx, bs, topic, 0, iso, 30*time.Second)
	must(t, err)
	var vs []string
	for _, r := range recs {
		vs = append(vs, string(r.Value))
	}
	return vs
}

func committedOffsets(t *testing.T, ctx context.Context, bs, group, topic string) map[int32]int64 {
	t.Helper()
	c, err := kafkaenv.CommittedOffsets(ctx, bs, group, topic)
	must(t, err)
	return c
}

func records(prefix string, n int) []kafkaenv.Record {
	var rs []kafkaenv.Record
	for i, v := range values(prefix, n) {
		rs = append(rs, kafkaenv.Record{Partition: kafkaenv.AnyPartition, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(v)})
	}
	return rs
}

func values(prefix string, n int) []string {
	var vs []string
	for i := 0; i < n; i++ {
		vs = append(vs, fmt.Sprintf("%s%d", prefix, i))
	}
	return vs
}

func upper(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strings.ToUpper(v)
	}
	return out
}

func prefixed(p string, vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = p + v
	}
	return out
}

func total(offsets map[int32]int64) int64 {
	var s int64
	for _, o := range offsets {
		if o > 0 {
			s += o
		}
	}
	return s
}

// assertValues compares values as multisets (partitions interleave).
func assertValues(t *testing.T, what string, got, want []string) {
	t.Helper()
	g, w := append([]string(nil), got...), append([]string(nil), want...)
	sort.Strings(g)
	sort.Strings(w)
	if strings.Join(g, ",") != strings.Join(w, ",") {
		t.Fatalf("%s: got %d values %v, want %d values %v", what, len(g), g, len(w), w)
	}
}

// assertOffsets checks the group committed exactly want on every partition
// it committed on.
func assertOffsets(t *testing.T, what string, got, want map[int32]int64) {
	t.Helper()
	for p, o := range want {
		if got[p] != o {
			t.Fatalf("%s: committed offsets %v, want %v", what, got, want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func indent(s string) string {
	return "    | " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    | ")
}

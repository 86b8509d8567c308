package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// TestReadToEndRightAfterCommit: a reader that starts the moment
// CommitTransaction returns must see that transaction. The broker writes
// the commit markers after answering EndTxn, so the last stable offset
// (where a read_committed EOF comes) may still be before the transaction;
// kafkaclient.ReadToEnd's end (the log end offset) waits for the marker. Checked for
// the two readers built on it, round after round: kafkaenv.Consume (which
// every test that reads a job's output uses) and a state store restore.
// Whether a round meets the race depends on timing (it is logged); a last
// round forces it with another producer's open transaction.
func TestReadToEndRightAfterCommit(t *testing.T) {
	bs := needBroker(t).BootstrapServers()
	topic := fmt.Sprintf("logend-test-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Asked the moment the topic exists, the broker may not know its leader
	// yet (NOT_LEADER_OR_FOLLOWER): Ends asks again.
	createCompactedTopic(t, bs, topic, 2)
	probe, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": topic + "-probe", "isolation.level": "read_committed"})
	must(t, err)
	defer probe.Close()
	ends, err := kafkaclient.LogEnds(ctx, probe, topic, []int32{0, 1})
	must(t, err)
	if ends[0] != 0 || ends[1] != 0 {
		t.Fatalf("log ends of a new topic %v, want 0 and 0", ends)
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "transactional.id": topic, "linger.ms": 0})
	must(t, err)
	defer p.Close()
	go func() {
		for range p.Events() {
		}
	}()
	must(t, p.InitTransactions(ctx))
	round := 0
	commitRound := func() {
		t.Helper()
		round++
		must(t, p.BeginTransaction())
		for part := int32(0); part < 2; part++ {
			must(t, p.Produce(&kafka.Message{
				TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part},
				Key:            fmt.Appendf(nil, "k%d", round),
				Value:          fmt.Appendf(nil, "v%d", round),
			}, nil))
		}
		must(t, p.CommitTransaction(ctx))
	}

	// The hazard: how often the last stable offset trails the log end
	// right after the commit returned (informative; it depends on timing).
	const rounds = 20
	behind := 0
	for i := 0; i < rounds; i++ {
		commitRound()
		_, lso, err := probe.QueryWatermarkOffsets(topic, 0, 10000)
		must(t, err)
		if lso < int64(2*round) { // a record and a commit marker per round on partition 0
			behind++
		}
	}
	t.Logf("the last stable offset trailed the log end right after CommitTransaction in %d of %d rounds", behind, rounds)

	// kafkaenv.Consume to the end, read_committed.
	t0 := time.Now()
	for i := 0; i < rounds; i++ {
		commitRound()
		recs, err := kafkaenv.Consume(ctx, bs, topic, -1, kafkaenv.ReadCommitted, 30*time.Second)
		must(t, err)
		if len(recs) != 2*round {
			t.Fatalf("round %d: Consume right after the commit read %d records, want %d", round, len(recs), 2*round)
		}
	}

	t.Logf("consume phase %v", time.Since(t0))
	t0 = time.Now()
	// A state store restore of partition 0.
	for i := 0; i < rounds; i++ {
		commitRound()
		m := newStateManager(t, bs, topic)
		tk, err := m.Restore(ctx, 0)
		must(t, err)
		key := fmt.Sprintf("k%d", round)
		if got, want := stateGet(t, tk, key), fmt.Sprintf("v%d", round); got != want {
			t.Fatalf("round %d: a restore right after the commit has %s = %s, want %s", round, key, got, want)
		}
		m.Close()
	}
	t.Logf("restore phase %v", time.Since(t0))

	// The race forced. The rounds above may never meet it (it depends on
	// timing, and they pass either way), so here a second transactional
	// producer's transaction, open on both partitions before our commit,
	// holds the last stable offset before our committed records: a reader
	// taking the last stable offset (or a read_committed EOF) for the end
	// would miss them, every time. The readers must wait for the end as it
	// was when they began, past the open transaction, which is aborted a
	// moment after they started.
	blocker, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "transactional.id": topic + "-blocker", "linger.ms": 0})
	must(t, err)
	defer blocker.Close()
	go func() {
		for range blocker.Events() {
		}
	}()
	must(t, blocker.InitTransactions(ctx))
	_, lsoBefore, err := probe.QueryWatermarkOffsets(topic, 0, 10000)
	must(t, err)
	must(t, blocker.BeginTransaction())
	for part := int32(0); part < 2; part++ {
		must(t, blocker.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part}, Key: []byte("blocked"), Value: []byte("aborted")}, nil))
	}
	if left := kafkaclient.Drain(blocker, 10*time.Second); left != 0 {
		t.Fatalf("the blocking transaction's records are not written: %d left", left)
	}
	commitRound()
	_, lso, err := probe.QueryWatermarkOffsets(topic, 0, 10000)
	must(t, err)
	if lso != lsoBefore {
		t.Fatalf("with a transaction open before round %d, the last stable offset of partition 0 is %d, want %d (where the open transaction begins): the race is not forced", round, lso, lsoBefore)
	}
	type result struct {
		n   int
		got string
		err error
	}
	consumed, restored := make(chan result, 1), make(chan result, 1)
	go func() {
		recs, err := kafkaenv.Consume(ctx, bs, topic, -1, kafkaenv.ReadCommitted, 30*time.Second)
		consumed <- result{n: len(recs), err: err}
	}()
	m := newStateManager(t, bs, topic)
	go func() {
		tk, err := m.Restore(ctx, 0)
		r := result{err: err}
		if err == nil {
			v, ok, gerr := tk.Get(fmt.Appendf(nil, "k%d", round))
			r.got, r.err = string(v), gerr
			if !ok {
				r.got = "<absent>"
			}
		}
		restored <- r
	}()
	time.Sleep(time.Second)
	must(t, blocker.AbortTransaction(ctx))
	if r := <-consumed; r.err != nil || r.n != 2*round {
		t.Errorf("round %d, the last stable offset before it: Consume read %d records (%v), want %d", round, r.n, r.err, 2*round)
	}
	if r, want := <-restored, fmt.Sprintf("v%d", round); r.err != nil || r.got != want {
		t.Errorf("round %d, the last stable offset before it: a restore has k%d = %s (%v), want %s", round, round, r.got, r.err, want)
	}
}

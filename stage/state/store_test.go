package state

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// broker returns $KAFKA_BOOTSTRAP_SERVERS or skips: these tests need a real
// Kafka (go run ./cmd/localkafka starts one).
func broker(t *testing.T) string {
	t.Helper()
	bs := os.Getenv("KAFKA_BOOTSTRAP_SERVERS")
	if bs == "" || testing.Short() {
		t.Skip("KAFKA_BOOTSTRAP_SERVERS not set (or -short): no broker")
	}
	return bs
}

func createTopic(t *testing.T, bs, topic string, partitions int) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: partitions, ReplicationFactor: -1, Config: map[string]string{"cleanup.policy": "compact"}}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("create %s: %v %v", topic, err, res)
	}
}

// txn runs fn in one Kafka transaction of a fresh transactional producer
// and commits it, or aborts it if commit is false.
func txn(t *testing.T, bs, id string, commit bool, fn func(produce ProduceFunc) error) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "transactional.id": id, "linger.ms": 5})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	go func() {
		for range p.Events() {
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	err = fn(func(topic string, partition int32, key, value []byte) error {
		for {
			err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition}, Key: key, Value: value}, nil)
			if ke, ok := err.(kafka.Error); ok && ke.Code() == kafka.ErrQueueFull {
				p.Flush(100)
				continue
			}
			return err
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		err = p.CommitTransaction(ctx)
	} else {
		err = p.AbortTransaction(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func newManager(t *testing.T, bs, topic string) *Manager {
	t.Helper()
	m, err := Open(Options{Dir: t.TempDir(), Name: "test", Topic: topic, BootstrapServers: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func get(t *testing.T, tk *Task, key string) string {
	t.Helper()
	v, ok, err := tk.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "<absent>"
	}
	return string(v)
}

// TestPendingCommittedAborted: an attempt's writes are visible to reads of
// the task at once, go to the changelog in Prepare, reach Pebble on
// Committed and vanish on Aborted; a restore on another Manager sees
// exactly the committed transactions (an aborted transaction's changelog
// records never survive).
func TestPendingCommittedAborted(t *testing.T) {
	bs := broker(t)
	topic := fmt.Sprintf("state-test-%d", time.Now().UnixNano())
	createTopic(t, bs, topic, 2)
	m := newManager(t, bs, topic)
	tk, err := m.Restore(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Attempt 1: committed.
	must(t, tk.Set([]byte("a"), []byte("1")))
	must(t, tk.Set([]byte("b"), []byte("2")))
	must(t, tk.Set([]byte("a"), []byte("3")))
	if got := get(t, tk, "a"); got != "3" {
		t.Fatalf("pending read a = %s, want 3", got)
	}
	var produced []string
	txn(t, bs, topic+"-1", true, func(produce ProduceFunc) error {
		return m.Prepare(func(topic string, p int32, k, v []byte) error {
			produced = append(produced, fmt.Sprintf("%d:%s=%s", p, k, v))
			return produce(topic, p, k, v)
		})
	})
	must(t, m.Committed())
	if fmt.Sprint(produced) != "[1:a=3 1:b=2]" {
		t.Errorf("changelog records %v, want the last value per key, in key order", produced)
	}
	// Attempt 2: written to the changelog, then aborted.
	must(t, tk.Delete([]byte("b")))
	must(t, tk.Set([]byte("c"), []byte("9")))
	var scanned []string
	must(t, tk.Scan(nil, func(k, v []byte) error {
		scanned = append(scanned, fmt.Sprintf("%s=%s", k, v))
		return nil
	}))
	if fmt.Sprint(scanned) != "[a=3 c=9]" {
		t.Errorf("scan with pending writes %v, want [a=3 c=9]", scanned)
	}
	txn(t, bs, topic+"-2", false, func(produce ProduceFunc) error { return m.Prepare(produce) })
	m.Aborted([]int32{1})
	if got := get(t, tk, "b") + get(t, tk, "c"); got != "2<absent>" {
		t.Errorf("after abort b,c = %s, want 2<absent>", got)
	}
	// Attempt 3: a delete, committed (a tombstone in the changelog).
	must(t, tk.Delete([]byte("a")))
	txn(t, bs, topic+"-3", true, func(produce ProduceFunc) error { return m.Prepare(produce) })
	must(t, m.Committed())

	// Another instance restores task 1: only the committed state.
	m2 := newManager(t, bs, topic)
	tk2, err := m2.Restore(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "<absent>", "b": "2", "c": "<absent>"} {
		if got := get(t, tk2, k); got != want {
			t.Errorf("restored %s = %s, want %s", k, got, want)
		}
	}
	// Task 0's partition is empty: an empty store.
	tk0, err := m2.Restore(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, tk0, "b"); got != "<absent>" {
		t.Errorf("task 0 b = %s, want absent", got)
	}
}

// TestRestoreRate writes 200 000 records of ~100 bytes (and one aborted
// transaction after them) to a changelog partition and restores it,
// logging the rate; every committed key must be back.
func TestRestoreRate(t *testing.T) {
	bs := broker(t)
	const n, chunk = 200000, 50000
	topic := fmt.Sprintf("state-rate-%d", time.Now().UnixNano())
	createTopic(t, bs, topic, 1)
	val := make([]byte, 90)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	start := time.Now()
	for c := 0; c < n/chunk; c++ {
		txn(t, bs, topic+"-w", true, func(produce ProduceFunc) error {
			for i := c * chunk; i < (c+1)*chunk; i++ {
				if err := produce(topic, 0, []byte(fmt.Sprintf("key-%08d", i)), val); err != nil {
					return err
				}
			}
			return nil
		})
	}
	txn(t, bs, topic+"-w", false, func(produce ProduceFunc) error {
		return produce(topic, 0, []byte("aborted"), val)
	})
	t.Logf("wrote %d records in %v", n, time.Since(start))
	m := newManager(t, bs, topic)
	start = time.Now()
	tk, err := m.Restore(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("restored %d records (%.1f MB) in %v: %.0f records/s, %.1f MB/s", n, float64(n*(12+90))/1e6, el, float64(n)/el.Seconds(), float64(n*(12+90))/1e6/el.Seconds())
	count := 0
	must(t, tk.Scan(nil, func(k, v []byte) error {
		count++
		return nil
	}))
	if count != n {
		t.Errorf("restored %d keys, want %d (the aborted record must not be there)", count, n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

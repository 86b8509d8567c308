package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// The state store (stage/state) against the real broker: pending, committed
// and aborted attempts, and the restore rate.

func createCompactedTopic(t testing.TB, bs, topic string, partitions int) {
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
func stateTxn(t *testing.T, bs, id string, commit bool, fn func(produce state.ProduceFunc) error) {
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
		return kafkaclient.Produce(p, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition}, Key: key, Value: value}, nil, nil)
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

func newStateManager(t testing.TB, bs, topic string) *state.Manager {
	t.Helper()
	read := kafkaclient.NewChangelogReader(bs, nil)
	changelog := func(ctx context.Context, topic string, p int32, from func(state.ChangelogInfo) (int64, error), apply func(key, value []byte) error) (int, error) {
		return read.Read(ctx, topic, p, func(i kafkaclient.PartitionInfo) (int64, error) { return from(state.ChangelogInfo(i)) }, apply)
	}
	m, err := state.Open(state.Options{Dir: t.TempDir(), Name: "test", Topic: topic, Changelog: changelog, CloseChangelog: read.Close})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func stateGet(t *testing.T, tk *state.Task, key string) string {
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

// TestStateStorePendingCommittedAborted: an attempt's writes are visible to reads of
// the task at once, go to the changelog in Prepare, reach Pebble on
// Committed and vanish on Aborted; a restore on another Manager sees
// exactly the committed transactions (an aborted transaction's changelog
// records never survive).
func TestStateStorePendingCommittedAborted(t *testing.T) {
	bs := needBroker(t).BootstrapServers()
	topic := fmt.Sprintf("state-test-%d", time.Now().UnixNano())
	createCompactedTopic(t, bs, topic, 2)
	m := newStateManager(t, bs, topic)
	tk, err := m.Restore(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Attempt 1: committed.
	must(t, tk.Set([]byte("a"), []byte("1")))
	must(t, tk.Set([]byte("b"), []byte("2")))
	must(t, tk.Set([]byte("a"), []byte("3")))
	if got := stateGet(t, tk, "a"); got != "3" {
		t.Fatalf("pending read a = %s, want 3", got)
	}
	var produced []string
	stateTxn(t, bs, topic+"-1", true, func(produce state.ProduceFunc) error {
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
	stateTxn(t, bs, topic+"-2", false, func(produce state.ProduceFunc) error { return m.Prepare(produce) })
	m.Aborted([]int32{1})
	if got := stateGet(t, tk, "b") + stateGet(t, tk, "c"); got != "2<absent>" {
		t.Errorf("after abort b,c = %s, want 2<absent>", got)
	}
	// Attempt 3: a delete, committed (a tombstone in the changelog).
	must(t, tk.Delete([]byte("a")))
	stateTxn(t, bs, topic+"-3", true, func(produce state.ProduceFunc) error { return m.Prepare(produce) })
	must(t, m.Committed())

	// Another instance restores task 1: only the committed state.
	m2 := newStateManager(t, bs, topic)
	tk2, err := m2.Restore(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "<absent>", "b": "2", "c": "<absent>"} {
		if got := stateGet(t, tk2, k); got != want {
			t.Errorf("restored %s = %s, want %s", k, got, want)
		}
	}
	// Task 0's partition is empty: an empty store.
	tk0, err := m2.Restore(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateGet(t, tk0, "b"); got != "<absent>" {
		t.Errorf("task 0 b = %s, want absent", got)
	}
}

// TestStateStoreRestoreRate writes 200 000 records of ~100 bytes (and one aborted
// transaction after them) to a changelog partition and restores it,
// logging the rate; every committed key must be back.
func TestStateStoreRestoreRate(t *testing.T) {
	bs := needBroker(t).BootstrapServers()
	const n, chunk = 200000, 50000
	topic := fmt.Sprintf("state-rate-%d", time.Now().UnixNano())
	createCompactedTopic(t, bs, topic, 1)
	val := make([]byte, 90)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	start := time.Now()
	for c := 0; c < n/chunk; c++ {
		stateTxn(t, bs, topic+"-w", true, func(produce state.ProduceFunc) error {
			for i := c * chunk; i < (c+1)*chunk; i++ {
				if err := produce(topic, 0, []byte(fmt.Sprintf("key-%08d", i)), val); err != nil {
					return err
				}
			}
			return nil
		})
	}
	stateTxn(t, bs, topic+"-w", false, func(produce state.ProduceFunc) error {
		return produce(topic, 0, []byte("aborted"), val)
	})
	t.Logf("wrote %d records in %v", n, time.Since(start))
	m := newStateManager(t, bs, topic)
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

// TestChangelogReaderOneConsumerForManyReads: one ChangelogReader reads
// partitions one after another through one consumer, as a stage restores
// the tasks it was given: each read hands over exactly its partition's
// committed records from the offset from chose, a partition read again
// after more records sees the new ones, an aborted transaction's records
// never; a read whose from fails leaves the reader usable; after Close a
// read fails with net.ErrClosed.
func TestChangelogReaderOneConsumerForManyReads(t *testing.T) {
	bs := needBroker(t).BootstrapServers()
	topic := fmt.Sprintf("changelog-reader-%d", time.Now().UnixNano())
	createCompactedTopic(t, bs, topic, 4)
	write := func(id string, commit bool, recs ...[3]string) {
		stateTxn(t, bs, topic+"-"+id, commit, func(produce state.ProduceFunc) error {
			for _, r := range recs {
				p, _ := strconv.Atoi(r[0])
				if err := produce(topic, int32(p), []byte(r[1]), []byte(r[2])); err != nil {
					return err
				}
			}
			return nil
		})
	}
	write("a", true, [3]string{"0", "k0", "v0"}, [3]string{"1", "k1", "v1"}, [3]string{"1", "k1b", "v1b"}, [3]string{"2", "k2", "v2"})
	write("b", false, [3]string{"0", "x", "aborted"}, [3]string{"1", "x", "aborted"})
	r := kafkaclient.NewChangelogReader(bs, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := func(p int32, from func(kafkaclient.PartitionInfo) (int64, error)) (string, error) {
		var got []string
		_, err := r.Read(ctx, topic, p, from, func(k, v []byte) error {
			got = append(got, string(k)+"="+string(v))
			return nil
		})
		return strings.Join(got, " "), err
	}
	fromStart := func(i kafkaclient.PartitionInfo) (int64, error) { return i.Start, nil }
	for _, c := range []struct {
		p    int32
		want string
	}{{1, "k1=v1 k1b=v1b"}, {0, "k0=v0"}, {3, ""}, {2, "k2=v2"}, {1, "k1=v1 k1b=v1b"}} {
		got, err := read(c.p, fromStart)
		if err != nil || got != c.want {
			t.Fatalf("read of partition %d: %q, %v; want %q", c.p, got, err, c.want)
		}
	}
	write("c", true, [3]string{"0", "k0", "v0b"})
	if got, err := read(0, fromStart); err != nil || got != "k0=v0 k0=v0b" {
		t.Fatalf("partition 0 read again: %q, %v; want both its records", got, err)
	}
	// A tail: from the offset after the first record (the aborted one and
	// its marker are skipped).
	if got, err := read(0, func(kafkaclient.PartitionInfo) (int64, error) { return 1, nil }); err != nil || got != "k0=v0b" {
		t.Fatalf("tail of partition 0: %q, %v; want k0=v0b", got, err)
	}
	errFrom := errors.New("from refused")
	if _, err := read(2, func(kafkaclient.PartitionInfo) (int64, error) { return 0, errFrom }); !errors.Is(err, errFrom) {
		t.Fatalf("read whose from fails: %v, want its error", err)
	}
	if got, err := read(2, fromStart); err != nil || got != "k2=v2" {
		t.Fatalf("read after a failed one: %q, %v; want k2=v2", got, err)
	}
	r.Close()
	if _, err := read(1, fromStart); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
	r.Close()
}

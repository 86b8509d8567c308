package kafkaenv

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// Client helpers for tests. Each takes the bootstrap servers (so it works
// with any Broker, external ones included), opens its own client and closes
// it before returning.

// AnyPartition, as Record.Partition, lets the producer's partitioner choose
// (by key hash; kafka.PartitionAny in confluent-kafka-go).
const AnyPartition int32 = kafka.PartitionAny

// Isolation is the consumer's isolation.level.
type Isolation string

// The two isolation levels of Kafka consumers.
const (
	// ReadCommitted hides records of open and aborted transactions.
	ReadCommitted Isolation = "read_committed"
	// ReadUncommitted returns every record written, aborted ones included.
	ReadUncommitted Isolation = "read_uncommitted"
)

// ErrTimeout is returned by Consume when fewer than the wanted records
// arrived in time; the records read so far are returned with it.
var ErrTimeout = errors.New("kafkaenv: timed out waiting for records")

// TopicSpec describes a topic for CreateTopics.
type TopicSpec struct {
	// Name of the topic. Required.
	Name string
	// Partitions is the partition count. Default 1.
	Partitions int
	// Config holds topic configs (e.g. "cleanup.policy": "compact").
	// Default none. The replication factor is the cluster's
	// default.replication.factor: 1 on Start's single broker, the size on
	// StartCluster's.
	Config map[string]string
}

// Record is a record to produce or one that was consumed.
type Record struct {
	// Topic is set on consumed records; ignored by Produce.
	Topic string
	// Partition: for Produce, the target partition, or AnyPartition (the
	// zero value 0 means partition 0). Set on consumed records.
	Partition int32
	// Offset is set on consumed records; ignored by Produce.
	Offset int64
	// Key and Value of the record; nil is a null key or value.
	Key, Value []byte
	// Timestamp: for Produce, the record's CreateTime (zero: the
	// producer's clock). Set on consumed records.
	Timestamp time.Time
	// Headers of the record, in order (a nil Value is a null header
	// value).
	Headers []kafka.Header
}

// CreateTopics creates topics with the cluster's default replication factor and returns once
// the broker's metadata lists them all with their leaders and every
// partition's leader serves it (kafkaclient.WaitServed): a record
// produced after it returns is not refused as NOT_LEADER_OR_FOLLOWER for a
// partition the leader has not created yet, which can lose records of an
// idempotent producer without an error (TestChaos, seed
// 2176560483682674697: the first record of input partitions 4 and 5). A topic that already exists is an error.
func CreateTopics(ctx context.Context, bootstrap string, topics ...TopicSpec) error {
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap})
	if err != nil {
		return fmt.Errorf("kafkaenv: admin client: %w", err)
	}
	defer admin.Close()
	specs := make([]kafka.TopicSpecification, len(topics))
	for i, t := range topics {
		n := t.Partitions
		if n <= 0 {
			n = 1
		}
		specs[i] = kafka.TopicSpecification{Topic: t.Name, NumPartitions: n, ReplicationFactor: -1, Config: t.Config}
	}
	res, err := admin.CreateTopics(ctx, specs, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		return fmt.Errorf("kafkaenv: create topics: %w", err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("kafkaenv: create topic %s: %w", r.Topic, r.Error)
		}
	}
	// Wait until every partition has a leader in the metadata.
	for _, t := range specs {
		for {
			md, err := admin.GetMetadata(&t.Topic, false, 5000)
			if err == nil {
				tm, ok := md.Topics[t.Topic]
				if ok && tm.Error.Code() == kafka.ErrNoError && len(tm.Partitions) == t.NumPartitions && allLed(tm.Partitions) {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("kafkaenv: topic %s has no leaders yet: %w", t.Topic, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if err := kafkaclient.WaitServed(ctx, admin, specs, 5*time.Second); err != nil {
		return fmt.Errorf("kafkaenv: %w", err)
	}
	return nil
}

// DeleteTopicsWithPrefix deletes every topic whose name starts with
// prefix and returns how many it asked the broker to delete (a test that
// runs many applications on one broker, as the differential test does,
// would otherwise grow the broker's metadata until its heap runs out).
// prefix must not be empty.
func DeleteTopicsWithPrefix(ctx context.Context, bootstrap, prefix string) (int, error) {
	if prefix == "" {
		return 0, fmt.Errorf("kafkaenv: delete topics: an empty prefix would delete every topic")
	}
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap})
	if err != nil {
		return 0, fmt.Errorf("kafkaenv: admin client: %w", err)
	}
	defer admin.Close()
	md, err := admin.GetMetadata(nil, true, 10_000)
	if err != nil {
		return 0, fmt.Errorf("kafkaenv: delete topics: metadata: %w", err)
	}
	var names []string
	for name := range md.Topics {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return 0, nil
	}
	res, err := admin.DeleteTopics(ctx, names, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		return 0, fmt.Errorf("kafkaenv: delete topics: %w", err)
	}
	for _, r := range res {
		if c := r.Error.Code(); c != kafka.ErrNoError && c != kafka.ErrUnknownTopicOrPart {
			return 0, fmt.Errorf("kafkaenv: delete topic %s: %w", r.Topic, r.Error)
		}
	}
	return len(names), nil
}

func allLed(ps []kafka.PartitionMetadata) bool {
	for _, p := range ps {
		if p.Leader < 0 || p.Error.Code() != kafka.ErrNoError {
			return false
		}
	}
	return true
}

// Produce writes records to topic with an idempotent producer (acks=all)
// and returns once every record is acknowledged, or the first delivery
// error.
func Produce(ctx context.Context, bootstrap, topic string, records ...Record) error {
	_, err := ProduceAcked(ctx, bootstrap, topic, records...)
	return err
}

// ProduceAcked is Produce, and also returns the time the last record was
// acknowledged (taken before the producer closes): from then a consumer
// can fetch every record. A test that times what a stage does after a
// record arrives counts from it, not from the call: the call also makes
// the producer (its connection, the idempotent producer's id) and closes
// it, 0.15-0.6 s on an idle 2-core machine and more under load, which is
// not the stage's time.
func ProduceAcked(ctx context.Context, bootstrap, topic string, records ...Record) (acked time.Time, err error) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  bootstrap,
		"enable.idempotence": true,
		"acks":               "all",
		"linger.ms":          5,
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("kafkaenv: producer: %w", err)
	}
	defer p.Close()
	delivered := make(chan kafka.Event, len(records))
	for _, r := range records {
		msg := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: r.Partition},
			Key:            r.Key,
			Value:          r.Value,
			Timestamp:      r.Timestamp,
			Headers:        r.Headers,
		}
		// The local queue holds 100 000 records by default: Produce waits for room.
		if err := kafkaclient.Produce(p, msg, delivered, nil); err != nil {
			return time.Time{}, fmt.Errorf("kafkaenv: produce to %s: %w", topic, err)
		}
	}
	for range records {
		select {
		case ev := <-delivered:
			if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
				return time.Time{}, fmt.Errorf("kafkaenv: deliver to %s: %w", topic, m.TopicPartition.Error)
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("kafkaenv: produce to %s: %w", topic, ctx.Err())
		}
	}
	return time.Now(), nil
}

// Consume reads topic from the beginning of every partition, without a
// consumer group (nothing is committed), until it has n records or timeout
// passes; then it returns ErrTimeout with the records read so far.
// n <= 0 reads until the consumer has reached the end of every partition as
// it was when Consume began (its log end offset, see kafkaclient.ReadToEnd): with
// ReadCommitted that waits for the commit markers of transactions that have
// just committed, and for a transaction still open to end.
func Consume(ctx context.Context, bootstrap, topic string, n int, isolation Isolation, timeout time.Duration) ([]Record, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":    bootstrap,
		"group.id":             "kafkaenv-consume", // required by librdkafka; never joined (Assign, no commits)
		"enable.auto.commit":   false,
		"isolation.level":      string(isolation),
		"enable.partition.eof": true,
		// The EOF comes with a fetch that returns no records: do not let
		// the broker hold that fetch the default 500 ms.
		"fetch.wait.max.ms": 20,
	})
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: consumer: %w", err)
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: metadata of %s: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError {
		return nil, fmt.Errorf("kafkaenv: topic %s: %v", topic, tm.Error)
	}
	var assign []kafka.TopicPartition
	var ids []int32
	for _, p := range tm.Partitions {
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
		ids = append(ids, p.ID)
	}
	pending := map[int32]int64{} // n <= 0: the partitions not read to their end yet, and that end
	if n <= 0 {
		ends, err := kafkaclient.LogEnds(ctx, c, topic, ids)
		if err != nil {
			return nil, fmt.Errorf("kafkaenv: %w", err)
		}
		for p, e := range ends {
			if e > 0 {
				pending[p] = e
			}
		}
	}
	if err := c.Assign(assign); err != nil {
		return nil, fmt.Errorf("kafkaenv: assign %s: %w", topic, err)
	}
	deadline := time.Now().Add(timeout)
	var out []Record
	for {
		if n > 0 && len(out) >= n {
			return out, nil
		}
		if n <= 0 && len(pending) == 0 {
			return out, nil
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%w: %d of %s from %s (%s) after %v", ErrTimeout, len(out), wantString(n), topic, isolation, timeout)
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error != nil {
				return out, fmt.Errorf("kafkaenv: consume %s: %w", topic, ev.TopicPartition.Error)
			}
			out = append(out, Record{
				Topic:     *ev.TopicPartition.Topic,
				Partition: ev.TopicPartition.Partition,
				Offset:    int64(ev.TopicPartition.Offset),
				Key:       ev.Key,
				Value:     ev.Value,
				Timestamp: ev.Timestamp,
				Headers:   ev.Headers,
			})
		case kafka.PartitionEOF:
			if e, ok := pending[ev.Partition]; ok && kafkaclient.ReachedEnd(ev, e) {
				delete(pending, ev.Partition)
			}
		case kafka.Error:
			if ev.IsFatal() {
				return out, fmt.Errorf("kafkaenv: consume %s: %w", topic, ev)
			}
		}
	}
}

func wantString(n int) string {
	if n <= 0 {
		return "all records"
	}
	return fmt.Sprint(n)
}

// CommittedOffsets returns the offsets committed by consumer group on each
// partition of topic (kafka.OffsetInvalid, -1001, where nothing is
// committed). The committed offset is the next offset to read. It asks
// through a consumer of the group that never joins it (an OffsetFetch to
// the group's coordinator, not requiring stable offsets), not the admin
// client's ListConsumerGroupOffsets, which crashes the process with a
// SIGSEGV when the answer is NOT_COORDINATOR (a coordinator moved: a node
// stopped; librdkafka's issue 5040).
func CommittedOffsets(ctx context.Context, bootstrap, group, topic string) (map[int32]int64, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": false, "isolation.level": "read_uncommitted"})
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: consumer of group %s: %w", group, err)
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: metadata of %s: %w", topic, err)
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID})
	}
	timeout := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	res, err := c.Committed(tps, int(timeout.Milliseconds()))
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: committed offsets of %s on %s: %w", group, topic, err)
	}
	out := map[int32]int64{}
	for _, tp := range res {
		if tp.Error != nil {
			return nil, fmt.Errorf("kafkaenv: committed offset of %s on %s/%d: %w", group, topic, tp.Partition, tp.Error)
		}
		out[tp.Partition] = int64(tp.Offset)
	}
	return out, nil
}

// DescribeGroups returns, as text for a test log, every consumer group
// whose id starts with prefix: its state, assignor and each member's
// client id, group.instance.id (static membership, KIP-345) and assigned
// partitions, and the partitions of the group's subscribed topics no
// member holds. It is a diagnostic: it reads and changes nothing.
func DescribeGroups(ctx context.Context, bootstrap, prefix string) (string, error) {
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap})
	if err != nil {
		return "", fmt.Errorf("kafkaenv: admin client: %w", err)
	}
	defer admin.Close()
	list, err := admin.ListConsumerGroups(ctx)
	if err != nil {
		return "", fmt.Errorf("kafkaenv: list consumer groups: %w", err)
	}
	var ids []string
	for _, g := range list.Valid {
		if strings.HasPrefix(g.GroupID, prefix) {
			ids = append(ids, g.GroupID)
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return fmt.Sprintf("no consumer group starts with %q", prefix), nil
	}
	desc, err := admin.DescribeConsumerGroups(ctx, ids)
	if err != nil {
		return "", fmt.Errorf("kafkaenv: describe consumer groups %v: %w", ids, err)
	}
	var b strings.Builder
	for _, g := range desc.ConsumerGroupDescriptions {
		fmt.Fprintf(&b, "group %s: state %s, assignor %q, %d members", g.GroupID, g.State, g.PartitionAssignor, len(g.Members))
		if g.Error.Code() != kafka.ErrNoError {
			fmt.Fprintf(&b, ", error %v", g.Error)
		}
		b.WriteString("\n")
		held := map[string]map[int32]bool{}
		for _, m := range g.Members {
			var ps []string
			for _, tp := range m.Assignment.TopicPartitions {
				topic := ""
				if tp.Topic != nil {
					topic = *tp.Topic
				}
				if held[topic] == nil {
					held[topic] = map[int32]bool{}
				}
				held[topic][tp.Partition] = true
				ps = append(ps, fmt.Sprintf("%s/%d", topic, tp.Partition))
			}
			inst := "<dynamic>"
			if m.GroupInstanceID != "" {
				inst = m.GroupInstanceID
			}
			fmt.Fprintf(&b, "  member %s (client %s, instance %s, host %s): %v\n", m.ConsumerID, m.ClientID, inst, m.Host, ps)
		}
		for topic, ps := range held {
			md, err := admin.GetMetadata(&topic, false, 10000)
			if err != nil {
				continue
			}
			var free []int32
			for _, p := range md.Topics[topic].Partitions {
				if !ps[p.ID] {
					free = append(free, p.ID)
				}
			}
			if len(free) > 0 {
				fmt.Fprintf(&b, "  partitions of %s no member holds: %v\n", topic, free)
			}
		}
	}
	return b.String(), nil
}

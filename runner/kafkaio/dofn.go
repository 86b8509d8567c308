package kafkaio

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/recordtime"
)

// readFn is a bounded Read (Bounded option). On the kafkastreams runner
// the plan recognises it (plan.NativeSource) and a source stage reads the
// topic; on other runners ProcessElement reads it. An unbounded Read is
// unboundedReadFn (sdf.go).
type readFn struct {
	Config Config `json:"config"`

	bad badRecords
}

var _ plan.NativeSource = (*readFn)(nil)

// KafkaSourceTopic implements plan.NativeSource.
func (f *readFn) KafkaSourceTopic() string { return f.Config.Topics[0] }

// bootstrap is the Config's servers, else the runner's --bootstrap_servers
// (when the runner is linked in), else $KAFKA_BOOTSTRAP_SERVERS (the
// runner's default too), else 127.0.0.1:9092.
func (c Config) bootstrap() string {
	if c.BootstrapServers != "" {
		return c.BootstrapServers
	}
	if v := runnerBootstrap(); v != "" {
		return v
	}
	if v := os.Getenv("KAFKA_BOOTSTRAP_SERVERS"); v != "" {
		return v
	}
	return "127.0.0.1:9092"
}

// clientConfig is the base configuration of c's clients: its Properties
// and its bootstrap servers (kafkaclient.Base).
func (c Config) clientConfig() kafka.ConfigMap {
	return kafkaclient.Base(c.bootstrap(), c.Properties)
}

// deadLetter is the Config of the producer of c's dead-letter topic: c's
// cluster and properties.
func (c Config) deadLetter() Config {
	return Config{Topics: []string{c.DeadLetterTopic}, BootstrapServers: c.BootstrapServers, Properties: c.Properties}
}

// badRecordCount counts, on runners other than kafkastreams, the records
// whose event time a Read's TimestampFn could not give (the kafkastreams
// runner counts them per partition on /metrics).
var badRecordCount = beam.NewCounter("kafkaio", "bad_records")

// badRecords handles, for one DoFn instance of a Read on a runner other
// than kafkastreams, the records whose event time TimestampFn could not
// give: each is counted (badRecordCount), the first one logged, and each
// written as it was to the dead-letter topic if there is one, by an
// idempotent producer made at the first (at least once: a retried bundle
// writes its records again).
type badRecords struct {
	logged bool
	dlq    *writer
}

// add handles record m of c's topic, on which TimestampFn failed with err.
func (b *badRecords) add(ctx context.Context, c Config, m *kafka.Message, err error) error {
	badRecordCount.Inc(ctx, 1)
	if !b.logged {
		b.logged = true
		log.Warnf(ctx, "kafkaio.Read(%s): the timestamp function failed on a record: it is skipped, counted in kafkaio/bad_records, and written to the dead-letter topic %q if there is one; logged once per DoFn instance: partition %d offset %d: %v",
			c.Topics[0], c.DeadLetterTopic, m.TopicPartition.Partition, int64(m.TopicPartition.Offset), err)
	}
	if c.DeadLetterTopic == "" {
		return nil
	}
	if b.dlq == nil {
		var werr error
		if b.dlq, werr = newWriter(c.deadLetter()); werr != nil {
			return werr
		}
	}
	return b.dlq.produceHeaders(m.Key, m.Value, kafkaRecordOfMessage(m).Headers, 0)
}

// flush waits until the dead-letter records written so far are
// acknowledged.
func (b *badRecords) flush() error {
	if b.dlq == nil {
		return nil
	}
	return b.dlq.flush()
}

// close closes the dead-letter producer.
func (b *badRecords) close() {
	b.dlq.close()
	b.dlq = nil
}

// eventTime is record m's event time: stamp's (TimestampFn's, a panic
// turned into an error), or its Kafka timestamp when stamp is nil: -1 ms
// (1969-12-31T23:59:59.999Z) for a record without one, Kafka's
// NO_TIMESTAMP, as the kafkastreams runner's source stage gives it and
// Beam Java's KafkaIO under its CreateTime policy (new Instant(-1));
// confluent-kafka-go leaves such a record's Timestamp zero, year 1.
func eventTime(stamp TimestampFunc, m *kafka.Message) (ts mtime.Time, err error) {
	if stamp == nil {
		if m.TimestampType == kafka.TimestampNotAvailable {
			return -1, nil
		}
		return mtime.FromTime(m.Timestamp), nil
	}
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("the timestamp function panicked: %v", x)
		}
	}()
	r := Record{Key: m.Key, Value: m.Value}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, Header{Key: h.Key, Value: h.Value})
	}
	t, err := stamp(r)
	if err != nil {
		return 0, err
	}
	return mtime.FromTime(t), nil
}

// ProcessElement reads every partition of the topic from its start to the
// log end offset it has now (read_committed unless ReadUncommitted), all
// partitions at once through one consumer (kafkaclient.ReadRanges: their
// fetches run concurrently, where issue 24 measured them read one after
// another, a consumer each), emitting each record at its event time (its
// Kafka timestamp, or TimestampFn's; a record TimestampFn fails on is
// skipped, counted in the Beam counter kafkaio/bad_records, logged once
// per DoFn instance, and written to DeadLetterTopic if there is one, at
// least once).
func (f *readFn) ProcessElement(ctx context.Context, _ beam.EventTime, _ []byte, emit func(beam.EventTime, []byte, []byte)) error {
	return f.read(ctx, func(ts mtime.Time, m *kafka.Message) { emit(beam.EventTime(ts), m.Key, m.Value) })
}

// read is ProcessElement's work: it calls emit for every record to emit,
// with its event time.
func (f *readFn) read(ctx context.Context, emit func(mtime.Time, *kafka.Message)) error {
	c := f.Config
	if !c.Bounded {
		return fmt.Errorf("kafkaio.Read(%s): an unbounded read is unboundedReadFn, not readFn", c.Topics[0])
	}
	if c.Start == Latest {
		return nil // nothing was written after the start that a bounded read would see
	}
	cm := kafkaclient.EndReaderConfig(c.clientConfig(), "kafkaio-read-"+c.Topics[0])
	if c.ReadUncommitted {
		cm["isolation.level"] = "read_uncommitted"
	}
	topic := c.Topics[0]
	cons, err := kafkaclient.NewConsumer(cm)
	if err != nil {
		return fmt.Errorf("kafkaio.Read(%s): %w", topic, err)
	}
	defer func() { _ = cons.Close() }()
	parts, err := partitionsOf(cons, topic)
	if err != nil {
		return err
	}
	ends, err := kafkaclient.LogEnds(ctx, cons, topic, parts)
	if err != nil {
		return fmt.Errorf("kafkaio.Read(%s): %w", topic, err)
	}
	ranges := map[int32]kafkaclient.Range{}
	for _, p := range parts {
		r := kafkaclient.Range{From: kafka.OffsetBeginning, End: ends[p]}
		if c.Start == AtTimestamp {
			from, err := offsetForTime(cons, topic, p, c.StartAtMs)
			if err != nil {
				return err
			}
			r.From = kafka.Offset(from)
		}
		ranges[p] = r
	}
	stamp := c.Timestamp()
	if _, err := kafkaclient.ReadRanges(ctx, cons, topic, ranges, func(m *kafka.Message) error {
		ts, err := eventTime(stamp, m)
		if err != nil {
			return f.bad.add(ctx, c, m, err)
		}
		emit(ts, m)
		return nil
	}); err != nil {
		return fmt.Errorf("kafkaio.Read(%s): %w", topic, err)
	}
	return f.bad.flush()
}

// Teardown closes the dead-letter producer.
func (f *readFn) Teardown() { f.bad.close() }

// readRecordsFn is a bounded ReadRecords: readFn's read, each record
// emitted whole (KafkaRecord).
type readRecordsFn struct {
	readFn
}

// ProcessElement reads as readFn's does.
func (f *readRecordsFn) ProcessElement(ctx context.Context, _ beam.EventTime, _ []byte, emit func(beam.EventTime, KafkaRecord)) error {
	return f.read(ctx, func(ts mtime.Time, m *kafka.Message) { emit(beam.EventTime(ts), kafkaRecordOfMessage(m)) })
}

// writeFn is a Write of KV<[]byte, []byte>. On the kafkastreams runner the
// plan recognises it (plan.NativeSink) and the stage producing its input
// writes the records in its transactions; on other runners ProcessElement
// produces them.
type writeFn struct {
	Config Config `json:"config"`
	w      *writer
}

var _ plan.NativeSink = (*writeFn)(nil)

// KafkaSinkTopic implements plan.NativeSink.
func (f *writeFn) KafkaSinkTopic() string { return f.Config.Topics[0] }

func (f *writeFn) Setup() error {
	var err error
	f.w, err = newWriter(f.Config)
	return err
}

func (f *writeFn) ProcessElement(ts beam.EventTime, key, value []byte) error {
	return f.w.produce(key, value, mtime.Time(ts))
}

func (f *writeFn) FinishBundle() error { return f.w.flush() }
func (f *writeFn) Teardown()           { f.w.close() }

// writeValuesFn is a Write of []byte values, without keys.
type writeValuesFn struct {
	Config Config `json:"config"`
	w      *writer
}

var _ plan.NativeSink = (*writeValuesFn)(nil)

// KafkaSinkTopic implements plan.NativeSink.
func (f *writeValuesFn) KafkaSinkTopic() string { return f.Config.Topics[0] }

func (f *writeValuesFn) Setup() error {
	var err error
	f.w, err = newWriter(f.Config)
	return err
}

func (f *writeValuesFn) ProcessElement(ts beam.EventTime, value []byte) error {
	return f.w.produce(nil, value, mtime.Time(ts))
}

func (f *writeValuesFn) FinishBundle() error { return f.w.flush() }
func (f *writeValuesFn) Teardown()           { f.w.close() }

// writeRecordsFn is a WriteRecords: KafkaRecord elements, with their null
// keys and values and their headers.
type writeRecordsFn struct {
	Config Config `json:"config"`
	w      *writer
}

var _ plan.NativeSink = (*writeRecordsFn)(nil)

// KafkaSinkTopic implements plan.NativeSink.
func (f *writeRecordsFn) KafkaSinkTopic() string { return f.Config.Topics[0] }

func (f *writeRecordsFn) Setup() error {
	var err error
	f.w, err = newWriter(f.Config)
	return err
}

func (f *writeRecordsFn) ProcessElement(ts beam.EventTime, r KafkaRecord) error {
	return f.w.produceHeaders(r.Key, r.Value, r.Headers, mtime.Time(ts))
}

func (f *writeRecordsFn) FinishBundle() error { return f.w.flush() }
func (f *writeRecordsFn) Teardown()           { f.w.close() }

// writer is the idempotent producer of a Write on a runner other than
// kafkastreams (at least once across bundle retries: only the kafkastreams
// runner writes exactly once). Its delivery reports are read by a
// goroutine that keeps the first error.
type writer struct {
	p          *kafka.Producer
	topic      string
	partitions int32
	mu         sync.Mutex
	err        error
	done       chan struct{}
}

func newWriter(c Config) (*writer, error) {
	cm := kafkaclient.IdempotentProducerConfig(c.bootstrap(), c.Properties)
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return nil, fmt.Errorf("kafkaio.Write(%s): %w", c.Topics[0], err)
	}
	topic := c.Topics[0]
	md, err := p.GetMetadata(&topic, false, 30000)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("kafkaio.Write(%s): metadata: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
		p.Close()
		return nil, fmt.Errorf("kafkaio.Write(%s): topic not found: %v", topic, tm.Error)
	}
	w := &writer{p: p, topic: topic, partitions: int32(len(tm.Partitions)), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range p.Events() {
			if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
				w.mu.Lock()
				if w.err == nil {
					w.err = fmt.Errorf("kafkaio.Write(%s): %w", topic, kafkaclient.FatalCause(p, m.TopicPartition.Error))
				}
				w.mu.Unlock()
			}
		}
	}()
	return w, nil
}

// produce writes a record without headers (produceHeaders).
func (w *writer) produce(key, value []byte, ts mtime.Time) error {
	return w.produceHeaders(key, value, nil, ts)
}

// produceHeaders writes a record: key nil is a null key, placed by the
// producer's partitioner (as a Java producer places one), any other key
// (empty too) in the Java client's partition for it; value nil is a
// tombstone; ts is the record's timestamp when Kafka takes it
// (recordtime.For).
func (w *writer) produceHeaders(key, value []byte, headers []Header, ts mtime.Time) error {
	part := kafka.PartitionAny
	if key != nil {
		part = javapartition.ForKey(key, w.partitions)
	}
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: part}, Key: key, Value: value, Headers: kafkaclient.Headers(headers)}
	// The event time when Kafka takes it, else the time of writing
	// (recordtime.For; the topic's own limit is not read here: Kafka 4's
	// default is taken).
	m.Timestamp, _ = recordtime.For(ts, time.Now(), recordtime.DefaultTimestampAfterMax)
	if err := kafkaclient.Produce(w.p, m, nil, nil); err != nil {
		return fmt.Errorf("kafkaio.Write(%s): %w", w.topic, err)
	}
	return nil
}

// flush waits until every record of the bundle is acknowledged and returns
// the first delivery error.
func (w *writer) flush() error {
	for kafkaclient.Drain(w.p, time.Second) > 0 {
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *writer) close() {
	if w != nil && w.p != nil {
		w.p.Close()
		<-w.done
	}
}

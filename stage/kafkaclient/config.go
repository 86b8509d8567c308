package kafkaclient

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Base returns a librdkafka configuration holding the properties of props
// in order (a later map's value wins over an earlier one's for the same
// key: the user's --kafka_property settings, then a Read's own) and
// bootstrap.servers bootstrap, which wins over any of them. Every other
// configuration of this package starts from it; callers add their own keys
// to the map it returns, a new one each call.
func Base(bootstrap string, props ...map[string]string) kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for _, m := range props {
		for k, v := range m {
			cm[k] = v
		}
	}
	cm["bootstrap.servers"] = bootstrap
	return cm
}

// TransactionTimeout is every stage producer's transaction.timeout.ms
// unless the user's properties set one (TransactionTimeoutOf): the broker
// aborts a transaction open longer. A killed instance's open transaction
// blocks read_committed readers of its output partitions until the broker
// aborts it at this timeout, so it is short, as Kafka Streams keeps it
// under exactly-once (10 s). A commit interval must be below it
// (runner.Options.Validate).
const TransactionTimeout = 10 * time.Second

// TransactionTimeoutOf is the stage producers' transaction timeout under
// the user's properties props: their transaction.timeout.ms (whole
// milliseconds, positive), else TransactionTimeout. The error names the
// property and its value.
func TransactionTimeoutOf(props map[string]string) (time.Duration, error) {
	v, ok := props["transaction.timeout.ms"]
	if !ok {
		return TransactionTimeout, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0, fmt.Errorf("transaction.timeout.ms=%s: must be a positive whole number of milliseconds", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// TransactionalProducerConfig is the configuration of a stage's
// transactional producer: Base(bootstrap, props) (props are the user's,
// stage.Config.Properties), then the loop's own settings: transactional.id
// txnID, allow.auto.create.topics false, go.delivery.reports false,
// LeanProducerChannels and FitLargestRecord (message.max.bytes
// ProducerMessageMaxBytes, or the user's if larger), which win (a user's
// value for one of the first ones is refused earlier: OwnedProperty), and
// linger.ms 5 and transaction.timeout.ms TransactionTimeout unless props
// set them (a user's tuning is kept, not overridden quietly).
func TransactionalProducerConfig(bootstrap string, props map[string]string, txnID string) kafka.ConfigMap {
	pc := Base(bootstrap, props)
	pc["transactional.id"] = txnID
	// A deleted output or sink topic is an error (stage.ErrTopicGone), not
	// a new topic with the broker's default partitions, created by the
	// first record written to it.
	pc["allow.auto.create.topics"] = false
	if _, ok := props["linger.ms"]; !ok {
		pc["linger.ms"] = 5
	}
	if _, ok := props["transaction.timeout.ms"]; !ok {
		pc["transaction.timeout.ms"] = int(TransactionTimeout.Milliseconds())
	}
	pc["go.delivery.reports"] = false
	LeanProducerChannels(pc)
	FitLargestRecord(pc)
	return pc
}

// LeanProducerConfig is Base(bootstrap, props) for a producer whose
// delivery reports nobody reads (go.delivery.reports false) with
// LeanProducerChannels and FitLargestRecord: the runner's broker check
// and, with a transactional.id added, its plan producer (a plan, or a
// TestStream's segment records, can be larger than librdkafka's default
// 1 000 000 bytes).
func LeanProducerConfig(bootstrap string, props ...map[string]string) kafka.ConfigMap {
	cm := Base(bootstrap, props...)
	cm["go.delivery.reports"] = false
	LeanProducerChannels(cm)
	FitLargestRecord(cm)
	return cm
}

// IdempotentProducerConfig is Base(bootstrap, props) for an idempotent
// producer (enable.idempotence true; at least once, in order per
// partition) with LeanProducerChannels, FitLargestRecord (the topic's
// max.message.bytes decides, not librdkafka's default 1 000 000) and
// delivery reports on (the library's default): a drain request, a
// kafkaio.Write on another runner.
func IdempotentProducerConfig(bootstrap string, props ...map[string]string) kafka.ConfigMap {
	cm := Base(bootstrap, props...)
	cm["enable.idempotence"] = true
	LeanProducerChannels(cm)
	FitLargestRecord(cm)
	return cm
}

// GroupConsumerConfig is the configuration of a stage's consumer, a member
// of consumer group group: Base(bootstrap, props), then
// partition.assignment.strategy cooperative-sticky, isolation.level
// read_committed, enable.auto.commit and enable.auto.offset.store false
// (offsets are committed in the stage's transactions), auto.offset.reset
// (InternalOffsetReset if internal, the stage reads an internal topic;
// earliest otherwise, a Kafka source's default) and statistics.interval.ms
// statsInterval (in whole milliseconds: statistics events give each task's
// consumer lag), then overrides (stage.Config.Consumer), which win over
// all of them, and last FitLargestFetch (an internal topic's largest batch
// is received).
func GroupConsumerConfig(bootstrap string, props map[string]string, group string, statsInterval time.Duration, internal bool, overrides map[string]string) kafka.ConfigMap {
	cc := Base(bootstrap, props)
	cc["group.id"] = group
	cc["partition.assignment.strategy"] = "cooperative-sticky"
	cc["isolation.level"] = "read_committed"
	cc["enable.auto.commit"] = false
	cc["enable.auto.offset.store"] = false
	cc["auto.offset.reset"] = "earliest"
	if internal {
		cc["auto.offset.reset"] = InternalOffsetReset
	}
	cc["statistics.interval.ms"] = int(statsInterval.Milliseconds())
	for k, v := range overrides {
		cc[k] = v
	}
	FitLargestFetch(cc)
	return cc
}

// InternalOffsetReset is the auto.offset.reset of every consumer of an
// internal data topic (a stage's input topic between stages, a side input
// topic): "error", librdkafka's policy that makes a fetch at an offset the
// broker no longer holds (OFFSET_OUT_OF_RANGE: a committed offset below
// the log start, records deleted by retention or DeleteRecords before
// they were consumed) an error event (kafka.ErrAutoOffsetReset) and stops
// the partition's fetch, where "earliest" skipped the deleted records
// with at most a log line: lost data under exactly once. The same policy
// applies to a partition with nothing committed, so such a partition is
// assigned at kafka.OffsetBeginning explicitly (the log start, which is
// no error however far purges have moved it). Kafka Streams fails a task
// the same way when auto.offset.reset is "none" (the consumer's
// NoOffsetForPartitionException, OffsetOutOfRangeException).
const InternalOffsetReset = "error"

// ErrOffsetOutOfRange: a reader of an internal data topic met an offset
// the broker no longer holds (InternalOffsetReset): records deleted
// before they were read, lost. stage.ErrOffsetOutOfRange is this error
// (a stage's input topic); stage/sideinput returns it too (a side input
// topic). Not retryable.
var ErrOffsetOutOfRange = errors.New("kafkaclient: offset below the log start of an internal topic")

// AssignedReaderConfig is the configuration of a read_committed reader that
// assigns itself partitions and never joins its group nor commits:
// Base(bootstrap, props), then group.id group (librdkafka wants one),
// enable.auto.commit false, isolation.level read_committed and
// FitLargestFetch. The side inputs' reader and the WatermarkManager
// service's readers of the report and metrics topics use it; a reader
// that must stop at the log end uses EndReaderConfig instead.
func AssignedReaderConfig(bootstrap string, props map[string]string, group string) kafka.ConfigMap {
	cc := Base(bootstrap, props)
	cc["group.id"] = group
	cc["enable.auto.commit"] = false
	cc["isolation.level"] = "read_committed"
	FitLargestFetch(cc)
	return cc
}

// ownedProperties are the client properties the runner sets itself on
// every client that uses them, with why: a user's value would be
// overridden, or would break the runner's guarantees, so it is refused
// (OwnedProperty) rather than dropped quietly (Kafka Streams logs and
// ignores a user's enable.auto.commit the same way, but goes on).
var ownedProperties = map[string]string{
	"bootstrap.servers":               "set --bootstrap_servers (or kafkaio.WithBootstrapServers for a Read on another cluster)",
	"group.id":                        "each stage's consumer group is <application_id>.<stage>: set --application_id",
	"group.instance.id":               "static membership takes its id from the instance slot: set --static_membership",
	"transactional.id":                "each stage's producer has the transactional.id <application_id>.<stage>.<task or instance>, which fences a zombie (KIP-447)",
	"enable.auto.commit":              "offsets are committed in the stages' transactions (KIP-447), never by the consumer",
	"enable.auto.offset.store":        "offsets are committed in the stages' transactions (KIP-447), never by the consumer",
	"isolation.level":                 "every stage reads read_committed (exactly once); a Kafka source reads uncommitted records with kafkaio.WithReadUncommitted",
	"auto.offset.reset":               "a Kafka source starts where kafkaio.WithStart or WithStartAt says; internal topics are read from their start, and a committed offset below an internal topic's log start is an error (InternalOffsetReset)",
	"enable.idempotence":              "the stages' producers are transactional, hence idempotent",
	"enable.partition.eof":            "the stage loops need end-of-partition events (idleness, bounded reads)",
	"partition.assignment.strategy":   "the stage loops handle the cooperative-sticky protocol's incremental assignments only",
	"statistics.interval.ms":          "the stage loops read each task's consumer lag from the statistics events",
	"go.delivery.reports":             "the runner reads its producers' delivery reports, or not, itself",
	"go.events.channel.enable":        "the runner polls its clients itself",
	"go.application.rebalance.enable": "the stage loops handle rebalances themselves",
	"go.logs.channel.enable":          "the runner routes librdkafka's logs itself",
}

// OwnedProperty reports whether the client property key is one the runner
// sets itself (ownedProperties), and why a user may not set it: the text
// says what to use instead. Matching ignores case and surrounding spaces,
// as librdkafka's property names are lower case.
func OwnedProperty(key string) (why string, owned bool) {
	why, owned = ownedProperties[strings.ToLower(strings.TrimSpace(key))]
	return why, owned
}

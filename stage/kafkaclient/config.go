package kafkaclient

import (
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

// TransactionTimeout is every stage producer's transaction.timeout.ms: the
// broker aborts a transaction open longer. A killed instance's open
// transaction blocks read_committed readers of its output partitions until
// the broker aborts it at this timeout, so it is short, as Kafka Streams
// keeps it under exactly-once (10 s). A commit interval must be below it
// (runner.Options.Validate).
const TransactionTimeout = 10 * time.Second

// TransactionalProducerConfig is the configuration of a stage's
// transactional producer: Base(bootstrap, props) (props are the user's,
// stage.Config.Properties), then the loop's own settings, which win:
// transactional.id txnID, linger.ms 5, transaction.timeout.ms
// TransactionTimeout, go.delivery.reports false, LeanProducerChannels and
// FitLargestRecord (message.max.bytes ProducerMessageMaxBytes, or the
// user's if larger).
func TransactionalProducerConfig(bootstrap string, props map[string]string, txnID string) kafka.ConfigMap {
	pc := Base(bootstrap, props)
	pc["transactional.id"] = txnID
	pc["linger.ms"] = 5
	pc["transaction.timeout.ms"] = int(TransactionTimeout.Milliseconds())
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
// (offsets are committed in the stage's transactions),
// auto.offset.reset earliest and statistics.interval.ms statsInterval (in
// whole milliseconds: statistics events give each task's consumer lag),
// then overrides (stage.Config.Consumer), which win over all of them, and
// last FitLargestFetch (an internal topic's largest batch is received).
func GroupConsumerConfig(bootstrap string, props map[string]string, group string, statsInterval time.Duration, overrides map[string]string) kafka.ConfigMap {
	cc := Base(bootstrap, props)
	cc["group.id"] = group
	cc["partition.assignment.strategy"] = "cooperative-sticky"
	cc["isolation.level"] = "read_committed"
	cc["enable.auto.commit"] = false
	cc["enable.auto.offset.store"] = false
	cc["auto.offset.reset"] = "earliest"
	cc["statistics.interval.ms"] = int(statsInterval.Milliseconds())
	for k, v := range overrides {
		cc[k] = v
	}
	FitLargestFetch(cc)
	return cc
}

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

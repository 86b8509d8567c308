package kafkaclient

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// FetchQueueBackoff is every consumer's fetch.queue.backoff.ms unless the
// configuration (the user's properties) sets one: how long librdkafka
// waits before it fetches again for a partition it found with its
// prefetch queue full (queued.min.messages records, default 100 000, or
// queued.max.messages.kbytes, default 64 MiB, in the consumer's queue).
// librdkafka's default, 1 s, starves a reader that empties the queue in
// less: a changelog restore of 1 KiB records drained the 64 MiB in a
// fraction of a second and then waited out the rest of it, so 1 GiB
// restored in 8.8-13.2 s (81-122 MB/s, wall time twice its CPU time)
// against Kafka Streams' 8.1-10.5 s; at 10 ms in 4.1-4.3 s (250-261 MB/s;
// BenchmarkKafkaStreams/restore, 2026-12-05). A lower backoff costs
// only a wake-up of the client's broker thread per backoff while the
// queue stays full.
const FetchQueueBackoff = 10 * time.Millisecond

// NewConsumer is kafka.NewConsumer with the runner's consumer defaults
// (ConsumerDefaults) added to cm, a configuration of this package
// (GroupConsumerConfig, AssignedReaderConfig, EndReaderConfig) or Base's
// with the caller's keys: every consumer of the module is made here, so a
// default reaches them all (TestConsumersAreMadeHere). cm is changed in
// place; errors are kafka.NewConsumer's.
func NewConsumer(cm kafka.ConfigMap) (*kafka.Consumer, error) {
	ConsumerDefaults(cm)
	return kafka.NewConsumer(&cm)
}

// ConsumerDefaults sets what every consumer of the runner gets unless cm
// (the user's properties) sets it already: fetch.queue.backoff.ms
// FetchQueueBackoff. cm is changed in place.
func ConsumerDefaults(cm kafka.ConfigMap) {
	if _, set := cm["fetch.queue.backoff.ms"]; !set {
		cm["fetch.queue.backoff.ms"] = int(FetchQueueBackoff.Milliseconds())
	}
}

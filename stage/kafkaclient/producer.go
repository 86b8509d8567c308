package kafkaclient

import (
	"context"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// LeanProducerChannels sizes the Go channels confluent-kafka-go gives a
// producer (cm is changed in place) for one used through Produce, whose
// Events are errors, logs and, at most, delivery reports read as they
// come: go.produce.channel.size 0 (ProduceChannel, deprecated, is never
// used) and go.events.channel.size 1 000. The library's defaults, 1 000 000
// each, cost 24 MB of heap per producer before its first record (16 bytes
// an event, 8 a message pointer): 180 MB for a job of seven stages. A full
// events channel only makes the library's poller wait for the reader;
// librdkafka's own queues hold the rest.
func LeanProducerChannels(cm kafka.ConfigMap) {
	cm["go.produce.channel.size"] = 0
	cm["go.events.channel.size"] = 1000
}

// InitTransactions runs p.InitTransactions(ctx) once p has a connection
// to a broker: it first asks for the cluster's metadata (no topic; bounded
// by ctx and 5 s; its error is ignored, InitTransactions reports the real
// one). librdkafka's producer-id state machine, run before any broker
// connection is up, finds the transaction coordinator not up and retries
// only on its 500 ms timer (rdkafka_idempotence.c, "Coordinator not up"):
// measured on a warm single-node broker, InitTransactions alone took
// 505-530 ms in most tries, 20-40 ms after the metadata round trip. With a
// coordinator on another node than the bootstrap one, the wait can remain.
func InitTransactions(ctx context.Context, p *kafka.Producer) error {
	wait := 5 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
		wait = time.Until(d)
	}
	if wait > time.Millisecond {
		_, _ = p.GetMetadata(nil, false, int(wait.Milliseconds()))
	}
	return p.InitTransactions(ctx)
}

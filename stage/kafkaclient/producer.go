package kafkaclient

import (
	"context"
	"errors"
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

// Produce calls p.Produce(m, deliveryChan) and, while librdkafka's local
// queue is full (ErrQueueFull: queue.buffering.max.messages or .kbytes
// reached), waits queueFullPause and tries again, so the caller's record
// is taken as soon as the queue has room for it (a Flush would first wait
// for the whole queue to drain). check, when not nil, is called before
// each wait and ends Produce with its error: a queue held by records that
// can never leave (a deleted topic's) never drains. The error is
// p.Produce's otherwise, unwrapped.
//
// It never calls p.Flush (see Drain), so when it returns no call of the
// client library runs on p on another goroutine: p may be closed at once.
func Produce(p *kafka.Producer, m *kafka.Message, deliveryChan chan kafka.Event, check func() error) error {
	for {
		err := p.Produce(m, deliveryChan)
		if err == nil {
			return nil // before errors.As: no kafka.Error escaping to the heap per record
		}
		var ke kafka.Error
		if !errors.As(err, &ke) || ke.Code() != kafka.ErrQueueFull {
			return FatalCause(p, err)
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		time.Sleep(queueFullPause)
	}
}

// queueFullPause is how long Produce waits for room in a full queue
// before trying again: a millisecond, a fraction of the time a batch of
// the queue takes to be sent (linger.ms is 5 by default).
const queueFullPause = time.Millisecond

// Drain waits until p holds nothing queued, in flight or undelivered
// (p.Len() == 0) or timeout has passed, and returns p.Len(); it checks
// every drainPoll. It is Flush without Flush's hazard:
// confluent-kafka-go v2.11.1's Producer.Flush runs rd_kafka_flush on a
// goroutine of its own that outlives Flush by up to 100 ms whenever Flush
// returns with records left (seen in 7 of 20 calls on a producer with no
// broker), and a Close in that time destroys the librdkafka handle under
// the running call (upstream's open PR #1585, "use-after-free race
// between Close and in-flight C calls"). A stage loop closes its producer
// right after a fatal error, when records are left by definition: make
// bench's 10 M scale job aborted in glibc ("unaligned tcache chunk
// detected") 23 ms after such a close. Unlike Flush, Drain does not
// override linger.ms: the last batch leaves when librdkafka sends it.
// Delivery reports must be read meanwhile (the Events channel, or the
// delivery channel given to Produce), as for Flush.
func Drain(p *kafka.Producer, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		n := p.Len()
		if n == 0 || !time.Now().Before(deadline) {
			return n
		}
		time.Sleep(min(drainPoll, time.Until(deadline)))
	}
}

// drainPoll is how often Drain looks at the producer's queue.
const drainPoll = time.Millisecond

// FatalCause returns the fatal error client h raised if err is one of
// the bare errors that stand for it, else err. confluent-kafka-go v2.11.1
// flags as fatal (kafka.Error.IsFatal) only the errors of the
// transactional API and the fatal error events. An idempotent or
// transactional producer that met a fatal error refuses each new record
// with kafka.ErrFatal ("Local: Fatal error") unflagged and without the
// cause, and fails the records it held, in their delivery reports
// (Message.TopicPartition.Error), with kafka.ErrPurgeQueue or
// kafka.ErrPurgeInflight ("Local: Purged in queue"). A check of IsFatal
// alone then took a fenced producer's refusal for a passing error: a plan
// producer fenced by another instance starting at the same moment failed
// its job with "Local: Fatal error" instead of trying again. When err has
// one of those codes, is not flagged, and h.GetFatalError() is not nil,
// that error is returned: flagged fatal, its code and text the cause's
// (kafka.ErrFenced, "This instance has been fenced by a newer instance:
// ..."). A purge without a fatal error (a Close, a Purge call) is
// returned as it is.
func FatalCause(h interface{ GetFatalError() error }, err error) error {
	var ke kafka.Error
	if !errors.As(err, &ke) || ke.IsFatal() {
		return err
	}
	switch ke.Code() {
	case kafka.ErrFatal, kafka.ErrPurgeQueue, kafka.ErrPurgeInflight:
		if fe := h.GetFatalError(); fe != nil {
			return fe
		}
	}
	return err
}

// IsFenced reports whether err, or an error it wraps, says a
// transactional producer was fenced or is otherwise unusable: a
// kafka.Error flagged fatal, or with the code kafka.ErrFatal that a
// produce call or delivery report of a fatal client carries without the
// flag (FatalCause), kafka.ErrFenced (librdkafka's "fenced by a newer
// instance") or kafka.ErrProducerFenced (the broker's PRODUCER_FENCED,
// KIP-588). No call on such a producer succeeds again (librdkafka's
// INTRODUCTION.md, "Fatal errors"): the remedy is a new producer, whose
// InitTransactions fences the old one and aborts its open transaction.
func IsFenced(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && (ke.IsFatal() || ke.Code() == kafka.ErrFatal || ke.Code() == kafka.ErrFenced || ke.Code() == kafka.ErrProducerFenced)
}

package stage

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// initTransactionsTimeout bounds a producer's InitTransactions (a broker
// that cannot be reached, or a predecessor's transaction the coordinator is
// still aborting).
const initTransactionsTimeout = 30 * time.Second

// TransactionalID is the transactional.id of stage stageName's producer in
// instance instanceID of application applicationID:
// "<application_id>-<stage>-<instance id>" (Config.InstanceID).
func TransactionalID(applicationID, stageName, instanceID string) string {
	return applicationID + "-" + stageName + "-" + instanceID
}

// TransactionTimeout is every stage producer's transaction.timeout.ms: the
// broker aborts a transaction open longer. A killed instance's open
// transaction blocks read_committed readers of its output partitions until
// the broker aborts it at this timeout, so it is short, as Kafka Streams
// keeps it under exactly-once (10 s). A commit interval must be below it
// (runner.Options.Validate).
const TransactionTimeout = 10 * time.Second

// producerConfig is the librdkafka configuration of a stage's
// transactional producer: props (the user's, Config.Properties), then the
// loop's own settings, which win.
func producerConfig(bootstrap string, props map[string]string, txnID string) kafka.ConfigMap {
	pc := kafka.ConfigMap{}
	for k, v := range props {
		pc[k] = v
	}
	pc["bootstrap.servers"] = bootstrap
	pc["transactional.id"] = txnID
	pc["linger.ms"] = 5
	pc["transaction.timeout.ms"] = int(TransactionTimeout.Milliseconds())
	pc["go.delivery.reports"] = false
	LeanProducerChannels(pc)
	return pc
}

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

// Producer is a stage's transactional producer whose InitTransactions runs
// in the background from StartProducer on, so that the wait for the
// transaction coordinator (a round trip or several, the largest fixed cost
// of a start: 0.2-0.6 s here) overlaps the application's set-up (topics,
// plan) instead of following it. New takes it over (Config.Producer);
// until then the caller owns it and must Close it if New is never called
// or fails before taking it.
type Producer struct {
	p     *kafka.Producer
	txnID string
	// done is closed when InitTransactions has returned; err is its error.
	done chan struct{}
	err  error

	closeOnce sync.Once
	// taken says New owns p (Close then does nothing).
	taken atomic.Bool
}

// StartProducer creates the transactional producer of stage stageName of
// application applicationID for instance instanceID (transactional.id
// TransactionalID(…)), configured as New configures its own, and its
// InitTransactions (bounded by ctx and 30 s), both in the background: what
// InitTransactions does (fencing a predecessor with the same
// transactional.id and aborting its open transactions) needs no topic of
// the application, so it may start before they are created. Its error (a
// configuration the client refuses, or InitTransactions'), if any, is
// New's.
func StartProducer(ctx context.Context, bootstrap string, props map[string]string, applicationID, stageName, instanceID string, log *slog.Logger) *Producer {
	if log == nil {
		log = slog.Default()
	}
	txnID := TransactionalID(applicationID, stageName, instanceID)
	pr := &Producer{txnID: txnID, done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		pc := producerConfig(bootstrap, props, txnID)
		p, err := kafka.NewProducer(&pc)
		if err != nil {
			pr.err = fmt.Errorf("stage %s: producer: %w", stageName, err)
			return
		}
		pr.p = p
		plog := log.With("stage", stageName)
		go func() {
			for ev := range p.Events() {
				if e, ok := ev.(kafka.Error); ok {
					plog.Warn("stage: producer error", "err", e)
				}
			}
		}()
		ictx, cancel := context.WithTimeout(ctx, initTransactionsTimeout)
		defer cancel()
		if err := InitTransactions(ictx, p); err != nil {
			pr.err = fmt.Errorf("stage %s: init transactions for transactional.id %s: %w", stageName, txnID, err)
		}
	}()
	return pr
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

// wait returns InitTransactions' error once it has returned, or ctx's.
func (pr *Producer) wait(ctx context.Context) error {
	select {
	case <-pr.done:
		return pr.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the producer unless New took it over: at once if its
// InitTransactions has returned, else in the background once it has (it
// observes no cancellation, only its timeout): a start that failed early
// (the broker check, the plan) returns without waiting for it. Safe to
// call twice.
func (pr *Producer) Close() {
	if pr == nil || pr.taken.Load() {
		return
	}
	select {
	case <-pr.done:
		pr.closeNow()
	default:
		go func() {
			<-pr.done
			pr.closeNow()
		}()
	}
}

func (pr *Producer) closeNow() {
	pr.closeOnce.Do(func() {
		if pr.p != nil {
			pr.p.Close()
		}
	})
}

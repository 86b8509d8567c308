package stage

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// initTransactionsTimeout bounds a producer's InitTransactions (a broker
// that cannot be reached, or a predecessor's transaction the coordinator is
// still aborting).
const initTransactionsTimeout = 30 * time.Second

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
// kafkaclient.TransactionalID(…)), configured as New configures its own, and its
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
	txnID := kafkaclient.TransactionalID(applicationID, stageName, instanceID)
	pr := &Producer{txnID: txnID, done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		pc := kafkaclient.TransactionalProducerConfig(bootstrap, props, txnID)
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
		if err := kafkaclient.InitTransactions(ictx, p); err != nil {
			pr.err = fmt.Errorf("stage %s: init transactions for transactional.id %s: %w", stageName, txnID, err)
		}
	}()
	return pr
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

package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// This file is the loop's Kafka clients' lifecycle and the librdkafka
// workarounds: opening the consumer and the transactional producer,
// restarting them after a Kafka error (Run), closing or giving up a
// consumer whose Close never returns, a static member leaving its group,
// and bounding the blocking transaction calls.

// openClients creates the loop's consumer and takes pr (nil: a new one,
// StartProducer) as its transactional producer once pr's InitTransactions
// has returned (fencing any earlier producer of the same transactional id
// and aborting its open transaction).
func (l *Loop) openClients(ctx context.Context, pr *Producer) error {
	cfg := l.cfg
	var err error
	// Statistics events give each task's consumer lag (TaskStatus).
	// An internal input topic's offset out of range is an error
	// (kafkaclient.InternalOffsetReset, ErrOffsetOutOfRange).
	cc := kafkaclient.GroupConsumerConfig(cfg.BootstrapServers, cfg.Properties, l.group, StatsInterval, !cfg.Spec.RawInput, cfg.Consumer)
	if pr == nil {
		props := cfg.Properties
		if !l.userTxnTimeout && l.txnTimeout != kafkaclient.TransactionTimeout && l.txnTimeout > 0 {
			// Raised after a transaction outlived it (afterOutlived).
			props = txnTimeoutProps(props, l.txnTimeout)
		}
		pr = StartProducer(ctx, cfg.BootstrapServers, props, cfg.Spec.ApplicationID, cfg.Spec.Name, cfg.InstanceID, cfg.Logger)
	}
	if l.consumer, err = kafkaclient.NewConsumer(cc); err != nil {
		pr.Close()
		return fmt.Errorf("stage %s: consumer: %w", cfg.Spec.Name, err)
	}
	l.cbMu.Lock()
	l.live, l.consumerFatal = l.consumer, false
	l.cbMu.Unlock()
	if err := pr.wait(ctx); err != nil {
		pr.Close()
		l.consumer.Close()
		return l.txnTimeoutRefused(err)
	}
	pr.taken.Store(true)
	l.producer = pr.p
	return nil
}

// Close leaves the group and closes the clients. Safe to call twice.
func (l *Loop) Close() {
	l.closeOnce.Do(func() {
		l.closeAdmin()
		l.closePurge()
		l.closeConsumer()
		if l.stable != nil {
			_ = l.stable.Close()
		}
		if !l.abandoned {
			l.producer.Close()
		}
	})
}

// restartable says whether err, which ended run, is one a restart of the
// stage's Kafka clients can get past: ErrFenced, or any error from the
// Kafka client (wrapped in ErrBundleFailed or not); never ErrLocalState,
// ErrRecordTooLarge, ErrTopicGone, ErrOffsetOutOfRange (a restart would
// meet the same deleted records) or an error of the SDK or the head.
func restartable(err error) bool {
	if errors.Is(err, ErrLocalState) || errors.Is(err, ErrRecordTooLarge) || errors.Is(err, ErrTopicGone) || errors.Is(err, ErrOffsetOutOfRange) || errors.Is(err, ErrTransactionTooLong) || usersFailure(err) {
		return false
	}
	if errors.Is(err, ErrFenced) || errors.As(err, new(*txnOutlived)) {
		return true
	}
	var ke kafka.Error
	return errors.As(err, &ke)
}

// maxRestarts bounds Run's client restarts within restartWindow.
const (
	maxRestarts   = 5
	restartWindow = 5 * time.Minute
)

// reopen closes the loop's clients, revokes every task from the head and
// forgets the loop's per-task state, then opens new clients (after a
// second, or until ctx is done).
func (l *Loop) reopen(ctx context.Context) error {
	l.closeConsumer()
	if !l.abandoned {
		l.producer.Close()
	}
	l.abandoned = false
	for p := range l.tasks {
		l.head.Revoke(p)
		l.status.remove(p)
	}
	l.tasks = map[int32]*step.Task{}
	l.side.paused = map[int32]time.Time{}
	l.aligned = map[int32]bool{}
	l.woken = nil
	l.isolate = nil
	l.rebalanceErr = nil
	l.forgetAhead()
	select {
	case <-ctx.Done():
		l.closeAdmin()
		l.closePurge()
		l.closeOnce.Do(func() {}) // closed above: Close must not close them again
		return ctx.Err()
	case <-time.After(time.Second):
	}
	if err := l.openClients(ctx, nil); err != nil {
		// Close must not close the consumer and producer that failed to
		// open; what outlives them is closed here.
		l.closeAdmin()
		l.closePurge()
		if l.stable != nil {
			_ = l.stable.Close()
			l.stable = nil
		}
		l.closeOnce.Do(func() {})
		return err
	}
	return nil
}

// closeConsumer closes the loop's consumer (its rebalance callbacks run
// with closing set), or gives it up: a consumer that reported a fatal error
// is never closed, and one whose Close has not returned after
// consumerCloseTimeout is left to it. confluent-kafka-go v2.11.1 (the newest
// the module proxy serves) loops for ever in Close when the consumer has a
// fatal error, e.g. a static member fenced by its own rejoin after a broker
// failover (librdkafka issue 3437): rd_kafka_consumer_close_queue refuses to
// start and Close waits for a close that never comes (fixed upstream by
// confluent-kafka-go PR 1588). In the broker failover scenario with static
// membership an instance could not restart its clients, nor stop. A consumer
// given up keeps its librdkafka handle (a leak bounded by Run's restart
// budget); its callbacks no longer touch the loop (live), and a new consumer
// takes its place in the group (with static membership at once: the same
// group.instance.id fences it; otherwise at its session timeout).
func (l *Loop) closeConsumer() {
	c := l.consumer
	l.cbMu.Lock()
	l.closing = true
	l.cbMu.Unlock()
	// A fatal error may wait in the queue unread (the loop restarts after a
	// producer error as well): look for one first. Records read here are
	// dropped: every task is revoked and rewinds to its committed offset.
	for i := 0; i < closeDrainMax; i++ {
		ev := c.Poll(0)
		if ev == nil {
			break
		}
		if e, ok := ev.(kafka.Error); ok && e.IsFatal() {
			l.cbMu.Lock()
			l.consumerFatal = true
			l.cbMu.Unlock()
		}
	}
	l.cbMu.Lock()
	fatal := l.consumerFatal
	l.cbMu.Unlock()
	reason := ""
	if fatal {
		reason = "it reported a fatal error (confluent-kafka-go v2.11.1's Close never returns then)"
	} else {
		done := make(chan struct{})
		go func() {
			_ = c.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(consumerCloseTimeout):
			reason = fmt.Sprintf("its Close did not return within %v", consumerCloseTimeout)
		}
	}
	l.cbMu.Lock()
	if reason != "" {
		l.live = nil
		l.log.Warn("stage: the consumer is given up, not closed: its librdkafka handle stays allocated", "reason", reason)
	}
	l.closing = false
	l.cbMu.Unlock()
}

// consumerCloseTimeout bounds closeConsumer's wait for a consumer's Close
// (a revocation callback and leaving the group: well under a second on a
// healthy cluster).
const consumerCloseTimeout = 20 * time.Second

// closeDrainMax bounds the events closeConsumer reads looking for a fatal
// error before it closes the consumer (one fetch's records at most).
const closeDrainMax = 100_000

// leaveGroup, on a clean stop, makes a static member (group.instance.id
// set, KIP-345) leave its group now, as a dynamic one does when its
// consumer closes: librdkafka sends no LeaveGroup when a static member
// closes, so its tasks would wait for its session timeout. Unsubscribing
// first does send it; the revocation is served here (Poll), at most 5 s.
func (l *Loop) leaveGroup() {
	if l.cfg.Consumer["group.instance.id"] == "" {
		return
	}
	if err := l.consumer.Unsubscribe(); err != nil {
		l.log.Warn("stage: leaving the group", "err", err)
		return
	}
	for deadline := time.Now().Add(5 * time.Second); len(l.tasks) > 0 && time.Now().Before(deadline); {
		l.consumer.Poll(50)
	}
}

// callWithin runs f, a blocking transaction call given txnCallTimeout, and
// returns its error; if f has not returned txnCallGrace after that timeout,
// it returns an ErrFenced error and marks the producer abandoned: librdkafka
// was seen to ignore the timeout while its transaction coordinator's broker
// was down (in the broker failover scenario a SendOffsetsToTransaction given
// 30 s blocked for minutes). An abandoned producer is never closed (closing
// would wait for the call): Run restarts the clients, and the new producer's
// InitTransactions fences it and aborts its transaction, unless the call
// completed meanwhile; either way the tasks are restored from what Kafka
// committed.
//
// A topic of the stage found gone meanwhile (watchTopics closes gone)
// ends the wait at once with its ErrTopicGone error, the producer
// abandoned the same way: a transaction holding records of a deleted
// topic cannot commit (librdkafka retries them until the call's timeout),
// and the broker aborts it after transaction.timeout.ms. Before, a
// deleted sink held CommitTransaction for txnCallTimeout (30 s).
func (l *Loop) callWithin(what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTimer(txnCallTimeout + txnCallGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-l.gone:
		select {
		case err := <-done:
			return err
		default:
		}
		l.abandoned = true
		return fmt.Errorf("given up, the producer abandoned: %w", l.checkTopics())
	case <-t.C:
		l.abandoned = true
		return fmt.Errorf("%w: stage %s: %s did not return within %v (the Kafka client ignored its timeout): the producer is abandoned", ErrFenced, l.cfg.Spec.Name, what, txnCallTimeout+txnCallGrace)
	}
}

// txnCallGrace is how long callWithin waits past txnCallTimeout.
const txnCallGrace = 15 * time.Second

// txnCallTimeout bounds each blocking transaction call (sending the
// offsets, commit, abort). Without a deadline confluent-kafka-go waits for
// ever: in the broker failover scenario a stage loop waited in
// SendOffsetsToTransaction for minutes after its coordinator's broker died
// (its instance could not even stop). A call that times out fails the
// attempt; the abort and rewind follow, and a Kafka error that recurs
// restarts the clients (Run). Longer than transaction.timeout.ms (10 s), so
// a slow commit is not cut short on a loaded machine.
const txnCallTimeout = 30 * time.Second

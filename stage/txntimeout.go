package stage

import (
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// This file is what a stage does when one of its transactions outlives
// transaction.timeout.ms: the broker aborts it (and bumps the producer's
// epoch: the producer's next call fails, fenced or with an abortable
// error), and the same attempt, begun again, would outlive it again, for
// ever. Seen at 10 M events: the main job's first stage produces a whole
// file's records in one transaction (one input element), and on a slow
// machine that took longer than the runner's 10 s default; it began the
// same attempt again every 80-90 s, 11 times in 16 minutes. Kafka Streams
// cannot meet this (one input record's output is small); a Beam DoFn's
// output for one element has no bound.
//
// The rule: a transaction that failed after it was open, less the time
// the process stood still (stall.go), for outlivedShare of its timeout or
// more was outlived; the stage's clients restart with a producer whose
// timeout is growthFactor times what the attempt took (nextTxnTimeout),
// logged, up to MaxTransactionTimeout. A transaction.timeout.ms the user set is never
// raised: the stage fails with ErrTransactionTooLong naming it. A longer
// timeout has a price, said in the log line: a SIGKILL of the instance
// mid-transaction holds its tasks' downstream readers (read_committed)
// and their next owner's committed offsets (KIP-447) until the broker
// aborts the transaction at that timeout.

// MaxTransactionTimeout is the longest transaction timeout a stage gives
// itself: the broker's default transaction.max.timeout.ms (15 minutes);
// a producer asking for more is refused at InitTransactions.
const MaxTransactionTimeout = 15 * time.Minute

// outlivedShare is the share of its timeout a transaction must have been
// open for a fence to be taken as the broker's timeout abort (a fence by
// a newer instance of the same transactional.id, or a rebalance, can end
// a short transaction too).
const outlivedShare = 0.8

// ErrTransactionTooLong is a transaction that outlived its timeout under
// a transaction.timeout.ms the user set (which the stage does not raise
// quietly), or at MaxTransactionTimeout: the attempt would be aborted
// again. Not restartable.
var ErrTransactionTooLong = fmt.Errorf("stage: transaction outlived transaction.timeout.ms")

// txnOutlived is a transaction that failed after it was open for most
// of its timeout: records is how many records its attempt produced,
// open how long it was open, stalled how much of that the process stood
// still, err what the producer said.
type txnOutlived struct {
	open, stalled, timeout time.Duration
	records                int
	err                    error
}

func (e *txnOutlived) Error() string {
	return fmt.Sprintf("the transaction of an attempt producing %d records was open %v under transaction.timeout.ms %v and was aborted: %v", e.records, e.open.Round(time.Millisecond), e.timeout, e.err)
}

func (e *txnOutlived) Unwrap() error { return e.err }

// outlived says whether a transaction that failed after it was open for
// open, the process standing still for stalled of it, under timeout,
// failed because it outlived timeout: it worked outlivedShare of timeout
// or more. A fence by a newer instance of the same transactional.id or a
// broker's failover can end a short transaction too; a SIGSTOP can make
// a short one look long (stall.go).
func outlived(open, stalled, timeout time.Duration) bool {
	return timeout > 0 && float64(open-stalled) >= outlivedShare*float64(timeout)
}

// outlivedBy returns err as a *txnOutlived when the transaction begun at
// decided, producing records records, and failed at now with err outlived the producer's timeout;
// else nil.
func (l *Loop) outlivedBy(decided, now time.Time, records int, err error) *txnOutlived {
	open := now.Sub(decided)
	stalled := stalledSince(decided, now)
	if !outlived(open, stalled, l.txnTimeout) {
		return nil
	}
	return &txnOutlived{open: open, stalled: stalled, timeout: l.txnTimeout, records: records, err: err}
}

// growthFactor is how many times what an outlived attempt took the next
// transaction timeout is. The attempt was cut short (by the broker's
// abort, or librdkafka's own request timeouts at the same bound), so
// what it took is a lower bound on what it needs; each attempt that
// outlives its timeout again wastes the whole timeout, and a factor of f
// finds a need of N timeouts in log_f(N) such attempts. 4: the 10 M bench's
// attempt (cut at 80-90 s) gets about 6 minutes at once.
const growthFactor = 4

// nextTxnTimeout is the transaction timeout for the producer after one
// whose transaction, open for open, outlived cur: growthFactor times the
// larger of cur and open, in whole seconds, at most
// MaxTransactionTimeout; ok is false when cur is that already.
func nextTxnTimeout(cur, open time.Duration) (next time.Duration, ok bool) {
	if cur >= MaxTransactionTimeout {
		return cur, false
	}
	return min((growthFactor * max(cur, open)).Round(time.Second), MaxTransactionTimeout), true
}

// txnTimeoutProps returns props with transaction.timeout.ms set to t
// (a copy; props is not changed).
func txnTimeoutProps(props map[string]string, t time.Duration) map[string]string {
	out := make(map[string]string, len(props)+1)
	for k, v := range props {
		out[k] = v
	}
	out["transaction.timeout.ms"] = fmt.Sprint(t.Milliseconds())
	return out
}

// afterOutlived decides the restart after a txnOutlived: the raised
// timeout the next producer gets, or ErrTransactionTooLong when the
// user set the timeout (l.userTxnTimeout) or it is at its cap.
func (l *Loop) afterOutlived(o *txnOutlived) error {
	if l.userTxnTimeout {
		return fmt.Errorf("%w: stage %s: %v; it was set with transaction.timeout.ms=%d (--kafka_property), which the stage does not raise: set a larger one (at most the broker's transaction.max.timeout.ms) or make fewer records per input element",
			ErrTransactionTooLong, l.cfg.Spec.Name, o, o.timeout.Milliseconds())
	}
	next, ok := nextTxnTimeout(o.timeout, o.open-o.stalled)
	if !ok {
		return fmt.Errorf("%w: stage %s: %v, the longest this runner asks for (the broker's default transaction.max.timeout.ms)", ErrTransactionTooLong, l.cfg.Spec.Name, o)
	}
	l.log.Warn("stage: a transaction outlived transaction.timeout.ms and was aborted by the broker; the restarted producer gets a longer one, which is also how long a SIGKILL of this instance mid-transaction holds the stage's tasks (set --kafka_property transaction.timeout.ms to choose it)",
		"records", o.records, "open", o.open.Round(time.Millisecond), "timeout", o.timeout, "next_timeout", next)
	l.txnTimeout = next
	return nil
}

// initTxnTimeout sets the loop's transaction timeout from its properties
// (kafkaclient.TransactionTimeoutOf).
func (l *Loop) initTxnTimeout() {
	_, l.userTxnTimeout = l.cfg.Properties["transaction.timeout.ms"]
	if t, err := kafkaclient.TransactionTimeoutOf(l.cfg.Properties); err == nil {
		l.txnTimeout = t
	} else {
		l.txnTimeout = kafkaclient.TransactionTimeout
	}
}

// txnTimeoutRefused names a raised transaction timeout the broker refused
// at InitTransactions (INVALID_TRANSACTION_TIMEOUT: more than its
// transaction.max.timeout.ms) as ErrTransactionTooLong; other errors are
// returned as they are.
func (l *Loop) txnTimeoutRefused(err error) error {
	var ke kafka.Error
	if l.userTxnTimeout || l.txnTimeout == kafkaclient.TransactionTimeout || !errors.As(err, &ke) || ke.Code() != kafka.ErrInvalidTransactionTimeout {
		return err
	}
	return fmt.Errorf("%w: stage %s: the broker refused the transaction timeout %v the stage asked for after a transaction outlived a shorter one (its transaction.max.timeout.ms is lower): raise it, or make fewer records per input element: %v",
		ErrTransactionTooLong, l.cfg.Spec.Name, l.txnTimeout, err)
}

package stage

import (
	"fmt"
	"time"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// This file is what a stage does when one of its transactions outlives
// transaction.timeout.ms: the broker aborts it and bumps the producer's
// epoch (the producer is fenced), and the same attempt, begun again by
// the restarted clients, would outlive it again, for ever. Seen at 10 M
// events: the main job's first stage produces a whole file's records in
// one transaction, and on a slow machine that took longer than 10 s.

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

// txnOutlived is a fence of a transaction that was open for most of its
// timeout: inputs is how many input records its attempt took, open how
// long it was open.
type txnOutlived struct {
	open, timeout time.Duration
	inputs        int
	err           error
}

func (e *txnOutlived) Error() string {
	return fmt.Sprintf("the transaction of an attempt of %d input records was open %v under transaction.timeout.ms %v: %v", e.inputs, e.open.Round(time.Millisecond), e.timeout, e.err)
}

func (e *txnOutlived) Unwrap() error { return e.err }

// outlived says whether a fenced transaction open for open under timeout
// was the broker's timeout abort.
func outlived(open, timeout time.Duration) bool {
	return timeout > 0 && float64(open) >= outlivedShare*float64(timeout)
}

// nextTxnTimeout is the transaction timeout for the producer after one
// whose transaction, open for open, outlived cur: twice the larger of cur
// and open, at most MaxTransactionTimeout; ok is false when cur is that
// already.
func nextTxnTimeout(cur, open time.Duration) (next time.Duration, ok bool) {
	if cur >= MaxTransactionTimeout {
		return cur, false
	}
	return min(2*max(cur, open), MaxTransactionTimeout), true
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
		return fmt.Errorf("%w: stage %s: %v; it was set with transaction.timeout.ms=%d (--kafka_property), which the stage does not raise: set a larger one (at most the broker's transaction.max.timeout.ms) or make fewer records per input record",
			ErrTransactionTooLong, l.cfg.Spec.Name, o, o.timeout.Milliseconds())
	}
	next, ok := nextTxnTimeout(o.timeout, o.open)
	if !ok {
		return fmt.Errorf("%w: stage %s: %v, the longest this runner asks for (the broker's default transaction.max.timeout.ms)", ErrTransactionTooLong, l.cfg.Spec.Name, o)
	}
	l.log.Warn("stage: a transaction outlived transaction.timeout.ms and was aborted by the broker; the restarted producer gets a longer one (set --kafka_property transaction.timeout.ms to choose it)",
		"input_records", o.inputs, "open", o.open.Round(time.Millisecond), "timeout", o.timeout, "next_timeout", next)
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

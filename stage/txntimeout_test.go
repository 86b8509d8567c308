package stage

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestNextTxnTimeoutGrowsToTheBrokersCap(t *testing.T) {
	cur, steps := 10*time.Second, 0
	for {
		next, ok := nextTxnTimeout(cur, cur)
		if !ok {
			break
		}
		if next <= cur {
			t.Fatalf("nextTxnTimeout(%v) = %v: want it longer", cur, next)
		}
		cur, steps = next, steps+1
	}
	if cur != MaxTransactionTimeout || steps > 8 {
		t.Fatalf("ended at %v after %d steps, want %v within 8", cur, steps, MaxTransactionTimeout)
	}
	// A transaction open far longer than its timeout (the broker aborts it
	// late) asks for twice what it took.
	if next, _ := nextTxnTimeout(10*time.Second, 40*time.Second); next != 80*time.Second {
		t.Fatalf("after 40 s open under 10 s: %v, want 80s", next)
	}
}

func TestOutlivedTakesOnlyLongTransactions(t *testing.T) {
	if outlived(2*time.Second, 10*time.Second) {
		t.Fatal("a fence after 2 s of a 10 s timeout is not the timeout's")
	}
	if !outlived(9*time.Second, 10*time.Second) || !outlived(30*time.Second, 10*time.Second) {
		t.Fatal("a fence after 9 s or 30 s of a 10 s timeout is the timeout's")
	}
}

func TestAfterOutlivedRaisesOnlyTheRunnersOwnTimeout(t *testing.T) {
	o := &txnOutlived{open: 11 * time.Second, timeout: 10 * time.Second, inputs: 1, err: ErrFenced}
	l := &Loop{log: slog.New(slog.DiscardHandler)}
	l.cfg.Spec.Name = "s0"
	l.initTxnTimeout()
	if err := l.afterOutlived(o); err != nil || l.txnTimeout != 22*time.Second {
		t.Fatalf("runner's timeout: err %v, next %v; want nil and 22s", err, l.txnTimeout)
	}
	if p := txnTimeoutProps(map[string]string{"a": "b"}, l.txnTimeout); p["transaction.timeout.ms"] != "22000" || p["a"] != "b" {
		t.Fatalf("props %v", p)
	}
	u := &Loop{log: slog.New(slog.DiscardHandler)}
	u.cfg.Spec.Name = "s0"
	u.cfg.Properties = map[string]string{"transaction.timeout.ms": "10000"}
	u.initTxnTimeout()
	err := u.afterOutlived(o)
	if !errors.Is(err, ErrTransactionTooLong) || restartable(err) || !strings.Contains(err.Error(), "transaction.timeout.ms=10000") {
		t.Fatalf("user's timeout: %v (restartable %v), want ErrTransactionTooLong naming it, not restartable", err, restartable(err))
	}
	l.txnTimeout = MaxTransactionTimeout
	if err := l.afterOutlived(&txnOutlived{open: MaxTransactionTimeout, timeout: MaxTransactionTimeout, err: ErrFenced}); !errors.Is(err, ErrTransactionTooLong) {
		t.Fatalf("at the cap: %v, want ErrTransactionTooLong", err)
	}
}

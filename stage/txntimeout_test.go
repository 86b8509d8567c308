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
	if cur != MaxTransactionTimeout || steps > 4 {
		t.Fatalf("ended at %v after %d steps, want %v within 4", cur, steps, MaxTransactionTimeout)
	}
	// A transaction open far longer than its timeout (the broker aborts it
	// late) asks for growthFactor times what it took.
	if next, _ := nextTxnTimeout(10*time.Second, 40*time.Second); next != 160*time.Second {
		t.Fatalf("after 40 s open under 10 s: %v, want 160s", next)
	}
}

func TestOutlivedTakesOnlyLongTransactions(t *testing.T) {
	if outlived(2*time.Second, 0, 10*time.Second) {
		t.Fatal("a transaction ended after 2 s of a 10 s timeout did not outlive it")
	}
	if !outlived(9*time.Second, 0, 10*time.Second) || !outlived(30*time.Second, 0, 10*time.Second) {
		t.Fatal("a transaction ended after 9 s or 30 s of a 10 s timeout outlived it")
	}
	// SIGSTOP for 25 s in a transaction of 2 s of work: the broker aborts
	// it, but a longer timeout would not have been needed.
	if outlived(27*time.Second, 25*time.Second, 10*time.Second) {
		t.Fatal("a transaction that stood still for 25 of its 27 s did not outlive its timeout by its size")
	}
}

func TestStalledSinceCountsStopsOnly(t *testing.T) {
	stallWatch.mu.Lock()
	saved, savedLast := stallWatch.stalls, stallWatch.last
	stallWatch.stalls = nil
	base := time.Now()
	stallWatch.last = base
	stallWatch.mu.Unlock()
	defer func() {
		stallWatch.mu.Lock()
		stallWatch.stalls, stallWatch.last = saved, savedLast
		stallWatch.mu.Unlock()
	}()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// Wakes on time, one 120 ms late (not a stall), then a 20 s stop.
	for ms := 100; ms <= 1000; ms += 100 {
		noteWake(at(ms))
	}
	noteWake(at(1220))
	if d := stalledSince(at(0), at(1220)); d != 0 {
		t.Fatalf("a process that ran stood still %v", d)
	}
	noteWake(at(21220))
	if d := stalledSince(at(500), at(21300)); d != 20*time.Second {
		t.Fatalf("stood still %v across a 20 s stop, want 20s", d)
	}
	// Only the part inside the asked span counts.
	if d := stalledSince(at(11220), at(21300)); d != 10*time.Second {
		t.Fatalf("stood still %v in the stop's last 10 s, want 10s", d)
	}
	// A stop under way that the watch has not woken from yet.
	if d := stalledSince(at(21220), at(31220)); d != 10*time.Second {
		t.Fatalf("stood still %v in a stop under way for 10 s, want 10s", d)
	}
}

func TestAfterOutlivedRaisesOnlyTheRunnersOwnTimeout(t *testing.T) {
	o := &txnOutlived{open: 11 * time.Second, timeout: 10 * time.Second, records: 1, err: ErrFenced}
	l := &Loop{log: slog.New(slog.DiscardHandler)}
	l.cfg.Spec.Name = "s0"
	l.initTxnTimeout()
	if err := l.afterOutlived(o); err != nil || l.txnTimeout != 44*time.Second {
		t.Fatalf("runner's timeout: err %v, next %v; want nil and 44s", err, l.txnTimeout)
	}
	if p := txnTimeoutProps(map[string]string{"a": "b"}, l.txnTimeout); p["transaction.timeout.ms"] != "44000" || p["a"] != "b" {
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

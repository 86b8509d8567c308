package userstate

import (
	"testing"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
)

// TestGCKeepsTheStateOfAHeldTimer: a window's user state stays while an
// event-time timer of its key and window is pending, here held back because
// the stateful DoFn's side inputs are not ready (a restored task re-reading
// its side topics): GC (Prepare) deleted it once the input watermark passed
// the window's GC time, and the timer, when it fired, read an empty bag.
// Prism collects a window's state once the stage's output watermark (held
// by the pending timer) is past it. Found by a review helper.
func TestGCKeepsTheStateOfAHeldTimer(t *testing.T) {
	ready := false
	tk := NewTask(gbk.NewMemStore(), urnInterval)
	tk.SetReady(func([]byte) (bool, error) { return ready, nil })
	if err := tk.Load(); err != nil {
		t.Fatal(err)
	}
	w := interval(0, 10)
	bag := fnapi.UserStateKey{Kind: fnapi.UserStateBag, StateID: "buf", Key: []byte("k"), Window: w}
	if err := tk.Append(bag, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := tk.SetTimer("flush", false, fnapi.Timer{Key: []byte("k"), Window: w, Fire: 9, Hold: 9, Encoded: []byte("t")}); err != nil {
		t.Fatal(err)
	}
	// Report wm=100: Advance pops the timer, held (side inputs not ready).
	due, err := tk.PopDue(100, true, 0)
	if err != nil || len(due) != 0 {
		t.Fatalf("due %d, err %v", len(due), err)
	}
	// Prepare of the same attempt: GC at the input watermark.
	n, err := tk.GC(100, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GC deleted %d records while the timer of the window is pending (hold %d)", n, tk.Hold())
	ready = true
	due, _ = tk.PopDue(100, true, 0)
	if len(due) != 1 {
		t.Fatalf("due %d", len(due))
	}
	if got := get(t, tk, bag); got != "v1" {
		t.Errorf("the held timer fires and reads its window's bag: %q, want %q", got, "v1")
	}
}

// TestGCKeepsTheStateOfAPendingTimer: the same without side inputs, for a
// timer whose output timestamp is inside the window but whose fire time is
// after the window's expiry (the Go SDK does not refuse it): the state was
// deleted at wm 20 while the timer (hold 5) was pending.
func TestGCKeepsTheStateOfAPendingTimer(t *testing.T) {
	tk := NewTask(gbk.NewMemStore(), urnInterval)
	w := interval(0, 10)
	bag := fnapi.UserStateKey{Kind: fnapi.UserStateBag, StateID: "buf", Key: []byte("k"), Window: w}
	_ = tk.Append(bag, []byte("v1"))
	_ = tk.SetTimer("flush", false, fnapi.Timer{Key: []byte("k"), Window: w, Fire: 50, Hold: 5, Encoded: []byte("t")})
	if due, _ := tk.PopDue(20, true, 0); len(due) != 0 {
		t.Fatal("due")
	}
	n, _ := tk.GC(20, 0)
	due, _ := tk.PopDue(60, true, 0)
	if len(due) != 1 {
		t.Fatal("not due")
	}
	if got := get(t, tk, bag); got != "v1" {
		t.Errorf("GC deleted %d records at wm 20 under a pending timer holding at 5; the timer at 50 reads %q, want v1", n, got)
	}
}

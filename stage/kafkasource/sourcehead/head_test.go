package sourcehead

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/kafkasource"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// headAt returns a head with idleness 2 s on a clock the test moves.
func headAt(t *testing.T, now *time.Time) *Head {
	t.Helper()
	h, err := NewHead(HeadConfig{
		Stage: "s0", Topic: "in",
		Strategy: kafkasource.Strategy{Idleness: 2 * time.Second},
		Encode:   func(step.In, mtime.Time) ([]byte, error) { return []byte("e"), nil },
		Clock:    func() time.Time { return *now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func idleState(h *Head, p int32) string {
	return fmt.Sprintf("wake=%v idle=%v", h.Wake(), h.Idle(p))
}

// answer does what the loop does before it polls (step.LogEnds): it
// hands the head, for every partition it wants, the broker's log end at
// now, high (no transaction open: the last stable offset is high too).
func answer(h *Head, now time.Time, high int64) {
	for _, p := range h.LogEndsWanted() {
		h.SetLogEnd(p, high, high, now)
	}
}

// TestHeadBacklogIsNotIdle: a partition is idle only once its consumer has
// reached its end (a partition EOF) after its latest record, however long
// it has gone without a record: a partition whose records wait unread (a
// backlog) must not leave the watermark's minimum (the test 3;
// integration: TestKafkaSourceBacklogNotIdle).
func TestHeadBacklogIsNotIdle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := headAt(t, &now)
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	elapse := func(d time.Duration) { now = now.Add(d) }
	end := int64(0) // the broker's log end: the latest EOF's offset
	check := func(what, want string) {
		t.Helper()
		answer(h, now, end)
		if got := idleState(h, 0); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}

	elapse(5 * time.Second)
	check("no record and no partition EOF for 5 s (a backlog not read yet)", "wake=[] idle=false")
	h.ReachedEnd(0, 0)
	end = 0
	check("empty: EOF at 0, quiet since the assignment", "wake=[0] idle=true")

	rec := func(off int64) {
		t.Helper()
		if _, err := h.Element(0, step.In{Task: 0, Offset: off, Timestamp: 1000 * off}); err != nil {
			t.Fatal(err)
		}
	}
	rec(0)
	rec(1)
	end = 2
	check("records: live", "wake=[] idle=false")
	elapse(3 * time.Second)
	// Not idle; its report says why (TestHeadNotIdleSaysWhy).
	check("3 s after record 1, no EOF since: records may wait", "wake=[0] idle=false")
	h.ReachedEnd(0, 1)
	check("an EOF before record 1 (stale)", "wake=[] idle=false")
	h.ReachedEnd(0, 2)
	check("EOF after record 1, quiet for 3 s", "wake=[0] idle=true")

	rec(2)
	end = 3
	elapse(3 * time.Second)
	check("a record after the EOF, then 3 s without one or an EOF", "wake=[0] idle=false")
	h.ReachedEnd(0, 3)
	check("caught up again", "wake=[0] idle=true")

	if err := h.Aborted([]int32{0}); err != nil {
		t.Fatal(err)
	}
	check("aborted: rewound, its records to read again", "wake=[] idle=false")
	h.ReachedEnd(0, 3)
	end = 3
	check("at the end again", "wake=[0] idle=true")

	h.Revoke(0)
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	elapse(3 * time.Second)
	check("assigned again: nothing known of its end", "wake=[] idle=false")
}

// TestHeadUnreachableIsNotIdle: a caught-up partition whose leader is gone
// (SetReachable false: a broker died) does not idle out however long it
// stays quiet, an idle one stops being idle (its next report says so), and
// once it can be fetched again it idles out only a whole idleness timeout
// later: what its producers held back meanwhile arrives with old event
// times and must find the watermark where it was (the broker failover
// scenario at 1 000 records/s lost 887 windows' sums without this).
func TestHeadUnreachableIsNotIdle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := headAt(t, &now)
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	elapse := func(d time.Duration) { now = now.Add(d) }
	check := func(what, want string) {
		t.Helper()
		answer(h, now, 1)
		if got := fmt.Sprintf("%s why=%q", idleState(h, 0), h.Source(0).GetNotIdleBecause()); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}
	if _, err := h.Element(0, step.In{Task: 0, Offset: 0, Timestamp: 1000}); err != nil {
		t.Fatal(err)
	}
	h.ReachedEnd(0, 1)
	elapse(time.Second)
	h.SetReachable(0, false)
	check("caught up, its leader gone, 1 s after its record (idleness 2 s)", `wake=[] idle=false why=""`)
	elapse(10 * time.Second)
	gone := `why="` + notIdleUnreachable + `"`
	check("its leader gone for 10 s: its report says why", "wake=[0] idle=false "+gone)
	h.SetReachable(0, false)
	check("still gone", "wake=[] idle=false "+gone)
	h.SetReachable(0, true)
	check("reachable again: its idleness clock starts afresh, its report drops the reason", `wake=[0] idle=false why=""`)
	elapse(1500 * time.Millisecond)
	check("1.5 s after", `wake=[] idle=false why=""`)
	elapse(500 * time.Millisecond)
	check("an idleness timeout after", `wake=[0] idle=true why=""`)
	h.SetReachable(0, false)
	check("idle, then its leader gone: not idle, and a report says so and why", "wake=[0] idle=false "+gone)
	check("said once", "wake=[] idle=false "+gone)
}

// TestHeadNotIdleSaysWhy: a partition past its idleness deadline that is
// not idle says why in its reports (the operator's page), whatever the
// cause, and once per change. The case CI met (TestKafkaSourceThrottledNotIdle,
// 2026-12-05): the fetch that would have raised partition 1's EOF was the
// one a quota throttled, so the partition never caught up, was never asked
// about, and the page said nothing for the 12 s it held the watermark.
func TestHeadNotIdleSaysWhy(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := headAt(t, &now)
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	check := func(what, want string) {
		t.Helper()
		state := idleState(h, 0) // Wake first, as the loop: then the attempt's report
		src := h.Source(0)
		got := fmt.Sprintf("%s unread=%q notIdle=%q", state, src.GetUnreadBecause(), src.GetNotIdleBecause())
		if got != want {
			t.Errorf("%s:\n  %s\nwant\n  %s", what, got, want)
		}
	}
	if _, err := h.Element(0, step.In{Task: 0, Offset: 0, Timestamp: 1000}); err != nil {
		t.Fatal(err)
	}
	if got := h.LogEndsWanted(); len(got) != 0 {
		t.Fatalf("a record just read: LogEndsWanted %v, want none", got)
	}
	now = now.Add(3 * time.Second)
	if got := fmt.Sprint(h.LogEndsWanted()); got != "[0]" {
		t.Fatalf("3 s after its record, no EOF since: LogEndsWanted %s, want [0] (the answer says why it is not idle)", got)
	}
	h.SetLogEnd(0, 1, 1, now)
	unconfirmed := notIdle{unconfirmed: true, position: 1, high: 1}.String()
	check("the broker shows nothing past it, no EOF", `wake=[0] idle=false unread="" notIdle="`+unconfirmed+`"`)
	check("said once", `wake=[] idle=false unread="" notIdle="`+unconfirmed+`"`)
	h.SetLogEnd(0, 3, 3, now.Add(time.Second))
	check("two records written, its fetch throttled", `wake=[0] idle=false unread="its consumer has not been handed them yet (position 1, high watermark 3)" notIdle=""`)
	for _, off := range []int64{1, 2} {
		if _, err := h.Element(0, step.In{Task: 0, Offset: off, Timestamp: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	h.ReachedEnd(0, 3)
	check("read and caught up", `wake=[] idle=false unread="" notIdle=""`)
	now = now.Add(3 * time.Second)
	answer(h, now, 3)
	check("quiet for its idleness, nothing past its EOF", `wake=[0] idle=true unread="" notIdle=""`)
	h.SetReachable(0, false)
	check("idle, then its leader gone", `wake=[0] idle=false unread="" notIdle="`+notIdleUnreachable+`"`)
	h.SetReachable(0, true)
	check("reachable again", `wake=[0] idle=false unread="" notIdle=""`)
}

// TestHeadAlignmentAwaitsFirstRecord: in an alignment group, a partition
// that has records to read but none read yet (no partition EOF: its first
// fetch is late) holds the head's partitions that have records, since its
// event time is unknown; its first record, its end (an empty partition),
// or its idleness releases them. Without it, partition 0 of
// TestKafkaSourceAlignment once read all its 600 s before partition 1's
// first record came.
func TestHeadAlignmentAwaitsFirstRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(h *Head, now *time.Time)
	}{
		{"first record", func(h *Head, _ *time.Time) {
			if _, err := h.Element(1, step.In{Task: 1, Offset: 0, Timestamp: 1_000}); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty partition", func(h *Head, _ *time.Time) { h.ReachedEnd(1, 0) }},
		{"idleness", func(_ *Head, now *time.Time) { *now = now.Add(2 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			h, err := NewHead(HeadConfig{
				Stage: "s0", Topic: "in",
				Strategy: kafkasource.Strategy{Idleness: 2 * time.Second, AlignmentGroup: "g", MaxDrift: time.Minute},
				Encode:   func(step.In, mtime.Time) ([]byte, error) { return []byte("e"), nil },
				Clock:    func() time.Time { return now },
				GroupMin: func(map[int32]bool) (mtime.Time, bool) { return 0, false },
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []int32{0, 1} {
				if err := h.Assign(context.Background(), p); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := h.Element(0, step.In{Task: 0, Offset: 0, Timestamp: 1_000}); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(h.Pause()); got != "[0]" {
				t.Fatalf("partition 1 not read yet: held %s, want [0]", got)
			}
			now = now.Add(time.Second)
			if got := fmt.Sprint(h.Pause()); got != "[0]" {
				t.Fatalf("a second on: held %s, want [0]", got)
			}
			tc.release(h, &now)
			if got := fmt.Sprint(h.Pause()); got != "[]" {
				t.Errorf("released by %s: held %s, want []", tc.name, got)
			}
		})
	}
}

// TestHeadLimitedDelay: a LimitedDelay source (d = 2 s) never reports a
// partition idle; once the consumer has reached the end after its latest
// record and the wall clock is more than d past its highest event time, its
// Hold follows the wall clock less d, and Wake asks for an attempt each
// time it has moved LimitedDelayReport since the last one (the issue's
// case on kafkastreams: three records at now − 30 s … now, then silence;
// the window closes at its end plus d, not never).
func TestHeadLimitedDelay(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h, err := NewHead(HeadConfig{
		Stage: "s0", Topic: "in",
		Strategy: kafkasource.Strategy{Kind: kafkasource.LimitedDelay, MaxOutOfOrderness: 2 * time.Second},
		Encode:   func(step.In, mtime.Time) ([]byte, error) { return []byte("e"), nil },
		Clock:    func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ms := func(d time.Duration) mtime.Time { return mtime.FromTime(now.Add(d)) }
	check := func(what string, wantHold mtime.Time, wantWake string) {
		t.Helper()
		if got := fmt.Sprintf("hold=%d wake=%v idle=%v", h.Hold(0), h.Wake(), h.Idle(0)); got != fmt.Sprintf("hold=%d wake=%s idle=false", wantHold, wantWake) {
			t.Errorf("%s: %s, want hold=%d wake=%s idle=false", what, got, wantHold, wantWake)
		}
	}
	check("assigned, no EOF yet: holds", mtime.MinTimestamp, "[]")
	for i, back := range []time.Duration{30 * time.Second, 15 * time.Second, 0} {
		if _, err := h.Element(0, step.In{Offset: int64(i), Timestamp: int64(ms(-back))}); err != nil {
			t.Fatal(err)
		}
	}
	last := ms(0)
	check("three records, no EOF after them: max − d", last-2000, "[]")
	h.ReachedEnd(0, 3)
	check("librdkafka at its end, the broker not asked yet: max − d", last-2000, "[]")
	if got := h.LogEndsWanted(); fmt.Sprint(got) != "[0]" {
		t.Fatalf("LogEndsWanted = %v: a caught-up LimitedDelay partition's log end is wanted", got)
	}
	answer := func() { h.SetLogEnd(0, 3, 3, now) } // the loop's ListOffsets: nothing past offset 3
	answer()
	check("caught up, within d of the max: max − d", last-2000, "[0]") // first wake since assignment
	now = now.Add(2500 * time.Millisecond)
	answer()
	check("caught up, 2.5 s later: now − d", ms(-2*time.Second), "[0]") // moved 2.5 s since the last wake
	now = now.Add(600 * time.Millisecond)
	answer()
	check("0.6 s later", ms(-2*time.Second), "[]")
	now = now.Add(400 * time.Millisecond)
	answer()
	check("1 s after the last wake", ms(-2*time.Second), "[0]")
	now = now.Add(time.Minute)
	check("a minute later, no answer since: at the last answer − d", ms(-time.Minute-2*time.Second), "[]")
	answer()
	check("a minute later, answered", ms(-2*time.Second), "[0]")
	// Issue 21 §2 × §3: a transaction opened on the partition (high
	// watermark 5 past the EOF at 3, last stable offset 3): its records
	// will become readable, so the wall clock does not move the watermark.
	now = now.Add(5 * time.Second)
	h.SetLogEnd(0, 5, 3, now)
	// Not quiet: the hold is max − d (the task's output watermark, a max,
	// stays where the last quiet answer put it); woken so that the report
	// says why (unreadBecause).
	check("a transaction open: not quiet, max − d", last-2000, "[0]")
	h.SetLogEnd(0, 6, 6, now.Add(time.Millisecond))
	check("committed (a marker at 5), the consumer not at 6 yet: not quiet", last-2000, "[0]")
	h.ReachedEnd(0, 6)
	now = now.Add(time.Second)
	answer6 := func() { h.SetLogEnd(0, 6, 6, now) }
	answer6()
	check("read past the commit, quiet again", ms(-2*time.Second), "[0]")
	h.SetReachable(0, false)
	check("unreachable: not quiet, max − d", last-2000, "[]")
	h.SetReachable(0, true)
	now = now.Add(100 * time.Millisecond)
	answer6()
	check("reachable again", ms(-2*time.Second), "[0]")
	// The records committed, a later attempt aborts: the generator keeps
	// the commit's progress (TestHeadAbortRewindsTheWatermark).
	if err := h.Committed(); err != nil {
		t.Fatal(err)
	}
	if err := h.Aborted([]int32{0}); err != nil {
		t.Fatal(err)
	}
	check("aborted: its EOF is forgotten until it reaches the end again", last-2000, "[]")
	h.ReachedEnd(0, 6)
	check("caught up again: woken at once", ms(-2*time.Second), "[0]")
}

// TestHeadUnreadRecordsAreNotIdle: the Head's side of issue 21, section 2.
// A caught-up partition past its idleness is idle only once a ListOffsets
// answer asked after its deadline shows nothing past its EOF; an answer
// showing a transaction open past the last stable offset keeps it
// non-idle and its report says why; an idle partition that an answer
// shows unread records for stops being idle at once (Wake asks for the
// report); a partition sought back (Rewound) is not caught up.
func TestHeadUnreadRecordsAreNotIdle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := headAt(t, &now)
	if err := h.Assign(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	check := func(what, want string) {
		t.Helper()
		got := fmt.Sprintf("%s want=%v unread=%q", idleState(h, 1), h.LogEndsWanted(), h.Source(1).GetUnreadBecause())
		if got != want {
			t.Errorf("%s:\n  %s\nwant\n  %s", what, got, want)
		}
	}
	if _, err := h.Element(1, step.In{Task: 1, Offset: 0, Timestamp: 5000}); err != nil {
		t.Fatal(err)
	}
	h.ReachedEnd(1, 1) // read_committed: the EOF at the last stable offset
	deadline := now.Add(2 * time.Second)
	h.SetLogEnd(1, 1, 1, now)
	now = now.Add(3 * time.Second)
	check("past its idleness, the only answer from before the deadline", `wake=[] idle=false want=[1] unread=""`)
	h.SetLogEnd(1, 3, 1, now)
	check("an answer after the deadline: a transaction open (LSO 1, HWM 3)", `wake=[1] idle=false want=[1] unread="a transaction is open (last stable offset 1, high watermark 3)"`)
	check("its report went out once", `wake=[] idle=false want=[1] unread="a transaction is open (last stable offset 1, high watermark 3)"`)
	now = now.Add(10 * time.Second)
	check("10 s on, still open", `wake=[] idle=false want=[1] unread="a transaction is open (last stable offset 1, high watermark 3)"`)

	// The commit: the consumer reads the 2 records and the marker.
	for _, off := range []int64{1, 2} {
		if _, err := h.Element(1, step.In{Task: 1, Offset: off, Timestamp: 30000}); err != nil {
			t.Fatal(err)
		}
	}
	h.ReachedEnd(1, 4)
	check("committed and read (EOF 4 past the marker)", `wake=[] idle=false want=[] unread=""`)
	now = now.Add(2 * time.Second)
	check("its idleness later, no answer since", `wake=[] idle=false want=[1] unread=""`)
	h.SetLogEnd(1, 4, 4, now.Add(-time.Millisecond))
	check("an answer asked 1 ms before the deadline", `wake=[] idle=false want=[1] unread=""`)
	h.SetLogEnd(1, 4, 4, now)
	check("an answer at the deadline, nothing past the EOF", `wake=[1] idle=true want=[1] unread=""`)

	h.SetLogEnd(1, 9, 4, now.Add(time.Second))
	check("idle, then a transaction opened on it", `wake=[1] idle=false want=[1] unread="a transaction is open (last stable offset 4, high watermark 9)"`)

	_ = deadline
	h.Rewound(1)
	check("sought back (side inputs): not caught up", `wake=[] idle=false want=[] unread="a transaction is open (last stable offset 4, high watermark 9)"`)
}

// TestHeadBoundedAddedPartitionIsDone: a bounded read is the topic as it
// was when the job started (HeadConfig.Ends). A partition added later had
// end offset 0 then: none of its records is read, and its first partition
// EOF makes it done (the end of time), so the stage's watermark reaches the
// end of time and the bounded job ends. It was read unbounded: its records
// came after the others' end, and it never ended (with the Manager's done
// rule, issue 21, the job then never finished).
func TestHeadBoundedAddedPartitionIsDone(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h, err := NewHead(HeadConfig{
		Stage: "s0", Topic: "in",
		Strategy: kafkasource.Strategy{Idleness: 2 * time.Second},
		Encode:   func(step.In, mtime.Time) ([]byte, error) { return []byte("e"), nil },
		Clock:    func() time.Time { return now },
		Ends:     map[int32]int64{0: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{0, 1} {
		if err := h.Assign(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []int32{0, 1} {
		w, err := h.Element(p, step.In{Task: p, Offset: 0, Value: []byte("v"), Timestamp: now.UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int32]int{0: 1, 1: 0}[p]; len(w.Elements) != want {
			t.Errorf("partition %d's record at offset 0: %d elements, want %d (Ends %v)", p, len(w.Elements), want, map[int32]int64{0: 1})
		}
	}
	h.ReachedEnd(0, 1)
	h.ReachedEnd(1, 1)
	for _, p := range []int32{0, 1} {
		if got := h.Hold(p); got != mtime.MaxTimestamp {
			t.Errorf("partition %d after its partition EOF: watermark %v, want the end of time (done)", p, got)
		}
	}
}

// TestHeadAbortRewindsTheWatermark: an aborted attempt's records are read
// again, so the generator goes back to what it had at the last commit.
// Kept, a retry that reads fewer of them (or a task woken without them)
// reported a watermark past the records not yet output again, and the
// windows downstream dropped them as late (`make chaos`, unbounded: a
// record of a partition's first attempt, aborted by the first rebalance,
// missing from its window).
func TestHeadAbortRewindsTheWatermark(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := headAt(t, &now)
	for p := int32(0); p < 2; p++ {
		if err := h.Assign(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(p int32, off, ts int64) {
		t.Helper()
		if _, err := h.Element(p, step.In{Task: p, Offset: off, Timestamp: ts}); err != nil {
			t.Fatal(err)
		}
	}
	// An attempt that aborts before any commit: back to no record seen.
	rec(0, 0, 10_000)
	rec(0, 1, 50_000)
	if got := h.Hold(0); got != 50_000 {
		t.Fatalf("after records at 10 s and 50 s: Hold %v, want 50000", got)
	}
	if err := h.Aborted([]int32{0}); err != nil {
		t.Fatal(err)
	}
	if got := h.Hold(0); got != mtime.MinTimestamp {
		t.Errorf("after the first attempt aborted: Hold %v, want %v (no record output yet)", got, mtime.MinTimestamp)
	}
	// Committed, then an aborted attempt: back to the commit's.
	rec(0, 0, 10_000)
	rec(1, 0, 20_000)
	if err := h.Committed(); err != nil {
		t.Fatal(err)
	}
	rec(0, 1, 50_000)
	rec(1, 1, 60_000)
	if err := h.Aborted([]int32{0}); err != nil {
		t.Fatal(err)
	}
	if got := h.Hold(0); got != 10_000 {
		t.Errorf("partition 0 after an aborted attempt: Hold %v, want 10000 (its last commit's)", got)
	}
	if got := h.Hold(1); got != 60_000 {
		t.Errorf("partition 1, not aborted: Hold %v, want 60000", got)
	}
	// Read again, the records move it as before.
	rec(0, 1, 50_000)
	if got := h.Hold(0); got != 50_000 {
		t.Errorf("partition 0 after its records are read again: Hold %v, want 50000", got)
	}
}

// TestHeadWatermarkWith: WatermarkWith(p, ts) is the Hold that p's next
// record of timestamp ts gives, and changes nothing; not ok for a
// partition not assigned or a timestamp function.
func TestHeadWatermarkWith(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := headAt(t, &now)
	if _, ok := h.WatermarkWith(0, 10_000); ok {
		t.Fatal("WatermarkWith of a partition not assigned: ok")
	}
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	for i, ts := range []int64{10_000, 5_000, 30_000, 30_000, 29_000} {
		want, wantOK := h.WatermarkWith(0, ts)
		if _, err := h.Element(0, step.In{Task: 0, Offset: int64(i), Timestamp: ts}); err != nil {
			t.Fatal(err)
		}
		if got := h.Hold(0); !wantOK || got != want {
			t.Fatalf("record %d at %d: WatermarkWith said %v, %v; Hold after it %v", i, ts, want, wantOK, got)
		}
	}
	h.WatermarkWith(0, 90_000)
	if h.Hold(0) != 30_000 {
		t.Fatalf("WatermarkWith moved the watermark: Hold %v, want 30000", h.Hold(0))
	}
	fn, err := NewHead(HeadConfig{
		Stage: "s0", Topic: "in",
		Encode:    func(step.In, mtime.Time) ([]byte, error) { return []byte("e"), nil },
		Timestamp: func(r step.In) (time.Time, error) { return time.UnixMilli(r.Timestamp), nil },
		Clock:     func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fn.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := fn.WatermarkWith(0, 10_000); ok {
		t.Fatal("WatermarkWith under a timestamp function: ok (it would have to call the user's function while polling)")
	}
}

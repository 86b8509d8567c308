package kafkasource

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage"
)

// headAt returns a head with idleness 2 s on a clock the test moves.
func headAt(t *testing.T, now *time.Time) *Head {
	t.Helper()
	h, err := NewHead(HeadConfig{
		Stage: "s0", Topic: "in",
		Strategy: Strategy{Idleness: 2 * time.Second},
		Encode:   func(_, _ []byte, _ mtime.Time) ([]byte, error) { return []byte("e"), nil },
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

// answer does what the loop does before it polls (stage.LogEnds): it
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
	step := func(d time.Duration) { now = now.Add(d) }
	end := int64(0) // the broker's log end: the latest EOF's offset
	check := func(what, want string) {
		t.Helper()
		answer(h, now, end)
		if got := idleState(h, 0); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}

	step(5 * time.Second)
	check("no record and no partition EOF for 5 s (a backlog not read yet)", "wake=[] idle=false")
	h.ReachedEnd(0, 0)
	end = 0
	check("empty: EOF at 0, quiet since the assignment", "wake=[0] idle=true")

	rec := func(off int64) {
		t.Helper()
		if _, err := h.Element(0, stage.In{Task: 0, Offset: off, Timestamp: 1000 * off}); err != nil {
			t.Fatal(err)
		}
	}
	rec(0)
	rec(1)
	check("records: live", "wake=[] idle=false")
	step(3 * time.Second)
	check("3 s after record 1, no EOF since: records may wait", "wake=[] idle=false")
	h.ReachedEnd(0, 1)
	end = 1
	check("an EOF before record 1 (stale)", "wake=[] idle=false")
	h.ReachedEnd(0, 2)
	end = 2
	check("EOF after record 1, quiet for 3 s", "wake=[0] idle=true")

	rec(2)
	step(3 * time.Second)
	check("a record after the EOF, then 3 s without one or an EOF", "wake=[] idle=false")
	h.ReachedEnd(0, 3)
	end = 3
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
	step(3 * time.Second)
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
	step := func(d time.Duration) { now = now.Add(d) }
	check := func(what, want string) {
		t.Helper()
		answer(h, now, 1)
		if got := idleState(h, 0); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}
	if _, err := h.Element(0, stage.In{Task: 0, Offset: 0, Timestamp: 1000}); err != nil {
		t.Fatal(err)
	}
	h.ReachedEnd(0, 1)
	step(time.Second)
	h.SetReachable(0, false)
	step(10 * time.Second)
	check("caught up, its leader gone for 10 s (idleness 2 s)", "wake=[] idle=false")
	h.SetReachable(0, false)
	check("still gone", "wake=[] idle=false")
	h.SetReachable(0, true)
	check("reachable again: its idleness clock starts afresh", "wake=[] idle=false")
	step(1500 * time.Millisecond)
	check("1.5 s after", "wake=[] idle=false")
	step(500 * time.Millisecond)
	check("an idleness timeout after", "wake=[0] idle=true")
	h.SetReachable(0, false)
	check("idle, then its leader gone: not idle, and a report says so", "wake=[0] idle=false")
	check("said once", "wake=[] idle=false")
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
			if _, err := h.Element(1, stage.In{Task: 1, Offset: 0, Timestamp: 1_000}); err != nil {
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
				Strategy: Strategy{Idleness: 2 * time.Second, AlignmentGroup: "g", MaxDrift: time.Minute},
				Encode:   func(_, _ []byte, _ mtime.Time) ([]byte, error) { return []byte("e"), nil },
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
			if _, err := h.Element(0, stage.In{Task: 0, Offset: 0, Timestamp: 1_000}); err != nil {
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

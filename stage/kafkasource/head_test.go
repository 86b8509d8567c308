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
	check := func(what, want string) {
		t.Helper()
		if got := idleState(h, 0); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}

	step(5 * time.Second)
	check("no record and no partition EOF for 5 s (a backlog not read yet)", "wake=[] idle=false")
	h.ReachedEnd(0, 0)
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
	check("an EOF before record 1 (stale)", "wake=[] idle=false")
	h.ReachedEnd(0, 2)
	check("EOF after record 1, quiet for 3 s", "wake=[0] idle=true")

	rec(2)
	step(3 * time.Second)
	check("a record after the EOF, then 3 s without one or an EOF", "wake=[] idle=false")
	h.ReachedEnd(0, 3)
	check("caught up again", "wake=[0] idle=true")

	if err := h.Aborted([]int32{0}); err != nil {
		t.Fatal(err)
	}
	check("aborted: rewound, its records to read again", "wake=[] idle=false")
	h.ReachedEnd(0, 3)
	check("at the end again", "wake=[0] idle=true")

	h.Revoke(0)
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	step(3 * time.Second)
	check("assigned again: nothing known of its end", "wake=[] idle=false")
}

package kafkaio

import (
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// A partition's restriction checkpoints only: the primary is what was
// claimed, the residual starts at the next offset and has no end. A split
// at a fraction of an unbounded restriction is refused (it would land on an
// offset no record has, far past the log end).
func TestPartitionTrackerCheckpoints(t *testing.T) {
	tr := newPartitionTracker(Restriction{Partition: 2, Start: 5, End: NoEnd})
	if tr.IsBounded() {
		t.Fatal("unbounded restriction reported bounded")
	}
	for _, off := range []int64{5, 6, 9} { // 7, 8: transaction markers
		if !tr.TryClaim(off) {
			t.Fatalf("claim %d refused: %v", off, tr.GetError())
		}
	}
	if p, r, _ := tr.TrySplit(0.5); r != nil || p != (Restriction{Partition: 2, Start: 5, End: NoEnd}) {
		t.Fatalf("TrySplit(0.5) = %v, %v; want no split", p, r)
	}
	p, r, err := tr.TrySplit(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Restriction{Partition: 2, Start: 5, End: 10}); p != want {
		t.Errorf("primary %v, want %v", p, want)
	}
	if want := (Restriction{Partition: 2, Start: 10, End: NoEnd}); r != want {
		t.Errorf("residual %v, want %v", r, want)
	}
	if !tr.IsDone() {
		t.Error("primary not done after a checkpoint")
	}
}

func TestRestrictionAndStateCoders(t *testing.T) {
	r := Restriction{Partition: 7, Start: 42, End: NoEnd}
	b, err := encodeRestriction(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeRestriction(b); err != nil || got != r {
		t.Errorf("restriction round trip: %v, %v; want %v", got, err, r)
	}
	s := WatermarkState{Seen: true, MaxEventTime: -3, ActivityMs: 1_700_000_000_000, Watermark: int64(mtime.MinTimestamp)}
	b, err = encodeWatermarkState(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeWatermarkState(b); err != nil || got != s {
		t.Errorf("state round trip: %v, %v; want %v", got, err, s)
	}
}

// The estimator's rule, W' = MAX(W, formula, idle ∧ caught up ∧ kind ≠
// none ? now − lag : −∞), column by column; and its state carries it to
// the next checkpoint.
func TestWatermarkEstimator(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	const ev = 1_700_000_000_000 // event times, ms
	type step struct {
		observe  int64         // event time observed at now, if not 0
		at       time.Duration // now = t0 + at
		caughtUp bool
		want     mtime.Time // watermark after advance(now, caughtUp)
	}
	nowMs := func(d time.Duration) mtime.Time { return mtime.FromTime(t0.Add(d)) }
	for _, tc := range []struct {
		name  string
		opts  []Option
		steps []step
	}{
		{"bounded 10s, no idleness", []Option{WithBoundedOutOfOrderness(10 * time.Second), WithIdleness(-1)}, []step{
			{at: 0, caughtUp: true, want: mtime.MinTimestamp},
			{observe: ev + 30_000, at: time.Second, want: ev + 20_000},
			{observe: ev + 5_000, at: 2 * time.Second, want: ev + 20_000}, // out of order: max stays
			{at: time.Hour, caughtUp: true, want: ev + 20_000},            // idleness off
		}},
		{"monotonous", []Option{WithMonotonousTimestamps(), WithIdleness(-1)}, []step{
			{observe: ev, at: 0, want: ev - 1},
		}},
		{"bounded 10s, idleness 5s", []Option{WithBoundedOutOfOrderness(10 * time.Second), WithIdleness(5 * time.Second)}, []step{
			{at: 4 * time.Second, caughtUp: true, want: mtime.MinTimestamp},  // not idle yet
			{at: 6 * time.Second, caughtUp: false, want: mtime.MinTimestamp}, // idle but a backlog
			{at: 6 * time.Second, caughtUp: true, want: nowMs(6*time.Second) - 10_000},
			{observe: ev, at: 7 * time.Second, caughtUp: true, want: nowMs(6*time.Second) - 10_000}, // never back
		}},
		{"none, idleness 5s", []Option{WithNoWatermarks(), WithIdleness(5 * time.Second)}, []step{
			{observe: ev, at: 0, want: mtime.MinTimestamp},
			{at: time.Hour, caughtUp: true, want: mtime.MinTimestamp},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConfig([]string{"t"}, tc.opts)
			s := WatermarkState{ActivityMs: t0.UnixMilli(), Watermark: int64(mtime.MinTimestamp)}
			for i, st := range tc.steps {
				e := newWatermarkEstimator(c, s) // each step a new checkpoint
				if e.err != nil {
					t.Fatal(e.err)
				}
				now := t0.Add(st.at)
				if st.observe != 0 {
					e.observe(mtime.Time(st.observe), now)
				}
				e.advance(now, st.caughtUp)
				if got := mtime.FromTime(e.CurrentWatermark()); got != st.want {
					t.Errorf("step %d: watermark %d, want %d", i, got, st.want)
				}
				s = e.state()
			}
		})
	}
}

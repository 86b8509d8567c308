package kafkaio

import (
	"errors"
	"strings"
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

// The estimator's rule, W' = MAX(W, WatermarkAt(now, caught up)), column
// by column; and its state carries it to the next checkpoint.
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
			{at: time.Hour, caughtUp: true, want: ev + 20_000},            // idleness off: holds
		}},
		{"monotonous", []Option{WithMonotonousTimestamps(), WithIdleness(-1)}, []step{
			{observe: ev, at: 0, want: ev - 1},
		}},
		// The case: records at t0 − 30 s … t0, then silence.
		{"limited delay 2s", []Option{WithLimitedDelay(2 * time.Second)}, []step{
			{at: 0, want: mtime.MinTimestamp},
			{observe: int64(nowMs(-30 * time.Second)), at: 0, want: nowMs(-32 * time.Second)},
			{observe: int64(nowMs(0)), at: 0, want: nowMs(-2 * time.Second)},
			{at: time.Second, caughtUp: true, want: nowMs(-2 * time.Second)},      // within d of the max
			{at: 5 * time.Second, caughtUp: false, want: nowMs(-2 * time.Second)}, // a backlog: max − d
			{at: 5 * time.Second, caughtUp: true, want: nowMs(3 * time.Second)},   // quiet: now − d
			{observe: ev, at: 6 * time.Second, want: nowMs(3 * time.Second)},      // a late record: never back
			{at: time.Minute, caughtUp: true, want: nowMs(58 * time.Second)},
		}},
		{"limited delay, empty partition", []Option{WithLimitedDelay(time.Second)}, []step{
			{at: 0, want: mtime.MinTimestamp},
			{at: time.Second, caughtUp: true, want: nowMs(0)},
		}},
		{"none, idleness 5s", []Option{WithNoWatermarks(), WithIdleness(5 * time.Second)}, []step{
			{observe: ev, at: 0, want: mtime.MinTimestamp},
			{at: time.Hour, caughtUp: true, want: mtime.MinTimestamp},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConfig([]string{"t"}, tc.opts)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
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
					t.Errorf("step %d: watermark %d, want %d (%+d ms)", i, got, st.want, got-st.want)
				}
				s = e.state()
			}
		})
	}
}

// TestIdlenessRefusedOffKafkastreams: an unbounded Read with idleness (set,
// or the runner's default) is refused on Prism, naming the options that
// give the same windows on both runners; idleness off, a limited delay, no
// watermarks and a bounded Read are not. (Before: an idle partition
// followed the wall clock less its bound, and a window kafkastreams holds
// fired on Prism 1.6 s after its end.)
func TestIdlenessRefusedOffKafkastreams(t *testing.T) {
	for _, tc := range []struct {
		opts    []Option
		refused bool
	}{
		{nil, true},
		{[]Option{WithIdleness(3 * time.Second)}, true},
		{[]Option{WithMonotonousTimestamps(), WithIdleness(time.Minute)}, true},
		{[]Option{WithIdleness(-1)}, false},
		{[]Option{WithLimitedDelay(time.Second)}, false},
		{[]Option{WithNoWatermarks()}, false},
		{[]Option{Bounded()}, false},
	} {
		c := newConfig([]string{"t"}, tc.opts)
		e := newWatermarkEstimator(c, WatermarkState{Watermark: int64(mtime.MinTimestamp)})
		if tc.refused {
			// At the job's start, before any broker is asked.
			if _, serr := (&unboundedReadFn{Config: c}).SplitRestriction(nil, Restriction{Partition: AllPartitions, End: NoEnd}); !errors.Is(serr, ErrIdlenessNotSame) {
				t.Errorf("%+v: SplitRestriction: %v, want ErrIdlenessNotSame", c.Watermark, serr)
			}
		}
		if got := e.err != nil; got != tc.refused {
			t.Errorf("%+v: refused %v, want %v (%v)", c.Watermark, got, tc.refused, e.err)
			continue
		}
		if tc.refused && (!errors.Is(e.err, ErrIdlenessNotSame) || !strings.Contains(e.err.Error(), "WithLimitedDelay") || !strings.Contains(e.err.Error(), "WithIdleness(-1)")) {
			t.Errorf("%+v: error %q does not name WithLimitedDelay and WithIdleness(-1)", c.Watermark, e.err)
		}
	}
}

package kafkasource

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// refPartition is the dumb model of a Partition: it keeps every record and
// recomputes everything from scratch with big integers, restating each
// rule of doc.go without the implementation's shortcuts (the ⌈·⌉ of the
// bound, the int64 overflow argument, Sub's saturation).
type refPartition struct {
	s          Strategy
	assignedAt time.Time
	ts         []int64 // event times as given, unclamped
	nows       []time.Time
}

var (
	bigMin = big.NewInt(int64(mtime.MinTimestamp))
	bigMax = big.NewInt(int64(mtime.MaxTimestamp))
	bigMs  = big.NewInt(int64(time.Millisecond))
)

// bigClamp returns x within [mtime.MinTimestamp, mtime.MaxTimestamp].
func bigClamp(x *big.Int) mtime.Time {
	switch {
	case x.Cmp(bigMin) < 0:
		return mtime.MinTimestamp
	case x.Cmp(bigMax) > 0:
		return mtime.MaxTimestamp
	}
	return mtime.Time(x.Int64())
}

// refValid restates Validate's rules as one predicate.
func refValid(s Strategy) bool {
	kindOK := s.Kind == BoundedOutOfOrderness || s.Kind == Monotonous || s.Kind == NoWatermarks || s.Kind == LimitedDelay
	nonNeg := s.MaxOutOfOrderness >= 0 && s.Idleness >= 0 && s.MaxDrift >= 0
	boundOK := s.Kind == BoundedOutOfOrderness || s.Kind == LimitedDelay || s.MaxOutOfOrderness == 0
	driftOK := s.AlignmentGroup != "" || s.MaxDrift == 0
	alignOK := s.AlignmentGroup == "" || (s.Idleness > 0 && s.Kind != NoWatermarks)
	limitedOK := s.Kind != LimitedDelay || (s.Idleness == 0 && s.AlignmentGroup == "")
	return kindOK && nonNeg && boundOK && driftOK && alignOK && limitedOK
}

// watermark: the highest clamped event time, less the bound in ms (real
// division, rounded so as never to pass max − bound), clamped.
func (r *refPartition) watermark() mtime.Time {
	if len(r.ts) == 0 || r.s.Kind == NoWatermarks {
		return mtime.MinTimestamp
	}
	hi := mtime.MinTimestamp
	for _, t := range r.ts {
		hi = max(hi, bigClamp(big.NewInt(t)))
	}
	x := big.NewInt(int64(hi))
	x.Mul(x, bigMs) // in ns
	switch r.s.Kind {
	case BoundedOutOfOrderness, LimitedDelay:
		x.Sub(x, big.NewInt(int64(r.s.MaxOutOfOrderness)))
	case Monotonous:
		x.Sub(x, bigMs)
	}
	// floor(x / 1 ms): the largest whole ms not after max − bound (Div is
	// Euclidean division: the floor for a positive divisor).
	return bigClamp(new(big.Int).Div(x, bigMs))
}

// watermarkAt restates WatermarkAt with big integers: for LimitedDelay,
// with n the wall clock in ms, d the bound in ns and hi the highest clamped
// event time (none before a record), n − d if hi > n or (caught up and
// (no record or n − d > hi in ns)), else hi − d, rounded down to whole ms
// and clamped; the other kinds' watermark otherwise.
func (r *refPartition) watermarkAt(now time.Time, caughtUp bool) mtime.Time {
	if r.s.Kind != LimitedDelay {
		return r.watermark()
	}
	n := big.NewInt(now.UnixMilli())
	n.Mul(n, bigMs)
	n.Sub(n, big.NewInt(int64(r.s.MaxOutOfOrderness))) // n − d, ns
	nMinusD := bigClamp(new(big.Int).Div(n, bigMs))
	if len(r.ts) == 0 {
		if caughtUp {
			return nMinusD
		}
		return mtime.MinTimestamp
	}
	hi := mtime.MinTimestamp
	for _, t := range r.ts {
		hi = max(hi, bigClamp(big.NewInt(t)))
	}
	hiNs := new(big.Int).Mul(big.NewInt(int64(hi)), bigMs)
	if int64(hi) > now.UnixMilli() || caughtUp && n.Cmp(hiNs) > 0 {
		return nMinusD
	}
	return r.watermark()
}

// activity: the latest of the assignment and every record's now.
func (r *refPartition) activity() time.Time {
	a := r.assignedAt
	for _, n := range r.nows {
		if n.After(a) {
			a = n
		}
	}
	return a
}

func (r *refPartition) idle(now time.Time) bool {
	return r.s.Idleness > 0 && !now.Before(r.activity().Add(r.s.Idleness))
}

// randomTS returns an event time near base, or now and then one at or
// beyond Beam's range.
func randomTS(rng *rand.Rand, base int64) int64 {
	switch rng.IntN(20) {
	case 0:
		return int64(mtime.MinTimestamp) + rng.Int64N(3) - 1
	case 1:
		return int64(mtime.MaxTimestamp) + rng.Int64N(3) - 1
	case 2:
		return []int64{math.MinInt64, math.MaxInt64}[rng.IntN(2)]
	case 3:
		return int64(mtime.MinTimestamp) + rng.Int64N(100_000)
	case 4:
		return int64(mtime.MaxTimestamp) - rng.Int64N(100_000)
	}
	return base + rng.Int64N(60_000) - 40_000
}

func randomDuration(rng *rand.Rand) time.Duration {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return time.Duration(rng.Int64N(3_000_000)) // sub-ms and a few ms
	case 2:
		return math.MaxInt64
	case 3:
		return -time.Duration(rng.Int64N(int64(time.Second)) + 1)
	}
	return time.Duration(rng.Int64N(60)+1) * time.Second / time.Duration(rng.IntN(4)+1)
}

func randomStrategy(rng *rand.Rand) Strategy {
	s := Strategy{Kind: Kind(rng.IntN(5))} // 4 is invalid
	if s.Kind == BoundedOutOfOrderness || s.Kind == LimitedDelay || rng.IntN(8) == 0 {
		s.MaxOutOfOrderness = randomDuration(rng)
	}
	if rng.IntN(4) != 0 && (s.Kind != LimitedDelay || rng.IntN(8) == 0) {
		s.Idleness = randomDuration(rng)
		if s.Idleness == math.MaxInt64 {
			s.Idleness = time.Hour
		}
	}
	if rng.IntN(3) == 0 && (s.Kind != LimitedDelay || rng.IntN(8) == 0) {
		s.AlignmentGroup = "g"
		s.MaxDrift = randomDuration(rng)
	}
	return s
}

// TestPropertyAgainstReference feeds random record sequences (out of
// order, with repeated and extreme event times, wall-clock reads that
// sometimes go back) to a Partition and to refPartition and compares the
// watermark, the monotonicity of the watermark, idleness at random
// instants, IdleAt and the event times after every record.
func TestPropertyAgainstReference(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 200
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xa11))
		s := randomStrategy(rng)
		at := epoch.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		p, err := NewPartition(s, at)
		if (err == nil) != refValid(s) {
			t.Fatalf("seed %d: NewPartition(%+v) = %v, reference valid=%v", seed, s, err, refValid(s))
		}
		if err != nil {
			continue
		}
		ref := &refPartition{s: s, assignedAt: at}
		base := rng.Int64N(1 << 40)
		now := at.Add(-time.Second)
		prev := p.Watermark()
		if prev != mtime.MinTimestamp {
			t.Fatalf("seed %d: watermark before any record %d", seed, prev)
		}
		for i := range 40 {
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d record %d (%+v, records %v): %s", seed, i, s, ref.ts, fmt.Sprintf(format, args...))
			}
			// Probe idleness before the record, at a random instant.
			probe := now.Add(time.Duration(rng.Int64N(int64(2*time.Minute))) - 10*time.Second)
			if got, want := p.Idle(probe), ref.idle(probe); got != want {
				fail("Idle(%v after activity) = %v, reference %v", probe.Sub(ref.activity()), got, want)
			}
			now = now.Add(time.Duration(rng.Int64N(int64(20*time.Second))) - 2*time.Second)
			ts := randomTS(rng, base)
			base += rng.Int64N(2000)
			p.Observe(mtime.Time(ts), now)
			ref.ts, ref.nows = append(ref.ts, ts), append(ref.nows, now)

			wm := p.Watermark()
			if want := ref.watermark(); wm != want {
				fail("Watermark = %d, reference %d", wm, want)
			}
			if wm < prev {
				fail("watermark went back %d -> %d", prev, wm)
			}
			prev = wm
			if p.Idle(now) {
				fail("idle right after a record at the same now")
			}
			if got, want := p.LastActivity(), ref.activity(); !got.Equal(want) {
				fail("LastActivity = %v, reference %v", got, want)
			}
			at, ok := p.IdleAt()
			if ok != (s.Idleness > 0) || (ok && !at.Equal(ref.activity().Add(s.Idleness))) {
				fail("IdleAt = %v %v", at, ok)
			}
			if ok && (p.Idle(at.Add(-1)) || !p.Idle(at)) {
				fail("not idle exactly from IdleAt %v", at)
			}
			if last, ok := p.LastEventTime(); !ok || last != bigClamp(big.NewInt(ts)) {
				fail("LastEventTime = %d %v, want clamp(%d)", last, ok, ts)
			}
			// WatermarkAt at a random instant around the event times
			// (the wall clock and the event times share base here).
			clock := time.UnixMilli(base + rng.Int64N(120_000) - 60_000)
			for _, cu := range []bool{false, true} {
				if got, want := p.WatermarkAt(clock, cu), ref.watermarkAt(clock, cu); got != want {
					fail("WatermarkAt(%d, caughtUp %v) = %d, reference %d", clock.UnixMilli(), cu, got, want)
				}
			}
		}
	}
}

// TestAlignAgainstReference compares Align with a brute-force restatement
// on random groups of partitions with random records and clocks.
func TestAlignAgainstReference(t *testing.T) {
	for seed := range 1000 {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xa1))
		group := map[string]*Partition{}
		for i := range 1 + rng.IntN(5) {
			s := Strategy{
				Kind:           Kind(rng.IntN(2)),
				Idleness:       time.Duration(1+rng.IntN(10)) * time.Second,
				AlignmentGroup: "g",
				MaxDrift:       time.Duration(rng.Int64N(int64(5 * time.Second))),
			}
			if s.Kind == BoundedOutOfOrderness {
				s.MaxOutOfOrderness = time.Duration(rng.IntN(3)) * time.Second
			}
			p, err := NewPartition(s, epoch.Add(time.Duration(rng.IntN(5))*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for range rng.IntN(4) {
				p.Observe(mtime.Time(randomTS(rng, 1_000_000)), epoch.Add(time.Duration(rng.Int64N(int64(20*time.Second)))))
			}
			group[fmt.Sprintf("p%d", i)] = p
		}
		now := epoch.Add(time.Duration(rng.Int64N(int64(30 * time.Second))))
		a, err := Align(group, now)
		if err != nil {
			t.Fatal(err)
		}
		// Reference: the counting members' watermarks, sorted; the first
		// is the minimum.
		var counting []mtime.Time
		for _, p := range group {
			if _, had := p.LastEventTime(); had && !p.Idle(now) {
				counting = append(counting, p.Watermark())
			}
		}
		slices.Sort(counting)
		if a.HasMin != (len(counting) > 0) || (a.HasMin && a.Min != counting[0]) {
			t.Fatalf("seed %d: Min %d %v, counting %v", seed, a.Min, a.HasMin, counting)
		}
		for k, p := range group {
			m := a.Members[k]
			_, had := p.LastEventTime()
			want := false
			if a.HasMin && had {
				d := new(big.Int).Sub(big.NewInt(int64(p.Watermark())), big.NewInt(int64(a.Min)))
				d.Mul(d, bigMs)
				want = d.Cmp(big.NewInt(int64(p.Strategy().MaxDrift))) > 0
			}
			if m.Held != want {
				t.Fatalf("seed %d: %s held=%v, reference %v (%+v, min %d)", seed, k, m.Held, want, m, a.Min)
			}
		}
		if len(counting) > 0 {
			// The member at the minimum is never held: the group progresses.
			for k, m := range a.Members {
				if m.Counts && m.Watermark == a.Min && m.Held {
					t.Fatalf("seed %d: %s at the minimum is held", seed, k)
				}
			}
		}
	}
}

// TestAlignEmptyGroup: an empty group has no minimum and holds nothing.
func TestAlignEmptyGroup(t *testing.T) {
	for _, g := range []map[string]*Partition{nil, {}} {
		a, err := Align(g, epoch)
		if err != nil || a.HasMin || len(a.Members) != 0 || a.Held() != nil {
			t.Fatalf("Align(%v) = %+v, %v", g, a, err)
		}
	}
}

// TestErrorsWrapOneSentinel: every error wraps exactly one sentinel.
func TestErrorsWrapOneSentinel(t *testing.T) {
	sentinels := []error{ErrUnknownKind, ErrNegativeDuration, ErrBoundWithoutBounded,
		ErrAlignmentWithoutIdleness, ErrAlignmentWithoutWatermarks, ErrDriftWithoutGroup,
		ErrNotAligned, ErrMixedGroups, ErrIdlenessWithLimitedDelay, ErrLimitedDelayAligned}
	for _, tc := range []struct {
		s    Strategy
		want error
	}{
		{Strategy{Kind: 9}, ErrUnknownKind},
		{Strategy{Idleness: -1}, ErrNegativeDuration},
		{Strategy{Kind: Monotonous, MaxOutOfOrderness: 1}, ErrBoundWithoutBounded},
		{Strategy{AlignmentGroup: "g"}, ErrAlignmentWithoutIdleness},
		{Strategy{Kind: NoWatermarks, AlignmentGroup: "g", Idleness: 1}, ErrAlignmentWithoutWatermarks},
		{Strategy{MaxDrift: 1}, ErrDriftWithoutGroup},
		{Strategy{Kind: LimitedDelay, Idleness: 1}, ErrIdlenessWithLimitedDelay},
		{Strategy{Kind: LimitedDelay, AlignmentGroup: "g"}, ErrLimitedDelayAligned},
	} {
		err := tc.s.Validate()
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		if n != 1 || !errors.Is(err, tc.want) {
			t.Errorf("Validate(%+v) = %v, want only %v", tc.s, err, tc.want)
		}
	}
}

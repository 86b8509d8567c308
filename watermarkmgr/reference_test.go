package watermarkmgr

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// refManager is the dumb reference implementation of Manager: a map of
// partitions scanned in full on every Advance (O(P)), written straight from
// the rules of seed 000 and DESIGN.md "Watermarks", sharing no code with
// manager.go. The property test, the fuzzer and the baseline benchmark
// compare against it.
type refManager struct {
	total int32
	parts map[int32]refPart
	out   mtime.Time
	// holdLastWhenAllIdle switches the all-idle rule to the rejected
	// alternative "hold at the last value", to show its order dependence.
	holdLastWhenAllIdle bool
}

type refPart struct {
	wm   mtime.Time
	idle bool
}

func newRef() *refManager {
	return &refManager{parts: map[int32]refPart{}, out: mtime.MinTimestamp}
}

func (r *refManager) observe(p int32, wm mtime.Time, total int32, idle bool) error {
	if total < 1 {
		return ErrInvalidTotal
	}
	if total > 1<<20 {
		return ErrTotalTooLarge
	}
	if !(0 <= p && p < total) {
		return ErrPartitionOutOfRange
	}
	if wm < mtime.MinTimestamp || wm > mtime.MaxTimestamp {
		return ErrWatermarkOutOfRange
	}
	if total > r.total {
		r.total = total // only grows: a smaller total is a stale report
	}
	old, ok := r.parts[p]
	if ok && old.wm > wm {
		wm = old.wm
	}
	r.parts[p] = refPart{wm: wm, idle: idle}
	return nil
}

func (r *refManager) held() bool { return r.total == 0 || int32(len(r.parts)) < r.total }

func (r *refManager) advance() mtime.Time {
	if r.held() {
		return r.out
	}
	// A partition is idle, done (not idle, at the end of time: its bounded
	// read ended) or live; done ones neither hold nor lift.
	lo, hiIdle, anyLive, anyIdle := mtime.MaxTimestamp, mtime.MinTimestamp, false, false
	for _, s := range r.parts {
		switch {
		case s.idle:
			anyIdle = true
			hiIdle = max(hiIdle, s.wm)
		case s.wm < mtime.MaxTimestamp:
			anyLive = true
			lo = min(lo, s.wm)
		}
	}
	switch {
	case anyLive:
		r.out = max(r.out, lo)
	case !anyIdle:
		r.out = mtime.MaxTimestamp // every partition done
	case !r.holdLastWhenAllIdle:
		r.out = max(r.out, hiIdle)
	}
	return r.out
}

func (r *refManager) snapshot() Snapshot {
	s := Snapshot{Total: r.total, Watermark: r.out, Held: r.held(), MinPartition: -1}
	anyLive, anyIdle := false, false
	for p := int32(0); p < r.total; p++ {
		st, ok := r.parts[p]
		ps := PartitionState{Partition: p, Watermark: mtime.MinTimestamp}
		if ok {
			ps.Reported, ps.Watermark, ps.Idle = true, st.wm, st.idle
			anyIdle = anyIdle || st.idle
			anyLive = anyLive || !st.idle && st.wm < mtime.MaxTimestamp
			if !st.idle {
				if s.MinPartition < 0 || st.wm < r.parts[s.MinPartition].wm {
					s.MinPartition = p
				}
			}
		} else {
			s.Missing = append(s.Missing, p)
		}
		s.Partitions = append(s.Partitions, ps)
	}
	s.AllIdle = !s.Held && !anyLive && anyIdle
	if s.Held || s.AllIdle {
		s.MinPartition = -1
	}
	return s
}

// normalize makes empty slices nil so that DeepEqual compares content.
func normalize(s Snapshot) Snapshot {
	if len(s.Missing) == 0 {
		s.Missing = nil
	}
	if len(s.Partitions) == 0 {
		s.Partitions = nil
	}
	return s
}

func diffSnapshots(got, want Snapshot) error {
	got, want = normalize(got), normalize(want)
	if reflect.DeepEqual(got, want) {
		return nil
	}
	return fmt.Errorf("got  %+v\nwant %+v", got, want)
}

// report is one Observe call.
type report struct {
	p     int32
	wm    mtime.Time
	total int32
	idle  bool
}

func (r report) String() string {
	s := fmt.Sprintf("p=%d wm=%s total=%d", r.p, fmtWM(r.wm), r.total)
	if r.idle {
		s += " idle"
	}
	return s
}

// sentinels lists every error Observe may wrap.
var sentinels = []error{ErrInvalidTotal, ErrTotalTooLarge, ErrPartitionOutOfRange, ErrWatermarkOutOfRange}

// sameError reports whether got and want (a bare sentinel or nil) agree.
func sameError(got, want error) bool {
	if (got == nil) != (want == nil) {
		return false
	}
	if want == nil {
		return true
	}
	n := 0
	for _, s := range sentinels {
		if errors.Is(got, s) {
			n++
		}
	}
	return n == 1 && errors.Is(got, want)
}

// randomBatch returns the reports of one batch: distinct valid partitions
// under one total (which differs from cur with probability 1/8), watermarks
// near base (so that lower reports, ties and regressions of a new partition
// happen), idle flips, and with probability 1/10 per report an invalid one.
func randomBatch(rng *rand.Rand, cur int32, base mtime.Time) (total int32, batch []report) {
	total = cur
	if total == 0 || rng.IntN(8) == 0 {
		total = 1 + rng.Int32N(9)
	}
	k := rng.IntN(int(total) + 1)
	for _, p := range rng.Perm(int(total))[:k] {
		wm := base + mtime.Time(rng.IntN(40)-15)
		switch rng.IntN(30) {
		case 0:
			wm = mtime.MinTimestamp
		case 1:
			wm = mtime.MaxTimestamp
		}
		batch = append(batch, report{p: int32(p), wm: wm, total: total, idle: rng.IntN(4) == 0})
	}
	for i := rng.IntN(3); i > 0; i-- {
		if rng.IntN(3) != 0 {
			continue
		}
		bad := report{p: rng.Int32N(total), wm: base, total: total}
		switch rng.IntN(6) {
		case 0:
			bad.p = total + rng.Int32N(3)
		case 1:
			bad.p = -1 - rng.Int32N(3)
		case 2:
			bad.total = -rng.Int32N(3)
		case 3:
			bad.total = MaxSourcePartitions + 1
		case 4:
			bad.wm = mtime.MinTimestamp - 1
		case 5:
			bad.wm = mtime.MaxTimestamp + 1
		}
		batch = append(batch, bad)
	}
	rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
	return total, batch
}

// TestPropertyAgainstReference runs random batches of reports through
// Manager and refManager and checks identical errors and snapshots after
// every Advance. A second Manager gets every batch in another random order
// and must end each batch in the same state (invariant 5 of doc.go); a third
// uses ObserveAndAdvance per report against the reference advanced per
// report; every failed report must leave the snapshot unchanged.
func TestPropertyAgainstReference(t *testing.T) {
	seeds, batches := 300, 60
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
		m, shuffled, single := New(), New(), New()
		ref, refSingle := newRef(), newRef()
		base := mtime.Time(rng.IntN(1000))
		var total int32
		for b := range batches {
			var batch []report
			total, batch = randomBatch(rng, total, base)
			base += mtime.Time(rng.IntN(10))
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d batch %d %v: %s", seed, b, batch, fmt.Sprintf(format, args...))
			}
			for _, r := range batch {
				before := m.Snapshot()
				want := ref.observe(r.p, r.wm, r.total, r.idle)
				got := m.Observe(r.p, r.wm, r.total, r.idle)
				if !sameError(got, want) {
					fail("Observe(%v) = %v, reference %v", r, got, want)
				}
				if got != nil {
					if err := diffSnapshots(m.Snapshot(), before); err != nil {
						fail("state changed by failed Observe(%v):\n%v", r, err)
					}
				}
				wantErr := refSingle.observe(r.p, r.wm, r.total, r.idle)
				refSingle.advance()
				if _, err := single.ObserveAndAdvance(r.p, r.wm, r.total, r.idle); !sameError(err, wantErr) {
					fail("ObserveAndAdvance(%v) = %v, reference %v", r, err, wantErr)
				}
				if err := diffSnapshots(single.Snapshot(), refSingle.snapshot()); err != nil {
					fail("per-report after %v:\n%v", r, err)
				}
			}
			perm := rng.Perm(len(batch))
			for _, i := range perm {
				r := batch[i]
				if !sameError(shuffled.Observe(r.p, r.wm, r.total, r.idle), ref.observeErrOnly(r)) {
					fail("shuffled Observe(%v) error differs", r)
				}
			}
			if got, want := m.Advance(), ref.advance(); got != want {
				fail("Advance = %s, reference %s", fmtWM(got), fmtWM(want))
			}
			shuffled.Advance()
			if err := diffSnapshots(m.Snapshot(), ref.snapshot()); err != nil {
				fail("after Advance:\n%v", err)
			}
			if err := diffSnapshots(shuffled.Snapshot(), m.Snapshot()); err != nil {
				fail("batch in order %v gives a different result:\n%v", perm, err)
			}
		}
	}
}

// observeErrOnly returns the error the reference gives for r without
// changing it: validity of a report does not depend on state.
func (r *refManager) observeErrOnly(rep report) error {
	c := &refManager{parts: map[int32]refPart{}}
	return c.observe(rep.p, rep.wm, rep.total, rep.idle)
}

// TestAllIdleRuleIsOrderIndependent shows why Advance uses the MAX over the
// partitions' watermarks when every partition is idle: with "hold at the
// last value" the result depends on which of A=5 and B=10 goes idle first
// (A first → 10, B first → 5), with MAX it is 10 either way.
func TestAllIdleRuleIsOrderIndependent(t *testing.T) {
	const a, b = 0, 1
	steps := func(first, second int32) []report {
		return []report{
			{p: a, wm: 5, total: 2},
			{p: b, wm: 10, total: 2},
			{p: first, wm: map[int32]mtime.Time{a: 5, b: 10}[first], total: 2, idle: true},
			{p: second, wm: map[int32]mtime.Time{a: 5, b: 10}[second], total: 2, idle: true},
		}
	}
	for _, tc := range []struct {
		name          string
		first, second int32
		holdLast      mtime.Time
		maxRule       mtime.Time
	}{
		{"A idles first", a, b, 10, 10},
		{"B idles first", b, a, 5, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := newRef()
			ref.holdLastWhenAllIdle = true
			m := New()
			for _, r := range steps(tc.first, tc.second) {
				if err := ref.observe(r.p, r.wm, r.total, r.idle); err != nil {
					t.Fatal(err)
				}
				ref.advance()
				if _, err := m.ObserveAndAdvance(r.p, r.wm, r.total, r.idle); err != nil {
					t.Fatal(err)
				}
			}
			if got := ref.out; got != tc.holdLast {
				t.Errorf("hold-at-last-value rule: %s, want %s", fmtWM(got), fmtWM(tc.holdLast))
			}
			if got := m.Watermark(); got != tc.maxRule {
				t.Errorf("Manager (max rule): %s, want %s", fmtWM(got), fmtWM(tc.maxRule))
			}
			if !m.AllIdle() {
				t.Errorf("AllIdle = false, want true")
			}
		})
	}
}

package watermarkmgr

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// refAggregator is the dumb reference of Aggregator: one refManager per
// upstream and Advance's formula written out from its sentence (DESIGN.md
// "Watermarks": an upstream whose every task is idle is left out of the
// minimum; when no upstream is live the watermark holds at the max over the
// idle ones; the end of time only when every upstream is done).
type refAggregator struct {
	ups map[string]*refManager
	out mtime.Time
}

func newRefAggregator(names []string) *refAggregator {
	r := &refAggregator{ups: map[string]*refManager{}, out: mtime.MinTimestamp}
	for _, n := range names {
		r.ups[n] = newRef()
	}
	return r
}

func (r *refAggregator) advance() (mtime.Time, bool) {
	var live, idle []mtime.Time
	for _, u := range r.ups {
		w := u.advance()
		s := u.snapshot()
		switch {
		case w == mtime.MaxTimestamp:
			// done: in neither
		case s.AllIdle:
			idle = append(idle, w)
		default:
			live = append(live, w)
		}
	}
	var c mtime.Time
	switch {
	case len(live) > 0:
		c = mtime.MaxTimestamp
		for _, w := range live {
			c = min(c, w)
		}
	case len(idle) > 0:
		c = mtime.MinTimestamp
		for _, w := range idle {
			c = max(c, w)
		}
	default:
		c = mtime.MaxTimestamp
	}
	r.out = max(r.out, c)
	return r.out, len(live) == 0 && len(idle) > 0
}

// TestAggregatorAgainstReference runs random batches of reports of three
// upstream stages (idle flips, the start and the end of time, total
// changes) through Aggregator and refAggregator, and checks after every
// Advance: the same watermark and idle flag; the watermark never
// decreases; a batch given in another order ends in the same state; and
// the watermark is at the end of time only when every upstream is done or
// an idle one is there (never because an idle upstream was left out).
func TestAggregatorAgainstReference(t *testing.T) {
	names := []string{"a", "b", "c"}
	seeds, batches := 300, 60
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xa66))
		agg, shuffled := NewAggregator(names...), NewAggregator(names...)
		ref := newRefAggregator(names)
		totals := map[string]int32{}
		base := mtime.Time(rng.IntN(1000))
		prev := mtime.MinTimestamp
		for b := range batches {
			type upReport struct {
				up string
				r  report
			}
			var batch []upReport
			for _, n := range names {
				if rng.IntN(3) == 0 {
					continue
				}
				var rs []report
				totals[n], rs = randomBatch(rng, totals[n], base)
				for _, r := range rs {
					if r.total > 0 && r.total <= MaxSourcePartitions && r.p >= 0 && r.p < r.total && r.wm >= mtime.MinTimestamp && r.wm <= mtime.MaxTimestamp {
						batch = append(batch, upReport{n, r})
					}
				}
			}
			base += mtime.Time(rng.IntN(10))
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d batch %d %v: %s", seed, b, batch, fmt.Sprintf(format, args...))
			}
			for _, x := range batch {
				if err := agg.Observe(x.up, x.r.p, x.r.wm, x.r.total, x.r.idle); err != nil {
					fail("Observe(%s, %v): %v", x.up, x.r, err)
				}
				if err := ref.ups[x.up].observe(x.r.p, x.r.wm, x.r.total, x.r.idle); err != nil {
					fail("reference observe(%s, %v): %v", x.up, x.r, err)
				}
			}
			for _, i := range rng.Perm(len(batch)) {
				x := batch[i]
				if err := shuffled.Observe(x.up, x.r.p, x.r.wm, x.r.total, x.r.idle); err != nil {
					fail("shuffled Observe(%s, %v): %v", x.up, x.r, err)
				}
			}
			got, want := agg.Advance(), shuffled.Advance()
			wantRef, wantIdle := ref.advance()
			if got != wantRef || agg.AllIdle() != wantIdle {
				fail("Advance = %s idle=%v, reference %s idle=%v", fmtWM(got), agg.AllIdle(), fmtWM(wantRef), wantIdle)
			}
			if got != want || agg.AllIdle() != shuffled.AllIdle() {
				fail("another order gives %s, this one %s", fmtWM(want), fmtWM(got))
			}
			if got < prev {
				fail("watermark went back from %s to %s", fmtWM(prev), fmtWM(got))
			}
			if got == mtime.MaxTimestamp && prev < mtime.MaxTimestamp {
				for _, n := range names {
					if m := agg.mgrs[n]; m.Watermark() < mtime.MaxTimestamp {
						fail("the end of time reached while upstream %s is at %s (held=%v idle=%v): %+v", n, fmtWM(m.Watermark()), m.Held(), m.AllIdle(), agg.Snapshot())
					}
				}
			}
			prev = got
		}
	}
}

// TestIdleUpstreamNeverHolds is the rule of apache/beam#33815 on its own: an
// upstream that never gets a record and idles out at the start of time does
// not hold a live one, whichever order the reports come in.
func TestIdleUpstreamNeverHolds(t *testing.T) {
	for _, idleFirst := range []bool{true, false} {
		a := NewAggregator("a", "b")
		reports := []func(){
			func() { _ = a.Observe("b", 0, mtime.MinTimestamp, 1, true) },
			func() {
				_ = a.Observe("a", 0, 129_000, 2, false)
				_ = a.Observe("a", 1, 131_000, 2, false)
			},
		}
		if !idleFirst {
			reports[0], reports[1] = reports[1], reports[0]
		}
		for _, r := range reports {
			r()
			a.Advance()
		}
		if got := a.Watermark(); got != 129_000 {
			t.Errorf("idle first=%v: watermark %s, want 129000 (b, all idle at the start of time, is left out)", idleFirst, fmtWM(got))
		}
		if a.AllIdle() {
			t.Errorf("idle first=%v: AllIdle with a live upstream", idleFirst)
		}
	}
}

package watermarkmgr

import (
	"errors"
	"math"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// decodeOps turns fuzz bytes into a sequence of reports and Advance calls
// (nil entries). Each op takes 4 bytes:
//
//	b0: bit 7 idle; b0&7 == 7 means Advance instead of a report;
//	    (b0>>3)&15 picks a special watermark: 0 min, 1 max, 2 min-1, 3 max+1
//	b1: partition = b1%12 - 1, in [-1, 10]
//	b2: total = b2%9 in [0, 8] for b2 < 248; 248..251: -1, 1<<20, 1<<20+1,
//	    MaxInt32; 252..254: 1; 255: 1<<20
//	b3: watermark = base + int8(b3), where base grows by 3 per op, so that
//	    reports are mostly rising with some lower ones
func decodeOps(data []byte) []*report {
	var ops []*report
	base := mtime.Time(1000)
	for ; len(data) >= 4; data = data[4:] {
		b0, b1, b2, b3 := data[0], data[1], data[2], data[3]
		base += 3
		if b0&7 == 7 {
			ops = append(ops, nil)
			continue
		}
		r := &report{p: int32(b1%12) - 1, idle: b0&0x80 != 0, wm: base + mtime.Time(int8(b3))}
		switch (b0 >> 3) & 15 {
		case 0:
			r.wm = mtime.MinTimestamp
		case 1:
			r.wm = mtime.MaxTimestamp
		case 2:
			r.wm = mtime.MinTimestamp - 1
		case 3:
			r.wm = mtime.MaxTimestamp + 1
		}
		switch {
		case b2 < 248:
			r.total = int32(b2 % 9)
		case b2 == 248:
			r.total = -1
		case b2 == 249:
			r.total = MaxSourcePartitions
		case b2 == 250:
			r.total = MaxSourcePartitions + 1
		case b2 == 251:
			r.total = math.MaxInt32
		case b2 == 255:
			// Not a partition near the top: growing to 1<<20 partitions takes
			// milliseconds, which stalls the fuzzer while it minimizes such
			// an input. TestLargestPartition covers that path.
			r.total = MaxSourcePartitions
		default:
			r.total = 1
		}
		ops = append(ops, r)
	}
	return ops
}

// FuzzManager feeds decoded report sequences to a Manager and checks the
// invariants that must hold whatever the input, plus agreement with the
// reference model. Run:
//
//	go test -run '^$' -fuzz=FuzzManager -fuzztime=60s -fuzzminimizetime=1000x ./watermarkmgr/
//
// -fuzzminimizetime matters: by default each new interesting input is
// minimized for up to 60s, during which no new input is tried (the run
// shows "0/sec").
//
// Note what is NOT invariant: "Watermark() <= min over the non-idle
// partitions" breaks, by design, whenever the min drops below the emitted
// value without the emitted value going back: an idle partition wakes up
// with an older watermark, a count increase adds a partition with an older
// watermark, or a partition reports for the first time after all were idle.
// What holds instead is that the emitted value only ever rises TO the
// candidate (then it equals the min, or the all-idle max, at that moment)
// and is never below the candidate after an Advance.
func FuzzManager(f *testing.F) {
	f.Add([]byte{})
	// p0 wm=base total=2; p1 total=2; advance.
	f.Add([]byte{0x40, 1, 2, 0, 0x40, 2, 2, 5, 7, 0, 0, 0})
	// all idle then one wakes up older.
	f.Add([]byte{0xc0, 1, 2, 50, 0xc0, 2, 2, 10, 7, 0, 0, 0, 0x40, 2, 2, 0x80, 7, 0, 0, 0})
	// count change up and down, invalid values, the bounds.
	f.Add([]byte{0x40, 1, 3, 0, 0x40, 2, 3, 0, 0x40, 3, 3, 0, 7, 0, 0, 0,
		0x40, 5, 5, 0, 7, 0, 0, 0, 0x40, 1, 1, 0, 7, 0, 0, 0,
		0x10, 1, 1, 0, 0x18, 1, 1, 0, 0x00, 1, 1, 0, 0x08, 1, 1, 0, 7, 0, 0, 0,
		0x40, 0, 3, 0, 0x40, 1, 0, 0, 0x40, 1, 248, 0, 0x40, 1, 250, 0, 0x40, 1, 251, 0,
		0x40, 1, 249, 0, 0x40, 3, 255, 0, 7, 0, 0, 0})
	f.Fuzz(runFuzzOps)
}

// runFuzzOps is the body of FuzzManager: one decoded sequence.
func runFuzzOps(t *testing.T, data []byte) {
	m, ref := New(), newRef()
	seen := map[mtime.Time]bool{mtime.MinTimestamp: true}
	for i, r := range decodeOps(data) {
		if r == nil {
			checkAdvance(t, i, m, ref, seen)
			continue
		}
		before := cheapState(m)
		var beforeSnap Snapshot
		small := m.Total() <= 64
		if small {
			beforeSnap = m.Snapshot()
		}
		err, want := m.Observe(r.p, r.wm, r.total, r.idle), ref.observe(r.p, r.wm, r.total, r.idle)
		if !sameError(err, want) {
			t.Fatalf("op %d Observe(%v) = %v, reference %v", i, r, err, want)
		}
		if err != nil {
			if after := cheapState(m); after != before {
				t.Fatalf("op %d failed Observe(%v) changed state %+v -> %+v", i, r, before, after)
			}
			if small {
				if d := diffSnapshots(m.Snapshot(), beforeSnap); d != nil {
					t.Fatalf("op %d failed Observe(%v) changed state:\n%v", i, r, d)
				}
			}
			if !errors.Is(err, want) {
				t.Fatalf("op %d: %v does not wrap %v", i, err, want)
			}
			continue
		}
		seen[r.wm] = true
		if m.Watermark() != before.wm {
			t.Fatalf("op %d Observe(%v) changed the emitted watermark", i, r)
		}
	}
	checkAdvance(t, -1, m, ref, seen)
}

type cheapSnapshot struct {
	wm                  mtime.Time
	total, minPartition int32
	held, allIdle       bool
}

func cheapState(m *Manager) cheapSnapshot {
	return cheapSnapshot{m.Watermark(), m.Total(), m.MinPartition(), m.Held(), m.AllIdle()}
}

// checkAdvance calls Advance and checks the invariants of doc.go against
// the Manager's own view and against the reference model.
func checkAdvance(t *testing.T, op int, m *Manager, ref *refManager, seen map[mtime.Time]bool) {
	t.Helper()
	out := m.Watermark()
	got, want := m.Advance(), ref.advance()
	if got != want {
		t.Fatalf("op %d Advance = %s, reference %s", op, fmtWM(got), fmtWM(want))
	}
	// Emitted monotone; only values that were reported (or the initial hold).
	if got < out {
		t.Fatalf("op %d watermark went back %s -> %s", op, fmtWM(out), fmtWM(got))
	}
	if !seen[got] {
		t.Fatalf("op %d watermark %s was never reported", op, fmtWM(got))
	}
	// Held iff no report, or some partition < total has not reported.
	if m.Held() != ref.held() {
		t.Fatalf("op %d Held = %v, reference %v", op, m.Held(), ref.held())
	}
	if m.Held() {
		if got != out {
			t.Fatalf("op %d watermark moved while held", op)
		}
		if m.MinPartition() != -1 || m.AllIdle() {
			t.Fatalf("op %d held but MinPartition=%d AllIdle=%v", op, m.MinPartition(), m.AllIdle())
		}
	} else {
		// Out' = MAX(Out, candidate).
		cand, allIdle := refCandidate(ref)
		if got != max(out, cand) {
			t.Fatalf("op %d Advance = %s, want MAX(%s, %s)", op, fmtWM(got), fmtWM(out), fmtWM(cand))
		}
		if m.AllIdle() != allIdle {
			t.Fatalf("op %d AllIdle = %v, want %v", op, m.AllIdle(), allIdle)
		}
		if mp := m.MinPartition(); allIdle != (mp == -1) {
			t.Fatalf("op %d MinPartition = %d with AllIdle=%v", op, mp, allIdle)
		} else if !allIdle && (ref.parts[mp].idle || ref.parts[mp].wm != cand) {
			t.Fatalf("op %d MinPartition = %d (%+v), candidate %s", op, mp, ref.parts[mp], fmtWM(cand))
		}
	}
	if m.Total() <= 64 {
		if d := diffSnapshots(m.Snapshot(), ref.snapshot()); d != nil {
			t.Fatalf("op %d after Advance:\n%v", op, d)
		}
	}
}

// refCandidate is the candidate of Advance's formula computed from the
// reference's partitions, and AllIdle: no partition live (not idle, below
// the end of time) and some idle.
func refCandidate(ref *refManager) (mtime.Time, bool) {
	lo, hiIdle, live, idle := mtime.MaxTimestamp, mtime.MinTimestamp, false, false
	for _, s := range ref.parts {
		switch {
		case s.idle:
			idle, hiIdle = true, max(hiIdle, s.wm)
		case s.wm < mtime.MaxTimestamp:
			live, lo = true, min(lo, s.wm)
		}
	}
	switch {
	case live:
		return lo, false
	case idle:
		return hiIdle, true
	}
	return mtime.MaxTimestamp, false // every partition done
}

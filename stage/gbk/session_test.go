package gbk

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// countingStore counts the value and meta records a Core writes: a value
// written twice was moved (absorb); a meta written at every attempt is a
// changelog record per (key, window) and attempt (compactedLater);
// unitSets counts the values of unit entries (layout.go).
type countingStore struct {
	*MemStore
	valueSets, metaSets, unitSets int
}

func (s *countingStore) Set(key, value []byte) error {
	switch key[0] {
	case prefixValue:
		s.valueSets++
	case prefixMeta:
		s.metaSets++
	case prefixUnit:
		s.unitSets++
	}
	return s.MemStore.Set(key, value)
}

// appendSession adds n in-order values of one key, each 1 ms after the
// previous, under sessions of gap 10 ms: every value extends the one
// session.
func appendSession(tb testing.TB, c *Core, n int) {
	tb.Helper()
	for i := 0; i < n; i++ {
		ts := mtime.Time(i)
		if _, err := c.Add(Element{Key: []byte("k"), Window: Window{Start: ts, End: ts + 10}, Timestamp: ts, Value: []byte(fmt.Sprint(i))}); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestSessionAppendMovesNoValues guards the fix of the quadratic session
// merge: an in-order value that extends a session of N values used to
// create an entry for the merged window and move all N values into it
// (1 000 values took 0.48 s, 4 000 took 7.0 s on the MemStore; a real
// session stage ran past the 10 s transaction timeout). Now the session
// keeps its values under its storage window and only the value added is
// written: N values, N value writes.
func TestSessionAppendMovesNoValues(t *testing.T) {
	const n = 4000
	st := &countingStore{MemStore: NewMemStore()}
	c := NewCore(Strategy{Kind: Sessions, Gap: 10, Combiner: EndOfWindow}, st)
	appendSession(t, c, n)
	if st.valueSets != n {
		t.Fatalf("%d values written for %d values added: values moved on merge", st.valueSets, n)
	}
	panes, err := c.Advance(mtime.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if len(panes) != 1 || panes[0].Window != (Window{Start: 0, End: n - 1 + 10}) || len(panes[0].Values) != n {
		t.Fatalf("panes %d, want one of [0,%d) with %d values", len(panes), n-1+10, n)
	}
	for i, v := range panes[0].Values {
		if !bytes.Equal(v, []byte(fmt.Sprint(i))) {
			t.Fatalf("value %d is %s: order lost", i, v)
		}
	}
	if st.Len() != 1 { // the watermark
		t.Fatalf("%d keys left after the session closed, want 1", st.Len())
	}
}

// TestSessionMergeMovesSmaller: when sessions merge, the one with the most
// values keeps them; only the others' values move, and the pane still
// lists the values by window, then arrival.
func TestSessionMergeMovesSmaller(t *testing.T) {
	st := &countingStore{MemStore: NewMemStore()}
	c := NewCore(Strategy{Kind: Sessions, Gap: 10, Combiner: EndOfWindow}, st)
	add := func(ts int, v string) {
		t.Helper()
		if _, err := c.Add(Element{Key: []byte("k"), Window: Window{Start: mtime.Time(ts), End: mtime.Time(ts + 10)}, Timestamp: mtime.Time(ts), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	add(0, "a0") // [0,10)
	add(2, "a1") // [0,12)
	for i := 0; i < 100; i++ {
		add(100+i, fmt.Sprint("b", i)) // [100,209)
	}
	add(50, "c0") // [50,60)
	add(55, "c1") // [50,65)
	// Reload: the storage windows come back from the store.
	c = NewCore(c.strat, st)
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	before := st.valueSets
	add(8, "d0")  // [0,18)
	add(16, "e0") // [0,26): 4 values
	add(30, "f0") // [30,40)
	add(38, "g0") // [30,48)
	add(47, "h0") // [47,57) bridges [30,48) and [50,65), 2 values each: c0, c1 move
	add(60, "i0") // [30,70)
	add(68, "j0")
	add(77, "k0")
	add(86, "l0") // [30,96): 9 values
	add(95, "m0") // [95,105) bridges [30,96) and [100,209): the 9 move before b0
	add(25, "n0") // [25,35) bridges [0,26) and [30,209): the 4 move before f0
	if got, want := st.valueSets-before, 11+2+9+4; got != want {
		t.Fatalf("%d value writes, want %d (11 added, 15 moved)", got, want)
	}
	panes, err := c.Advance(mtime.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range panes[0].Values {
		got = append(got, string(v))
	}
	want := []string{"a0", "a1", "d0", "e0", "f0", "g0", "c0", "c1", "h0", "i0", "j0", "k0", "l0"}
	for i := 0; i < 100; i++ {
		want = append(want, fmt.Sprint("b", i))
	}
	want = append(want, "m0", "n0")
	if len(panes) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d panes, values\n%v\nwant\n%v", len(panes), got, want)
	}
}

// BenchmarkSessionAppend: one key, N in-order values each extending the
// one session. ns/element should not grow with N (it grew linearly before
// sessions kept their values in place on merge).
func BenchmarkSessionAppend(b *testing.B) {
	for _, n := range []int{1000, 4000, 16000} {
		b.Run(fmt.Sprint("N=", n), func(b *testing.B) {
			for b.Loop() {
				c := NewCore(Strategy{Kind: Sessions, Gap: 10, Combiner: EndOfWindow}, NewMemStore())
				appendSession(b, c, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/element")
		})
	}
}

// TestSessionStoredWithoutStorageWindow: a session stored before metas had
// a storage window (values under the window itself, from sequence number
// 0) reloads, grows, and takes the values of an earlier session in front
// of its own (renumbering its values once).
func TestSessionStoredWithoutStorageWindow(t *testing.T) {
	st := NewMemStore()
	old := Window{Start: 100, End: 110}
	m := meta{Pending: 3, Total: 3, Seq: 3, MinTs: 100, MaxTs: 102}
	if err := st.Set(metaKey(old, []byte("k")), m.encode()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := st.Set(valueKey(old, []byte("k"), uint64(i)), []byte(fmt.Sprint("b", i))); err != nil {
			t.Fatal(err)
		}
	}
	strat := Strategy{Kind: Sessions, Gap: 10, Combiner: EndOfWindow}
	c := NewCore(strat, st)
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	add := func(ts int, v string) {
		t.Helper()
		if _, err := c.Add(Element{Key: []byte("k"), Window: Window{Start: mtime.Time(ts), End: mtime.Time(ts + 10)}, Timestamp: mtime.Time(ts), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	add(80, "a0")  // [80,90)
	add(89, "a1")  // [80,99)
	add(105, "b3") // [100,115): grows in place
	c = NewCore(strat, st)
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	add(98, "c0") // [98,108) bridges [80,99) and [100,115): a0, a1 go first
	c = NewCore(strat, st)
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	panes, err := c.Advance(mtime.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if len(panes) != 1 || panes[0].Window != (Window{Start: 80, End: 115}) {
		t.Fatalf("panes %+v, want one of [80,115)", panes)
	}
	if got, want := fmt.Sprintf("%s", panes[0].Values), "[a0 a1 b0 b1 b2 b3 c0]"; got != want {
		t.Fatalf("values %s, want %s", got, want)
	}
	if st.Len() != 1 {
		t.Fatalf("%d keys left, want the watermark only", st.Len())
	}
}

// TestSessionMergeCandidatesMatchScan: after each of 20 000 random adds
// (4 keys, gaps of 5-40 ms, timestamps out of order, the watermark moving
// and closing sessions), every key's sorted index holds pairwise disjoint
// windows in start order, and mergeCandidates of random probe windows
// gives what a scan of all the key's windows gives (the transitive
// overlap closure, the rule before the index was sorted).
func TestSessionMergeCandidatesMatchScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < 20; round++ {
		gap := mtime.Time(5 + rng.IntN(36))
		c := NewCore(Strategy{Kind: Sessions, Gap: int64(gap), Combiner: EndOfWindow}, NewMemStore())
		wm := mtime.Time(0)
		for i := 0; i < 1000; i++ {
			key := []byte(fmt.Sprint("k", rng.IntN(4)))
			ts := wm + mtime.Time(rng.IntN(400))
			if _, err := c.Add(Element{Key: key, Window: Window{Start: ts, End: ts + gap}, Timestamp: ts, Value: []byte{byte(i)}}); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(50) == 0 {
				wm += mtime.Time(rng.IntN(100))
				if _, err := c.Advance(wm); err != nil {
					t.Fatal(err)
				}
			}
			for k, kw := range c.keyWindows {
				for j := 1; j < len(kw); j++ {
					if a, b := kw[j-1].win, kw[j].win; a.Start >= b.Start || a.End > b.Start {
						t.Fatalf("round %d add %d: key %s's windows %v then %v: not disjoint in start order", round, i, k, a, b)
					}
				}
			}
			probe := Window{Start: wm + mtime.Time(rng.IntN(400)), End: 0}
			probe.End = probe.Start + mtime.Time(1+rng.IntN(60))
			got, gotE := c.mergeCandidates(key, probe)
			want, wantE := scanCandidates(c.keyWindows[string(key)], probe)
			if got != want || len(gotE) != len(wantE) {
				t.Fatalf("round %d add %d: mergeCandidates(%v) = %v with %d windows, the scan gives %v with %d", round, i, probe, got, len(gotE), want, len(wantE))
			}
			for j := range gotE {
				if gotE[j] != wantE[j] {
					t.Fatalf("round %d add %d: merged window %d is %v, the scan's %v", round, i, j, gotE[j].win, wantE[j].win)
				}
			}
		}
	}
}

// scanCandidates is mergeCandidates by a scan of every window to a fixed
// point, in window order.
func scanCandidates(kw keyWins, w Window) (Window, []*entry) {
	var out []*entry
	taken := map[Window]bool{}
	for changed := true; changed; {
		changed = false
		for _, e := range kw {
			if !taken[e.win] && (e.win == w || e.win.intersects(w)) {
				taken[e.win] = true
				out = append(out, e)
				w = w.span(e.win)
				changed = true
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].win.less(out[j].win) })
	return w, out
}

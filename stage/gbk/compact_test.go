package gbk

import (
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// sumValues is a MergeAccumulators of decimal ints, for the tests.
func sumValues(tb testing.TB, vals [][]byte) int {
	tb.Helper()
	sum := 0
	for _, v := range vals {
		n, err := strconv.Atoi(string(v))
		if err != nil {
			tb.Fatalf("value %q is not an int", v)
		}
		sum += n
	}
	return sum
}

// TestCompactionFiresTheSameSums: a core with compaction on (sessions,
// fixed, sliding or global windows), compacted (its values summed into
// one) at random attempt ends and reloaded from its store at random,
// fires the panes an uncompacted core fires on the same 600 random
// sequences (randomOps: late and early values, allowed lateness 0 or 5,
// the end of time; discarding or accumulating): the same keys, windows,
// timestamps and pane infos, and values with the same sum. It fails
// unless some compaction of each kind replaced values and some unit
// entry's value (layout.go) moved when an accumulating pane fired.
func TestCompactionFiresTheSameSums(t *testing.T) {
	replacedOf := map[WindowFnKind]int{}
	var materialized int64
	kinds := []WindowFnKind{Sessions, FixedWindows, SlidingWindows, GlobalWindows}
	for seed := int64(0); seed < 600; seed++ {
		rng := rand.New(rand.NewSource(seed))
		strat := Strategy{Kind: kinds[seed%4], AllowedLateness: int64(5 * rng.Intn(2)), Combiner: EndOfWindow, Accumulating: seed%8 >= 4}
		if strat.Kind == Sessions {
			strat.Gap = int64(3 + rng.Intn(8))
		}
		plain := NewCore(strat, NewMemStore())
		st := NewMemStore()
		comp := NewCore(strat, st)
		comp.SetCompacting(true)
		check := func(i int, want, got []Pane) {
			t.Helper()
			if len(want) != len(got) {
				t.Fatalf("seed %d op %d: %d panes, the uncompacted core fired %d", seed, i, len(got), len(want))
			}
			for j := range want {
				w, g := want[j], got[j]
				if string(w.Key) != string(g.Key) || w.Window != g.Window || w.Timestamp != g.Timestamp || w.Info != g.Info {
					t.Fatalf("seed %d op %d pane %d: %s %v ts %v %+v, the uncompacted core's %s %v ts %v %+v", seed, i, j, g.Key, g.Window, g.Timestamp, g.Info, w.Key, w.Window, w.Timestamp, w.Info)
				}
				if ws, gs := sumValues(t, w.Values), sumValues(t, g.Values); ws != gs {
					t.Fatalf("seed %d op %d pane %d (%s %v): values sum to %d (%d values), the uncompacted core's to %d (%d values)", seed, i, j, g.Key, g.Window, gs, len(g.Values), ws, len(w.Values))
				}
			}
		}
		for i, o := range randomOps(strat, rng) {
			if o.add {
				d1, err1 := plain.Add(o.e)
				d2, err2 := comp.Add(o.e)
				if err1 != nil || err2 != nil || d1 != d2 {
					t.Fatalf("seed %d op %d: Add dropped %v/%v, errors %v/%v", seed, i, d1, d2, err1, err2)
				}
			} else {
				want, err := plain.Advance(o.wm)
				if err != nil {
					t.Fatal(err)
				}
				got, err := comp.Advance(o.wm)
				if err != nil {
					t.Fatal(err)
				}
				check(i, want, got)
			}
			switch r := rng.Intn(6); r {
			case 0, 1, 2: // an attempt ends: compact (and, for 2, a restart)
				panes, err := comp.Compactable()
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range panes {
					if len(p.Values) < 2 {
						t.Fatalf("seed %d op %d: Compactable gave %s %v with %d values", seed, i, p.Key, p.Window, len(p.Values))
					}
					if err := comp.ReplaceValues(p.Key, p.Window, []byte(fmt.Sprint(sumValues(t, p.Values)))); err != nil {
						t.Fatal(err)
					}
					replacedOf[strat.Kind]++
				}
				comp.NewAttempt()
				if r != 2 {
					break
				}
				// A restart: the core reloads its store, as a stage
				// does from the writes of committed attempts, which
				// Prepare compacted (SetCompacting).
				materialized += comp.materialized
				comp = NewCore(strat, st)
				if err := comp.Load(); err != nil {
					t.Fatal(err)
				}
				comp.SetCompacting(true)
			}
		}
		materialized += comp.materialized
	}
	for _, k := range kinds {
		if replacedOf[k] == 0 {
			t.Fatalf("no entry of %v was compacted: the test checked nothing there", k)
		}
	}
	if materialized == 0 {
		t.Fatal("no unit entry's value moved: the test checked nothing there")
	}
	t.Logf("compactions: %v; unit values moved: %d", replacedOf, materialized)
}

// TestCompactNamedNamesTheWindow (issue 23): a MergeAccumulators that
// fails on one window of many (a user's CombineFn panicking on one
// accumulator) fails the compaction with ErrMergeFailed naming the stage,
// that window's key and the window, found by halving; before, the error
// said "compaction of 40 windows" and the SDK's message, naming no key or
// window.
func TestCompactNamedNamesTheWindow(t *testing.T) {
	var panes []Pane
	for i := 0; i < 40; i++ {
		panes = append(panes, Pane{Key: []byte{byte(i)}, Window: Window{Start: mtime.Time(i * 10), End: mtime.Time(i*10 + 5)}})
	}
	calls := 0
	compact := func(ps []Pane) ([][]byte, error) {
		calls++
		for _, p := range ps {
			if p.Key[0] == 27 {
				return nil, errors.New("bundle failed: panic: bad accumulator")
			}
		}
		return make([][]byte, len(ps)), nil
	}
	_, err := compactNamed(compact, "s3-CombinePerKey", panes)
	want := "stage s3-CombinePerKey: key 1b, window " + panes[27].Window.String() + " (one of 40 windows merged in the attempt): bundle failed: panic: bad accumulator"
	if !errors.Is(err, ErrMergeFailed) || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("compactNamed: %v\nwant ErrMergeFailed saying %q", err, want)
	}
	if calls > 1+2*6 {
		t.Errorf("%d calls of Compact to find one window of 40, want at most 13", calls)
	}
	calls = 0
	if got, err := compactNamed(compact, "s3", panes[:10]); err != nil || len(got) != 10 || calls != 1 {
		t.Errorf("no failing window: %v, %d values, %d calls; want 10 values in one call", err, len(got), calls)
	}
}

// TestCompactionOverwritesInPlace: under fixed windows the merged value
// takes the key of the value it replaces, so a (key, window) compacted
// at every attempt keeps one stored value under one key, and the
// changelog gets a put for it, never a tombstone (state.Manager.Prepare
// writes a key's last write of the attempt). Before, each compaction
// wrote the value under a new key and deleted the old one: a tombstone
// per (key, window) and attempt.
func TestCompactionOverwritesInPlace(t *testing.T) {
	st := &countingStore{MemStore: NewMemStore()}
	c := NewCore(Strategy{Kind: FixedWindows, Combiner: EndOfWindow}, st)
	c.SetCompacting(true)
	w := Window{Start: 0, End: 10}
	keys := func() []string {
		var ks []string
		if err := st.Scan(nil, func(k, _ []byte) error { ks = append(ks, string(k)); return nil }); err != nil {
			t.Fatal(err)
		}
		return ks
	}
	var after []string
	sum := 0
	for attempt := 1; attempt <= 3; attempt++ {
		for i := 1; i <= 3; i++ {
			sum += attempt * i
			if _, err := c.Add(Element{Key: []byte("k"), Window: w, Timestamp: 5, Value: []byte(fmt.Sprint(attempt * i))}); err != nil {
				t.Fatal(err)
			}
		}
		panes, err := c.Compactable()
		if err != nil {
			t.Fatal(err)
		}
		if len(panes) != 1 {
			t.Fatalf("attempt %d: %d compactable entries, want 1", attempt, len(panes))
		}
		if err := c.ReplaceValues(panes[0].Key, panes[0].Window, []byte(fmt.Sprint(sumValues(t, panes[0].Values)))); err != nil {
			t.Fatal(err)
		}
		c.NewAttempt()
		ks := keys()
		if after != nil && strings.Join(ks, "|") != strings.Join(after, "|") {
			t.Fatalf("attempt %d: the store's keys changed from %q to %q: the merged value moved to a new key (a tombstone for the old one)", attempt, after, ks)
		}
		after = ks
		// The entry is a unit entry (layout.go): its meta, one pending
		// value, is never written, and its value is one record,
		// overwritten in place: the changelog gets the merged value
		// alone.
		// The first attempt writes its first value and the merged one as
		// the unit value, the others as values; a later attempt all
		// three as values, the merged one as the unit value.
		wantUnit, wantValue := 1, 3
		if attempt == 1 {
			wantUnit, wantValue = 2, 2
		}
		if st.metaSets != 0 || st.unitSets != wantUnit || st.valueSets != wantValue {
			t.Fatalf("attempt %d: %d meta, %d unit value and %d value writes, want 0, %d and %d", attempt, st.metaSets, st.unitSets, st.valueSets, wantUnit, wantValue)
		}
		st.metaSets, st.unitSets, st.valueSets = 0, 0, 0
	}
	panes, err := c.Advance(mtime.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if len(panes) != 1 || len(panes[0].Values) != 1 || sumValues(t, panes[0].Values) != sum {
		t.Fatalf("fired %+v, want one pane of one value %d", panes, sum)
	}
}

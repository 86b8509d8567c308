package gbk

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// visitAll makes c's next Advance evaluate every open entry, as Advance did
// before the trigger index: the reference of
// TestTriggeredAdvanceVisitsCandidates and the baseline of
// BenchmarkTriggeredAdvance.
func visitAll(c *Core) {
	for _, ws := range c.windows {
		for _, e := range ws.entries {
			c.ti.hot[e] = true
		}
	}
}

var indexTestTriggers = []string{
	"repeat(count(2))",
	"count(3)",
	"eow(count(2),count(1))",
	"eow(ptime(5),always)",
	"eow(-,-)",
	"any(ptime(10),count(3))",
	"all(eow(-,-),count(2))",
	"each(count(2),ptime(5))",
	"orfinally(repeat(always),count(4))",
	"repeat(sync)",
	"repeat(eow(-,-))",
	"repeat(all(ptime(3),count(2)))",
}

func describePanes(ps []Pane) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s %s ts=%d %s %s; ", p.Key, p.Window, p.Timestamp, paneString(p.Info), valuesString(p.Values))
	}
	return b.String()
}

// TestTriggeredAdvanceVisitsCandidates: random elements (3 keys; fixed
// windows of 10 ms or sessions with a gap of 10 ms), watermark advances,
// processing times, aborts (Load) and restores, under each of
// indexTestTriggers, accumulating or not, with or without allowed
// lateness: a core whose Advance evaluates only trigIndex's candidates
// fires exactly the panes, in the same order, and writes the same store,
// as one that evaluates every open entry at every Advance (the rule before
// the index). Seeds 1..40 per trigger.
func TestTriggeredAdvanceVisitsCandidates(t *testing.T) {
	for _, ts := range indexTestTriggers {
		for seed := int64(1); seed <= 40; seed++ {
			rng := rand.New(rand.NewSource(seed))
			strat := Strategy{Kind: FixedWindows, Combiner: EndOfWindow, Accumulating: rng.Intn(2) == 0, AllowedLateness: int64(rng.Intn(3) * 10)}
			if rng.Intn(2) == 0 {
				strat.Kind, strat.Gap = Sessions, 10
			}
			strat.Trigger = parseTestTrigger(t, ts)
			strat.Trigger.number(0)
			stA, stB := NewMemStore(), NewMemStore()
			a, b := NewCore(strat, stA), NewCore(strat, stB)
			var wm mtime.Time
			var now int64 = 1000
			var snapA, snapB *MemStore
			a.SetProcessingTime(now)
			b.SetProcessingTime(now)
			for step := 0; step < 120; step++ {
				var pa, pb []Pane
				var err error
				switch op := rng.Intn(10); {
				case op < 5:
					tsv := wm - 15 + mtime.Time(rng.Intn(40))
					w := Window{Start: tsv - mtime.Time(mod(int64(tsv), 10)), End: tsv - mtime.Time(mod(int64(tsv), 10)) + 10}
					if strat.Kind == Sessions {
						w = Window{Start: tsv, End: tsv + 10}
					}
					e := Element{Key: []byte(fmt.Sprint("k", rng.Intn(3))), Window: w, Timestamp: tsv, Value: []byte(fmt.Sprint(step))}
					if pa, _, _, err = a.AddFire(e); err != nil {
						t.Fatal(err)
					}
					if pb, _, _, err = b.AddFire(e); err != nil {
						t.Fatal(err)
					}
				case op < 8:
					wm += mtime.Time(rng.Intn(12))
					now += int64(rng.Intn(6))
					a.SetProcessingTime(now)
					b.SetProcessingTime(now)
					visitAll(b)
					if pa, err = a.Advance(wm); err != nil {
						t.Fatal(err)
					}
					if pb, err = b.Advance(wm); err != nil {
						t.Fatal(err)
					}
				case op < 9:
					if snapA == nil {
						snapA, snapB = stA.Clone(), stB.Clone()
						continue
					}
					stA.m, stB.m = snapA.Clone().m, snapB.Clone().m
					snapA, snapB = nil, nil
					if err := a.Load(); err != nil {
						t.Fatal(err)
					}
					if err := b.Load(); err != nil {
						t.Fatal(err)
					}
					wm = a.Watermark()
				default:
					a = NewCore(strat, stA)
					if err := a.Load(); err != nil {
						t.Fatal(err)
					}
					a.SetProcessingTime(now)
				}
				if ga, gb := describePanes(pa), describePanes(pb); ga != gb {
					t.Fatalf("%s seed %d step %d (%s): indexed fired %s\nfull visit fired %s", ts, seed, step, strat, ga, gb)
				}
				if da, db := describeStore(t, stA), describeStore(t, stB); da != db {
					t.Fatalf("%s seed %d step %d: stores differ:\nindexed:\n%s\nfull visit:\n%s", ts, seed, step, da, db)
				}
				if a.Hold() != b.Hold() {
					t.Fatalf("%s seed %d step %d: hold %d vs %d", ts, seed, step, a.Hold(), b.Hold())
				}
			}
		}
	}
}

// BenchmarkTriggeredAdvance: n open (key, window) entries under
// Repeatedly(AfterCount(1000)) in fixed windows that end far ahead; each
// round adds a value to one of them and advances the watermark by 1 ms
// (no window ends, nothing fires): the index evaluates nothing, a full
// visit (visitAll, the Advance before the index) every entry. Both in the
// same run; ratio = full ns / indexed ns.
func BenchmarkTriggeredAdvance(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		var perOp [2]float64
		for i, impl := range []string{"full", "indexed"} {
			b.Run(fmt.Sprintf("%s/n=%d", impl, n), func(b *testing.B) {
				strat := Strategy{Kind: FixedWindows, Combiner: EndOfWindow, Trigger: &Trigger{Kind: TrigRepeat, Subs: []*Trigger{{Kind: TrigCount, Count: 1000}}}}
				strat.Trigger.number(0)
				c := NewCore(strat, NewMemStore())
				win := func(k int) Window { return Window{Start: mtime.Time(1e9 + k*10), End: mtime.Time(1e9 + k*10 + 10)} }
				for k := 0; k < n; k++ {
					if _, _, _, err := c.AddFire(Element{Key: []byte(fmt.Sprint("k", k)), Window: win(k), Timestamp: win(k).Start, Value: []byte("v")}); err != nil {
						b.Fatal(err)
					}
				}
				wm := mtime.Time(0)
				for r := 0; b.Loop(); r++ {
					k := r % n
					if _, _, _, err := c.AddFire(Element{Key: []byte(fmt.Sprint("k", k)), Window: win(k), Timestamp: win(k).Start, Value: []byte("v")}); err != nil {
						b.Fatal(err)
					}
					wm++
					if impl == "full" {
						visitAll(c)
					}
					if _, err := c.Advance(wm); err != nil {
						b.Fatal(err)
					}
				}
				perOp[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			})
		}
		if perOp[1] > 0 {
			b.Logf("n=%d: full visit %.0f ns/round, indexed %.0f ns/round: ratio %.1f×", n, perOp[0], perOp[1], perOp[0]/perOp[1])
		}
	}
}

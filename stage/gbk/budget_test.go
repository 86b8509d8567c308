package gbk

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// TestFireBudgetFiresTheSamePanes checks SetFireBudget's promise: for
// random sequences of values and watermarks under every window kind, a
// core with a budget of 1-3 values per attempt, advanced again attempt
// after attempt while it Owes (as the loop wakes the task), and sometimes
// replaced by a freshly Loaded one in between (a restart while owing),
// fires exactly the panes, in the same order and with the same timing,
// as a core without a budget; no attempt fires past its budget but by
// the last pane it began; and while it owes, its hold is at or before
// every owed pane's timestamp (the output watermark cannot pass them).
func TestFireBudgetFiresTheSamePanes(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		strat := randomStrategies[seed%int64(len(randomStrategies))]
		rng := rand.New(rand.NewSource(seed))
		ops := randomOps(strat, rng)
		budget := 1 + int(seed%3)
		pane := func(p Pane) string {
			return fmt.Sprintf("fire %s %s %d %+v %q", p.Key, p.Window, p.Timestamp, p.Info, p.Values)
		}
		var want []string
		c := NewCore(strat, NewMemStore())
		for _, o := range ops {
			if o.add {
				if _, err := c.Add(o.e); err != nil {
					t.Fatal(err)
				}
				continue
			}
			ps, err := c.Advance(o.wm)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				want = append(want, pane(p))
			}
		}

		var got []string
		st := NewMemStore()
		b := NewCore(strat, st)
		b.SetFireBudget(budget)
		owedRounds := 0
		for _, o := range ops {
			if o.add {
				if _, err := b.Add(o.e); err != nil {
					t.Fatal(err)
				}
				continue
			}
			for first := true; first || b.Owes(); first = false {
				if !first {
					owedRounds++
					if rng.Intn(3) == 0 { // a restart while owing
						b = NewCore(strat, st)
						if err := b.Load(); err != nil {
							t.Fatal(err)
						}
						b.SetFireBudget(budget)
						if !b.Owes() {
							t.Fatalf("seed %d: a reloaded core forgot it owes panes", seed)
						}
					}
				}
				b.NewAttempt()
				ps, err := b.Advance(o.wm)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for i, p := range ps {
					if n >= budget {
						t.Fatalf("seed %d: pane %d of an attempt began after %d values, budget %d", seed, i, n, budget)
					}
					n += len(p.Values)
					got = append(got, pane(p))
				}
				if b.Owes() {
					hold := b.Hold()
					if hold > o.wm {
						t.Fatalf("seed %d: owing at watermark %d with hold %d", seed, o.wm, hold)
					}
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			for i := range want {
				if i >= len(got) || got[i] != want[i] {
					t.Fatalf("seed %d (%s, budget %d): pane %d differs:\n got  %v\n want %s", seed, strat, budget, i, got[min(i, len(got)-1)], want[i])
				}
			}
			t.Fatalf("seed %d: %d panes, want %d", seed, len(got), len(want))
		}
		if seed == 0 && owedRounds == 0 {
			t.Fatal("the budget never stopped an Advance: the test tests nothing")
		}
	}
}

// TestFireBudgetHoldsOwedWindow: a window owed past the budget keeps the
// hold at its end, so the output watermark waits for its pane.
func TestFireBudgetHoldsOwedWindow(t *testing.T) {
	c := NewCore(Strategy{Kind: FixedWindows, Combiner: EndOfWindow}, NewMemStore())
	c.SetFireBudget(1)
	for i, w := range []Window{{Start: 0, End: 10}, {Start: 10, End: 20}} {
		if _, err := c.Add(Element{Key: []byte("k"), Window: w, Timestamp: w.Start, Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := c.Advance(mtime.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || !c.Owes() || c.Hold() != 19 {
		t.Fatalf("after the first attempt: %d panes, owes %v, hold %d; want 1, true, 19", len(ps), c.Owes(), c.Hold())
	}
	if ps, _ := c.Advance(mtime.MaxTimestamp); len(ps) != 0 {
		t.Fatalf("the same attempt fired %d more panes past its budget", len(ps))
	}
	c.NewAttempt()
	if ps, err = c.Advance(mtime.MaxTimestamp); err != nil || len(ps) != 1 || c.Owes() || c.Hold() != mtime.MaxTimestamp {
		t.Fatalf("second attempt: %d panes, err %v, owes %v, hold %d", len(ps), err, c.Owes(), c.Hold())
	}
}

// TestFireBudgetHoldsOwedEmptyFinalPane: under ClosingAlways an empty
// final pane owed past the budget keeps the hold at its window's expiry
// (Beam Java's garbage-collection hold), so the output watermark does not
// pass the expiry before the pane (stamped with the window's end) is out.
func TestFireBudgetHoldsOwedEmptyFinalPane(t *testing.T) {
	c := NewCore(Strategy{Kind: FixedWindows, Combiner: EndOfWindow, AllowedLateness: 5, ClosingAlways: true}, NewMemStore())
	c.SetFireBudget(1)
	w := Window{Start: 0, End: 10}
	add := func(key string, ts mtime.Time) {
		if _, err := c.Add(Element{Key: []byte(key), Window: w, Timestamp: ts, Value: []byte(key)}); err != nil {
			t.Fatal(err)
		}
	}
	add("a", 1)
	add("b", 2)
	for first := true; first || c.Owes(); first = false {
		c.NewAttempt()
		if _, err := c.Advance(10); err != nil {
			t.Fatal(err)
		}
	}
	add("a", 3) // late, within the allowed lateness
	c.NewAttempt()
	ps, err := c.Advance(20)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || string(ps[0].Key) != "a" || !c.Owes() || c.Hold() != 14 {
		t.Fatalf("first attempt: %d panes, owes %v, hold %d; want a's pane, owing b's empty one, hold 14", len(ps), c.Owes(), c.Hold())
	}
	c.NewAttempt()
	ps, err = c.Advance(20)
	if err != nil || len(ps) != 1 || string(ps[0].Key) != "b" || len(ps[0].Values) != 0 || !ps[0].Info.IsLast || c.Owes() || c.Hold() != mtime.MaxTimestamp {
		t.Fatalf("second attempt: %+v, err %v, owes %v, hold %d; want b's empty last pane, nothing owed", ps, err, c.Owes(), c.Hold())
	}
}

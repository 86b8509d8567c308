package gbk

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// TestReloadAnywhere checks the invariant that Core's in-memory index is a
// function of its store: for random sequences of values and watermarks,
// under every window kind, a core that is replaced by a freshly Loaded one
// after any step fires exactly the panes, with the same holds, as one that
// never is. (A restore on another instance, and the reload after an
// abort, rely on it.)
func TestReloadAnywhere(t *testing.T) {
	for seed := int64(0); seed < 200; seed++ {
		strat := randomStrategies[seed%int64(len(randomStrategies))]
		rng := rand.New(rand.NewSource(seed))
		ops := randomOps(strat, rng)
		run := func(reloadAt int) []string {
			st := NewMemStore()
			c := NewCore(strat, st)
			var out []string
			for i, o := range ops {
				if i == reloadAt {
					c = NewCore(strat, st)
					if err := c.Load(); err != nil {
						t.Fatal(err)
					}
				}
				if o.add {
					d, err := c.Add(o.e)
					if err != nil {
						t.Fatal(err)
					}
					checkHeld(t, c, seed, i)
					out = append(out, fmt.Sprintf("add %s dropped=%v hold=%d held=%d", o.e.Value, d, c.Hold(), c.Held()))
					continue
				}
				ps, err := c.Advance(o.wm)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					out = append(out, fmt.Sprintf("fire %s %s %d %+v %q", p.Key, p.Window, p.Timestamp, p.Info, p.Values))
				}
				checkHeld(t, c, seed, i)
				out = append(out, fmt.Sprintf("advance %d hold=%d held=%d", o.wm, c.Hold(), c.Held()))
			}
			return out
		}
		want := run(-1)
		for at := 0; at < len(ops); at += 7 {
			if got := run(at); !reflect.DeepEqual(got, want) {
				for i := range want {
					if i >= len(got) || got[i] != want[i] {
						t.Fatalf("seed %d (%s), reload before op %d: step %d differs:\n got  %v\n want %s", seed, strat, at, i, got[min(i, len(got)-1)], want[i])
					}
				}
				t.Fatalf("seed %d: reload before op %d: %d steps, want %d", seed, at, len(got), len(want))
			}
		}
	}
}

// checkHeld fails t unless c.Held, kept as entries come and go, is the
// number of entries in c's index.
func checkHeld(t *testing.T, c *Core, seed int64, op int) {
	t.Helper()
	var n int64
	for _, ws := range c.windows {
		n += int64(len(ws.entries))
	}
	if c.Held() != n {
		t.Fatalf("seed %d, after op %d: Held() = %d, the index holds %d entries", seed, op, c.Held(), n)
	}
}

// randomStrategies are the windowing strategies of the random core tests:
// every window kind, accumulating or not, every timestamp combiner.
var randomStrategies = []Strategy{
	{Kind: FixedWindows, Combiner: EndOfWindow},
	{Kind: FixedWindows, Combiner: EarliestInPane, AllowedLateness: 7, Accumulating: true},
	{Kind: SlidingWindows, Combiner: LatestInPane, AllowedLateness: 3},
	{Kind: Sessions, Gap: 5, Combiner: EndOfWindow, AllowedLateness: 4},
	// Sessions that grow and merge often: the merged session keeps the
	// storage window of the largest (meta.SW), which must reload.
	{Kind: Sessions, Gap: 12, Combiner: LatestInPane, AllowedLateness: 9, Accumulating: true},
	{Kind: GlobalWindows, Combiner: EndOfWindow},
	// Empty on-time and final panes (OnTimeBehavior FIRE_ALWAYS,
	// ClosingBehavior EMIT_ALWAYS): panes with no value, within the
	// budget as any other.
	{Kind: FixedWindows, Combiner: EarliestInPane, AllowedLateness: 5, OnTimeAlways: true, ClosingAlways: true},
	{Kind: Sessions, Gap: 5, Combiner: EndOfWindow, AllowedLateness: 3, Accumulating: true, ClosingAlways: true},
}

// op is one step of a random core test: Add e, or Advance to wm.
type op struct {
	add bool
	e   Element
	wm  mtime.Time
}

// randomOps returns 60 random steps under strat: values on 3 keys around
// the watermark (some late, some early), watermarks that move by 0-5 ms,
// the end of time near the end.
func randomOps(strat Strategy, rng *rand.Rand) []op {
	var ops []op
	wm := mtime.Time(0)
	for i := 0; i < 60; i++ {
		if rng.Intn(4) == 0 {
			wm += mtime.Time(rng.Intn(6))
			if i > 50 {
				wm = mtime.MaxTimestamp
			}
			ops = append(ops, op{wm: wm})
			continue
		}
		ts := wm - 5 + mtime.Time(rng.Intn(15)) // some late, some early
		e := Element{Key: []byte{byte('a' + rng.Intn(3))}, Timestamp: ts, Value: []byte(fmt.Sprint(i))}
		switch strat.Kind {
		case GlobalWindows:
			e.Window = GlobalWindow
		case FixedWindows:
			start := ts - ((ts%10)+10)%10
			e.Window = Window{Start: start, End: start + 10}
		case SlidingWindows: // size 10, period 5: the later of its windows
			start := ts - ((ts%5)+5)%5
			e.Window = Window{Start: start - 5, End: start + 5}
		case Sessions:
			e.Window = Window{Start: ts, End: ts + mtime.Time(strat.Gap)}
		}
		ops = append(ops, op{add: true, e: e})
	}
	return ops
}

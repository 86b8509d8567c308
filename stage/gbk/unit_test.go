package gbk

import (
	"fmt"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/state"
)

// TestUnitEntriesHalveTheChangelog: a windowed sum's GroupByKey (fixed
// windows, compaction on) writes through a real task store
// (state.Manager, whose Prepare gives the changelog each key's last
// write of the attempt) one changelog record per (key, window) and
// attempt, and one tombstone per (key, window) when the window fires:
// unit entries (layout.go) store no meta. Before them, the first attempt
// wrote the value and the meta, and the firing a tombstone for each: 600
// records here where there are now 400. A core loaded from the store
// after the last attempt fires the same sums.
func TestUnitEntriesHalveTheChangelog(t *testing.T) {
	const keys = 100
	m, err := state.Open(state.Options{Dir: t.TempDir(), Name: "unit", Topic: "changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tk, err := m.Restore(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	strat := Strategy{Kind: FixedWindows, Combiner: EndOfWindow}
	newCore := func() *Core {
		c := NewCore(strat, tk)
		if err := c.Load(); err != nil {
			t.Fatal(err)
		}
		c.SetCompacting(true)
		return c
	}
	// commit compacts the attempt as a stage loop's Prepare does, and
	// returns the changelog's records: puts and tombstones.
	commit := func(c *Core) (puts, tombstones int) {
		panes, err := c.Compactable()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range panes {
			if err := c.ReplaceValues(p.Key, p.Window, []byte(fmt.Sprint(sumValues(t, p.Values)))); err != nil {
				t.Fatal(err)
			}
		}
		c.NewAttempt()
		if err := m.Prepare(func(_ string, _ int32, _, v []byte) error {
			if v == nil {
				tombstones++
			} else {
				puts++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := m.Committed(); err != nil {
			t.Fatal(err)
		}
		return puts, tombstones
	}
	w := Window{Start: 0, End: 10}
	c := newCore()
	want := map[string]int{}
	for attempt := 1; attempt <= 3; attempt++ {
		for k := 0; k < keys; k++ {
			for i := 1; i <= 3; i++ {
				key := fmt.Sprint("k", k)
				want[key] += attempt * i
				if _, err := c.Add(Element{Key: []byte(key), Window: w, Timestamp: 5, Value: []byte(fmt.Sprint(attempt * i))}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if puts, tombs := commit(c); puts != keys || tombs != 0 {
			t.Fatalf("attempt %d: the changelog got %d puts and %d tombstones, want %d and 0", attempt, puts, tombs, keys)
		}
	}
	c = newCore() // a restart: the unit entries come back from their values
	panes, err := c.Advance(mtime.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if len(panes) != keys {
		t.Fatalf("fired %d panes, want %d", len(panes), keys)
	}
	for _, p := range panes {
		if len(p.Values) != 1 || sumValues(t, p.Values) != want[string(p.Key)] {
			t.Fatalf("pane of %s: %q, want one value %d", p.Key, p.Values, want[string(p.Key)])
		}
	}
	if puts, tombs := commit(c); puts != 1 || tombs != keys {
		// The put is the watermark record.
		t.Fatalf("firing: the changelog got %d puts and %d tombstones, want 1 (the watermark) and %d", puts, tombs, keys)
	}
	if err := tk.Scan(nil, func(k, _ []byte) error {
		if k[0] != 'w' {
			t.Errorf("after the firing the store holds %q", k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

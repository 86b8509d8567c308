package gbk

import (
	"fmt"
	"testing"
)

// TestGCClosingWindowLinear guards the fix of a quadratic Advance: firing
// and collecting a closing window of n keys recomputed the window's hold
// once per collected entry, visiting n²/2 entries (40% of the CPU of the
// GroupByKey benchmark, integration/bench_test.go, at 7 500 keys a window
// and task). It must visit O(n), and leave the hold exact.
func TestGCClosingWindowLinear(t *testing.T) {
	const n = 4000
	c := NewCore(Strategy{Kind: FixedWindows, Combiner: EndOfWindow}, NewMemStore())
	for _, w := range []Window{{Start: 0, End: 100}, {Start: 100, End: 200}} {
		for i := 0; i < n; i++ {
			if _, err := c.Add(Element{Key: []byte(fmt.Sprint("k", i)), Window: w, Timestamp: w.Start, Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.holdVisits = 0
	panes, err := c.Advance(150) // [0, 100) fires and closes (no allowed lateness)
	if err != nil {
		t.Fatal(err)
	}
	if len(panes) != n {
		t.Fatalf("%d panes, want %d", len(panes), n)
	}
	if c.holdVisits > 3*n {
		t.Errorf("Advance visited %d entries recomputing holds for a closing window of %d keys: want O(n), at most %d", c.holdVisits, n, 3*n)
	}
	if got, want := c.Hold(), (Window{Start: 100, End: 200}).MaxTimestamp(); got != want {
		t.Errorf("hold %v after the first window closed, want the second's end %v", got, want)
	}
}

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

// TestAdvanceScansOncePerWindow: firing a fixed window of n keys reads the
// store once (readWindow), not once per key, and the panes hold each
// key's values in arrival order; a second window fired in the same
// Advance is read by a scan of its own.
func TestAdvanceScansOncePerWindow(t *testing.T) {
	const n = 500
	c := NewCore(Strategy{Kind: FixedWindows, Combiner: EndOfWindow}, NewMemStore())
	ws := []Window{{Start: 0, End: 100}, {Start: 100, End: 200}}
	for _, w := range ws {
		for j := 0; j < 3; j++ {
			for i := 0; i < n; i++ {
				v := fmt.Sprint(w.Start, "-", i, "-", j)
				if _, err := c.Add(Element{Key: []byte(fmt.Sprint("k", i)), Window: w, Timestamp: w.Start, Value: []byte(v)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	c.scans = 0
	panes, err := c.Advance(250)
	if err != nil {
		t.Fatal(err)
	}
	if c.scans != 2 {
		t.Errorf("Advance scanned the store %d times for 2 windows of %d keys, want 2", c.scans, n)
	}
	if len(panes) != 2*n {
		t.Fatalf("%d panes, want %d", len(panes), 2*n)
	}
	for _, p := range panes {
		var i int
		if _, err := fmt.Sscanf(string(p.Key), "k%d", &i); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("[%d-%d-0 %d-%d-1 %d-%d-2]", p.Window.Start, i, p.Window.Start, i, p.Window.Start, i)
		if got := fmt.Sprintf("%s", p.Values); got != want {
			t.Fatalf("pane of %s in %v: values %s, want %s", p.Key, p.Window, got, want)
		}
	}
	if st := c.st.(*MemStore); st.Len() != 1 { // the watermark record alone
		t.Errorf("%d records left in the store after both windows closed, want 1", st.Len())
	}
}

package gbk

import (
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// TestNextDueIsWhereAdvanceFires checks NextDue's sentence: it is the
// least input watermark at which Advance fires a pane (the stage loop ends
// its poll on a report at or past it, issue 24), under either timestamp
// combiner (EarliestInPane's hold is a value's timestamp, not the due
// time): one watermark below it fires nothing, it fires the window, and
// with nothing pending there is none.
func TestNextDueIsWhereAdvanceFires(t *testing.T) {
	for _, comb := range []TimestampCombiner{EndOfWindow, EarliestInPane} {
		c := NewCore(Strategy{Kind: FixedWindows, Combiner: comb}, NewMemStore())
		if _, ok := c.NextDue(); ok {
			t.Fatalf("%s: an empty core has a due time", comb)
		}
		for _, w := range []Window{{Start: 10, End: 20}, {Start: 0, End: 10}} {
			if _, err := c.Add(Element{Key: []byte("k"), Window: w, Timestamp: w.Start + 2, Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
		}
		for _, want := range []mtime.Time{10, 20} {
			due, ok := c.NextDue()
			if !ok || due != want {
				t.Fatalf("%s: NextDue = %d, %v; want %d, true", comb, due, ok, want)
			}
			if ps, err := c.Advance(due - 1); err != nil || len(ps) != 0 {
				t.Fatalf("%s: Advance(%d), below the due time: %d panes, err %v; want none", comb, due-1, len(ps), err)
			}
			if ps, err := c.Advance(due); err != nil || len(ps) != 1 {
				t.Fatalf("%s: Advance(%d), the due time: %d panes, err %v; want 1", comb, due, len(ps), err)
			}
		}
		if due, ok := c.NextDue(); ok {
			t.Fatalf("%s: every window fired, NextDue = %d", comb, due)
		}
	}
}

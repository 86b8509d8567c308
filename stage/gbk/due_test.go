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

// TestNextDueEmptyFinalPane: under ClosingAlways (EMIT_ALWAYS) a window
// whose values all fired is due again at its expiry + 1, where Advance
// fires its empty final pane; without it, nothing is due.
func TestNextDueEmptyFinalPane(t *testing.T) {
	for _, always := range []bool{false, true} {
		c := NewCore(Strategy{Kind: FixedWindows, Combiner: EndOfWindow, AllowedLateness: 5, ClosingAlways: always}, NewMemStore())
		if _, err := c.Add(Element{Key: []byte("k"), Window: Window{Start: 0, End: 10}, Timestamp: 1, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		if ps, err := c.Advance(10); err != nil || len(ps) != 1 {
			t.Fatalf("closing always %v: Advance(10): %d panes, err %v; want 1", always, len(ps), err)
		}
		due, ok := c.NextDue()
		if !always {
			if ok {
				t.Fatalf("EMIT_IF_NONEMPTY: NextDue = %d after the only value fired", due)
			}
			continue
		}
		if !ok || due != 15 {
			t.Fatalf("EMIT_ALWAYS: NextDue = %d, %v; want 15 (expiry 9+5, + 1)", due, ok)
		}
		if ps, err := c.Advance(14); err != nil || len(ps) != 0 {
			t.Fatalf("Advance(14): %d panes, err %v; want none", len(ps), err)
		}
		ps, err := c.Advance(15)
		if err != nil || len(ps) != 1 || len(ps[0].Values) != 0 || !ps[0].Info.IsLast || ps[0].Timestamp != 9 {
			t.Fatalf("Advance(15): %+v, err %v; want one empty last pane at 9", ps, err)
		}
		if due, ok := c.NextDue(); ok {
			t.Fatalf("the window closed, NextDue = %d", due)
		}
	}
}

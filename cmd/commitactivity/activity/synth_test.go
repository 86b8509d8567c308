package activity

import (
	"bytes"
	"strings"
	"testing"
)

// TestSynthesize: the rows are deterministic in the seed, every one parses
// as a row of git-commits.csv (ParseRow), arrival times never decrease,
// event times are never after arrival nor before the start, some rows are
// out of order, and areas repeat (Zipf-like, not all distinct).
func TestSynthesize(t *testing.T) {
	gen := func(seed uint64) string {
		var b bytes.Buffer
		if err := Synthesize(&b, Synthesis{Rows: 20000, Seed: seed}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	a, b, c := gen(1), gen(1), gen(2)
	if a != b {
		t.Fatal("two syntheses with one seed differ")
	}
	if a == c {
		t.Fatal("syntheses with seeds 1 and 2 are equal")
	}
	lines := strings.Split(strings.TrimSuffix(a, "\n"), "\n")
	if lines[0] != SynthHeader || len(lines) != 20001 {
		t.Fatalf("header %q and %d lines, want %q and 20001", lines[0], len(lines), SynthHeader)
	}
	var prevArrival int64
	late, areas := 0, map[string]int{}
	for i, l := range lines[1:] {
		r, err := ParseRow(l)
		if err != nil {
			t.Fatalf("row %d %q: %v", i, l, err)
		}
		var arrival int64
		for _, ch := range l[:strings.IndexByte(l, ',')] {
			arrival = arrival*10 + int64(ch-'0')
		}
		if arrival < prevArrival {
			t.Fatalf("row %d: arrival %d before the previous %d", i, arrival, prevArrival)
		}
		prevArrival = arrival
		if r.EventMillis > arrival || r.EventMillis < 1112911993000 {
			t.Fatalf("row %d: event %d outside [start, arrival %d]", i, r.EventMillis, arrival)
		}
		if r.EventMillis < arrival {
			late++
		}
		areas[r.Area]++
	}
	if late < 500 || late > 1500 {
		t.Errorf("%d of 20000 rows out of order, want about 5%%", late)
	}
	if len(areas) < 50 || len(areas) > 400 {
		t.Errorf("%d distinct areas, want between 50 and 400", len(areas))
	}
	if err := Synthesize(&bytes.Buffer{}, Synthesis{}); err == nil {
		t.Error("Synthesize with Rows 0: no error")
	}
}

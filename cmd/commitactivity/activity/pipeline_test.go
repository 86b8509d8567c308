package activity

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
)

// DataFile is the job's input in this repository, relative to this package.
const dataFile = "../data/git-commits.csv"

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseRow(t *testing.T) {
	for _, c := range []struct {
		line, err string
		want      Row
	}{
		{line: "1112911993000,1112911993000,e83c516331,(root).c,11,1244,0\r", want: Row{EventMillis: 1112911993000, Area: "(root).c", Insertions: 1244}},
		{line: "1,2,abc,t,1,3,4", want: Row{EventMillis: 2, Area: "t", Insertions: 3, Deletions: 4}},
		{line: Header, err: `event_ms "event_ms" is not an integer`},
		{line: "1,2,abc,t,1,3", err: "6 fields, want 7"},
		{line: "1,2,abc,t,1,3,4,5", err: "8 fields, want 7"},
		{line: "", err: "1 fields, want 7"},
		{line: "1,x,abc,t,1,3,4", err: `event_ms "x" is not an integer`},
		{line: "1,2,abc,,1,3,4", err: "empty area"},
		{line: "1,2,abc,t,one,3,4", err: `files "one" is not an integer`},
		{line: "1,2,abc,t,1,3.5,4", err: `insertions "3.5" is not an integer`},
		{line: "1,2,abc,t,1,3,", err: `deletions "" is not an integer`},
		{line: "1,9223372036854775807,abc,t,1,3,4", err: "outside Beam's time range"},
	} {
		got, err := ParseRow(c.line)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("ParseRow(%q): %v", c.line, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseRow(%q): error %v, want one containing %q", c.line, err, c.err)
		case c.err == "" && got != c.want:
			t.Errorf("ParseRow(%q) = %+v, want %+v", c.line, got, c.want)
		}
	}
}

// TestReferenceSmall checks the Go reference on a hand-made input whose
// output is written out below: fixed windows, the top ranking with a tie,
// sessions split at exactly the gap, and malformed rows.
func TestReferenceSmall(t *testing.T) {
	const day = int64(24 * 3600 * 1000)
	w := int64(WindowSize / time.Millisecond)
	line := func(ms int64, area string, ins, del int) string {
		return strings.Join([]string{"0", itoa(ms), "c", area, "1", itoa(int64(ins)), itoa(int64(del))}, ",")
	}
	lines := []string{
		Header,
		line(w+0, "a", 1, 0),
		line(w+3*day, "b", 2, 1),
		line(w+7*day, "a", 3, 0),  // exactly the gap after the first: a new session of a
		line(w+13*day, "a", 1, 1), // 6 days later: same session
		line(2*w+1, "b", 5, 5),    // next window
		line(2*w+2, "a", 1, 1),    // ties b's one commit there: a ranks first (name), though b came first and has more lines
		line(w-1, "c", 1, 1),      // the previous window, out of order
		"broken,row",
		line(w+1, "b", 0, 0),
	}
	got, malformed := Reference(lines)
	if malformed != 1 {
		t.Errorf("malformed = %d, want 1", malformed)
	}
	ts := func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }
	want := []string{
		"area," + ts(0) + "," + ts(w) + ",c,1,1,1,",
		"area," + ts(w) + "," + ts(2*w) + ",a,3,5,1,",
		"area," + ts(w) + "," + ts(2*w) + ",b,2,2,1,",
		"area," + ts(2*w) + "," + ts(3*w) + ",a,1,1,1,",
		"area," + ts(2*w) + "," + ts(3*w) + ",b,1,5,5,",
		"session," + ts(w) + "," + ts(w) + ",a,1,1,0,",
		"session," + ts(w+1) + "," + ts(w+3*day) + ",b,2,2,1,",
		"session," + ts(w+7*day) + "," + ts(w+13*day) + ",a,2,4,1,",
		"session," + ts(w-1) + "," + ts(w-1) + ",c,1,1,1,",
		"session," + ts(2*w+1) + "," + ts(2*w+1) + ",b,1,5,5,",
		"session," + ts(2*w+2) + "," + ts(2*w+2) + ",a,1,1,1,",
		"top," + ts(0) + "," + ts(w) + ",c,1,1,1,1",
		"top," + ts(w) + "," + ts(2*w) + ",a,3,5,1,1",
		"top," + ts(w) + "," + ts(2*w) + ",b,2,2,1,2",
		"top," + ts(2*w) + "," + ts(3*w) + ",a,1,1,1,1",
		"top," + ts(2*w) + "," + ts(3*w) + ",b,1,5,5,2",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Reference:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestPrismMatchesReference runs the pipeline on Prism (in this process)
// over the repository's git-commits.csv plus a few malformed rows, and
// checks its CSV output against Reference, row for row, and the
// malformed_rows counter.
func TestPrismMatchesReference(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the whole file on Prism takes a few seconds")
	}
	lines := readLines(t, dataFile)
	lines = append(lines, "1,2,3", "1,not-a-time,abc,t,1,1,1", "")
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, malformed := Reference(lines)
	if malformed != 3 {
		t.Fatalf("reference: %d malformed rows, want 3", malformed)
	}
	out := filepath.Join(dir, "out.csv")
	if !beam.Initialized() {
		beam.Init()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := prism.Execute(ctx, Pipeline(Options{Input: in, Output: out}))
	if err != nil {
		t.Fatalf("prism: %v", err)
	}
	t.Logf("prism: %v", time.Since(start).Round(time.Millisecond))
	got := readLines(t, out)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("prism wrote %d rows, reference %d; first differences:%s", len(got), len(want), DiffSorted(got, want, 5))
	}
	counters := map[string]int64{}
	for _, c := range res.Metrics().AllMetrics().Counters() {
		counters[c.Key.Name] += c.Committed
	}
	if counters["malformed_rows"] != 3 || counters["parsed_rows"] != int64(len(lines)-4) {
		t.Errorf("counters %v, want malformed_rows=3 parsed_rows=%d", counters, len(lines)-4)
	}
	sum, err := Summarize(got)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Commits != int64(len(lines)-4) {
		t.Errorf("area rows sum to %d commits, want %d", sum.Commits, len(lines)-4)
	}
	var b strings.Builder
	sum.PrintTable(&b, 3, 3)
	t.Logf("table:\n%s", b.String())
}

package activity

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Reference computes the job's output rows directly in Go, without Beam:
// the "dumb" reference the pipeline's output is tested against. lines are
// the file's lines (the header and malformed lines are skipped; malformed
// is how many). The rows are sorted.
func Reference(lines []string) (rows []string, malformed int) {
	size := mtime.FromDuration(WindowSize)
	gap := mtime.FromDuration(SessionGap)
	type win struct {
		start mtime.Time
		area  string
	}
	fixed := map[win]Totals{}
	perCommit := map[string][]Row{} // per area, its rows
	for _, line := range lines {
		if strings.TrimRight(line, "\r") == Header {
			continue
		}
		r, err := ParseRow(line)
		if err != nil {
			malformed++
			continue
		}
		t := mtime.FromMilliseconds(r.EventMillis)
		// Beam's FixedWindows: start = t - (t mod size), mod towards -inf.
		start := t - ((t%size)+size)%size
		k := win{start, r.Area}
		fixed[k] = SumTotals(fixed[k], Totals{Commits: 1, Insertions: r.Insertions, Deletions: r.Deletions})
		perCommit[r.Area] = append(perCommit[r.Area], r)
	}

	byWindow := map[mtime.Time][]AreaTotals{}
	for k, t := range fixed {
		rows = append(rows, FormatRow(KindArea, k.start, k.start+size, k.area, t, 0))
		byWindow[k.start] = append(byWindow[k.start], AreaTotals{Area: k.area, Totals: t})
	}
	for start, as := range byWindow {
		sort.Slice(as, func(i, j int) bool { return LessByCommits(as[j], as[i]) })
		for i, a := range as[:min(TopN, len(as))] {
			rows = append(rows, FormatRow(KindTop, start, start+size, a.Area, a.Totals, i+1))
		}
	}

	// Sessions: sorted by event time, a new session starts wherever the
	// next commit is at least gap after the previous one (Beam's session
	// windows [t, t+gap) merge exactly when they overlap).
	for area, rs := range perCommit {
		slices.SortFunc(rs, func(a, b Row) int { return cmp.Compare(a.EventMillis, b.EventMillis) })
		var cur Totals
		var first, last mtime.Time
		for i, r := range rs {
			t := mtime.FromMilliseconds(r.EventMillis)
			if i > 0 && t-last >= gap {
				rows = append(rows, FormatRow(KindSession, first, last, area, cur, 0))
				cur = Totals{}
			}
			if i == 0 || t-last >= gap {
				first = t
			}
			cur = SumTotals(cur, Totals{Commits: 1, Insertions: r.Insertions, Deletions: r.Deletions})
			last = t
		}
		rows = append(rows, FormatRow(KindSession, first, last, area, cur, 0))
	}
	slices.Sort(rows)
	return rows, malformed
}

// DiffSorted describes how two sorted lists of rows differ, at most n
// lines: "extra" rows are in got only, "missing" rows in want only.
func DiffSorted(got, want []string, n int) string {
	var b strings.Builder
	i, j, shown := 0, 0, 0
	for (i < len(got) || j < len(want)) && shown < n {
		switch {
		case j >= len(want) || (i < len(got) && got[i] < want[j]):
			fmt.Fprintf(&b, "\n  extra   %q", got[i])
			i++
			shown++
		case i >= len(got) || want[j] < got[i]:
			fmt.Fprintf(&b, "\n  missing %q", want[j])
			j++
			shown++
		default:
			i++
			j++
		}
	}
	return b.String()
}

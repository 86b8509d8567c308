package activity

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Summary is what the output rows say, for the table printed at the end.
type Summary struct {
	// Rows counts the output rows by kind.
	Rows map[string]int
	// Commits is the sum of commits over the "area" rows: every parsed
	// input row once.
	Commits int64
	// Windows are the fixed windows with at least one commit, by start.
	Windows []WindowSummary
	// Sessions are the "session" rows, most commits first.
	Sessions []SessionSummary
}

// WindowSummary is one 30-day window: its totals over every area and its
// top areas.
type WindowSummary struct {
	Start, End string
	Totals
	// Top are the ranked areas, rank 1 first.
	Top []AreaTotals
}

// SessionSummary is one area's session.
type SessionSummary struct {
	Area, First, Last string
	Totals
}

// Summarize reads output rows (as in CSVHeader, any order). It fails on a
// row it cannot read, naming it.
func Summarize(rows []string) (*Summary, error) {
	sum := &Summary{Rows: map[string]int{}}
	wins := map[string]*WindowSummary{}
	win := func(start, end string) *WindowSummary {
		w := wins[start]
		if w == nil {
			w = &WindowSummary{Start: start, End: end}
			wins[start] = w
		}
		return w
	}
	type ranked struct {
		rank int
		at   AreaTotals
	}
	tops := map[string][]ranked{}
	for _, row := range rows {
		f := strings.Split(row, ",")
		if len(f) != 8 {
			return nil, fmt.Errorf("commitactivity: output row %q: %d columns, want 8 (%s)", row, len(f), CSVHeader)
		}
		var t Totals
		var err error
		for i, p := range []*int64{&t.Commits, &t.Insertions, &t.Deletions} {
			if *p, err = strconv.ParseInt(f[4+i], 10, 64); err != nil {
				return nil, fmt.Errorf("commitactivity: output row %q: column %d: %v", row, 5+i, err)
			}
		}
		sum.Rows[f[0]]++
		switch f[0] {
		case KindArea:
			w := win(f[1], f[2])
			w.Totals = SumTotals(w.Totals, t)
			sum.Commits += t.Commits
		case KindTop:
			rank, err := strconv.Atoi(f[7])
			if err != nil {
				return nil, fmt.Errorf("commitactivity: output row %q: rank: %v", row, err)
			}
			win(f[1], f[2])
			tops[f[1]] = append(tops[f[1]], ranked{rank, AreaTotals{Area: f[3], Totals: t}})
		case KindSession:
			sum.Sessions = append(sum.Sessions, SessionSummary{Area: f[3], First: f[1], Last: f[2], Totals: t})
		default:
			return nil, fmt.Errorf("commitactivity: output row %q: unknown kind %q", row, f[0])
		}
	}
	for start, rs := range tops {
		slices.SortFunc(rs, func(a, b ranked) int { return a.rank - b.rank })
		for _, r := range rs {
			wins[start].Top = append(wins[start].Top, r.at)
		}
	}
	for _, w := range wins {
		sum.Windows = append(sum.Windows, *w)
	}
	slices.SortFunc(sum.Windows, func(a, b WindowSummary) int { return strings.Compare(a.Start, b.Start) })
	slices.SortFunc(sum.Sessions, func(a, b SessionSummary) int {
		if a.Commits != b.Commits {
			return int(b.Commits - a.Commits)
		}
		return strings.Compare(a.First+a.Area, b.First+b.Area)
	})
	return sum, nil
}

// PrintTable writes a short table: the row counts, the last `windows`
// windows with their top areas, and the `sessions` sessions with the most
// commits.
func (s *Summary) PrintTable(w io.Writer, windows, sessions int) {
	fmt.Fprintf(w, "%d commits; %d output rows: %d area totals in %d windows of 30 days, %d top-%d rows, %d sessions (7-day gap)\n",
		s.Commits, s.Rows[KindArea]+s.Rows[KindTop]+s.Rows[KindSession], s.Rows[KindArea], len(s.Windows), s.Rows[KindTop], TopN, s.Rows[KindSession])
	fmt.Fprintf(w, "\nthe last %d 30-day windows of event time (UTC):\n", windows)
	fmt.Fprintf(w, "%-10s  %-10s  %7s  %8s  %8s  %s\n", "from", "to", "commits", "+lines", "-lines", "top areas by commits")
	for _, win := range s.Windows[max(0, len(s.Windows)-windows):] {
		var top []string
		for _, a := range win.Top {
			top = append(top, fmt.Sprintf("%s %d", a.Area, a.Commits))
		}
		fmt.Fprintf(w, "%-10s  %-10s  %7d  %8d  %8d  %s\n", day(win.Start), day(win.End), win.Commits, win.Insertions, win.Deletions, strings.Join(top, ", "))
	}
	fmt.Fprintf(w, "\nthe %d sessions with the most commits (an area's commits with no 7-day gap):\n", sessions)
	fmt.Fprintf(w, "%-16s  %-10s  %-10s  %7s  %8s  %8s\n", "area", "first", "last", "commits", "+lines", "-lines")
	for _, ss := range s.Sessions[:min(sessions, len(s.Sessions))] {
		fmt.Fprintf(w, "%-16s  %-10s  %-10s  %7d  %8d  %8d\n", ss.Area, day(ss.First), day(ss.Last), ss.Commits, ss.Insertions, ss.Deletions)
	}
}

// day cuts an RFC 3339 time to its date.
func day(t string) string {
	if d, _, ok := strings.Cut(t, "T"); ok {
		return d
	}
	return t
}

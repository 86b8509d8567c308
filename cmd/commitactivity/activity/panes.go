package activity

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// Panes is what the streaming job's output rows (StreamCSVHeader, every
// pane of every window, accumulating) say once the job is done.
type Panes struct {
	// Rows counts the output rows read, by kind.
	Rows map[string]int
	// AreaPanes counts the "area" panes by timing ("ontime", "late").
	AreaPanes map[string]int
	// OnTime is the commits of the on-time "area" panes: the rows that
	// were in their window when the watermark passed its end.
	OnTime int64
	// Late is the commits the late "area" panes added (a window's last
	// pane minus its on-time pane, if it had one): rows that arrived after
	// their window had fired, within the allowed lateness.
	Late int64
	// Final is the commits of the last pane of every (window, area):
	// OnTime + Late, every row that was not dropped.
	Final int64
	// FinalRows, as in CSVHeader: each (window, area)'s last pane; each
	// area's sessions that no later pane merged into a larger one; and
	// the top areas of each window ranked from those final area rows (see
	// TopRefired).
	FinalRows []string
	// SessionCommits is the commits of the final sessions: every row
	// that the sessions' GroupByKey did not drop.
	SessionCommits int64
	// TopWindows counts the windows with "top" rows, and TopRefired those
	// where top.Largest fired more than once (a rank repeats): after a
	// late area pane. Those rows carry no pane (see formatTopFn), so which
	// ranking is the last cannot be told; and top.Largest's accumulating
	// late pane ranks every area pane it was given, an area's earlier,
	// smaller total beside its later one (Beam has no retractions). So
	// FinalRows rank the final area rows instead.
	TopWindows, TopRefired int
}

// streamRow is an output row split into its CSVHeader part and its pane.
type streamRow struct {
	row    string // CSVHeader columns
	f      []string
	timing string
	index  int64
	totals Totals
}

func parseStreamRow(line string) (streamRow, error) {
	f := strings.Split(line, ",")
	if len(f) != 10 {
		return streamRow{}, fmt.Errorf("commitactivity: output row %q: %d columns, want 10 (%s)", line, len(f), StreamCSVHeader)
	}
	r := streamRow{row: strings.Join(f[:8], ","), f: f[:8], timing: f[8], index: -1}
	var err error
	if f[0] != KindTop || f[9] != "" {
		if r.index, err = strconv.ParseInt(f[9], 10, 64); err != nil {
			return streamRow{}, fmt.Errorf("commitactivity: output row %q: pane index: %v", line, err)
		}
	}
	for i, p := range []*int64{&r.totals.Commits, &r.totals.Insertions, &r.totals.Deletions} {
		if *p, err = strconv.ParseInt(f[4+i], 10, 64); err != nil {
			return streamRow{}, fmt.Errorf("commitactivity: output row %q: column %d: %v", line, 5+i, err)
		}
	}
	return r, nil
}

// ReadPanes reads the streaming job's output rows (any order) and returns
// the final rows and the counts. It fails on a row it cannot read, and
// when the panes contradict accumulating panes under the default trigger:
// a (window, area) pane index twice, a gap in a window's pane indexes, a
// later pane with fewer commits than an earlier one, an on-time pane that
// is not a window's first, or an early pane.
func ReadPanes(lines []string) (*Panes, error) {
	p := &Panes{Rows: map[string]int{}, AreaPanes: map[string]int{}}
	type key struct{ start, area string }
	areas := map[key][]streamRow{}
	sessions := map[string][]streamRow{}
	tops := map[string][]streamRow{}
	for _, line := range lines {
		r, err := parseStreamRow(line)
		if err != nil {
			return nil, err
		}
		p.Rows[r.f[0]]++
		switch r.f[0] {
		case KindArea:
			k := key{r.f[1], r.f[3]}
			areas[k] = append(areas[k], r)
			p.AreaPanes[r.timing]++
		case KindSession:
			sessions[r.f[3]] = append(sessions[r.f[3]], r)
		case KindTop:
			tops[r.f[1]] = append(tops[r.f[1]], r)
		default:
			return nil, fmt.Errorf("commitactivity: output row %q: unknown kind %q", line, r.f[0])
		}
	}

	// Area rows: a window's panes are 0, 1, … with growing totals; the
	// first may be on time, the others are late.
	byWindow := map[string][]AreaTotals{}
	ends := map[string]string{}
	for k, rs := range areas {
		slices.SortFunc(rs, func(a, b streamRow) int { return cmp.Compare(a.index, b.index) })
		var onTime int64
		for i, r := range rs {
			switch {
			case r.index != int64(i):
				return nil, fmt.Errorf("commitactivity: area %s, window from %s: pane indexes %v, want 0..%d each once", k.area, k.start, indexes(rs), len(rs)-1)
			case i > 0 && r.totals.Commits < rs[i-1].totals.Commits:
				return nil, fmt.Errorf("commitactivity: area %s, window from %s: pane %d has %d commits, pane %d had %d: not accumulating", k.area, k.start, i, r.totals.Commits, i-1, rs[i-1].totals.Commits)
			case r.timing == "ontime" && i > 0, r.timing != "ontime" && r.timing != "late":
				return nil, fmt.Errorf("commitactivity: area %s, window from %s: pane %d is %s", k.area, k.start, i, r.timing)
			}
			if r.timing == "ontime" {
				onTime = r.totals.Commits
			}
		}
		last := rs[len(rs)-1]
		p.OnTime += onTime
		p.Late += last.totals.Commits - onTime
		p.Final += last.totals.Commits
		p.FinalRows = append(p.FinalRows, last.row)
		byWindow[k.start] = append(byWindow[k.start], AreaTotals{Area: k.area, Totals: last.totals})
		ends[k.start] = last.f[2]
	}

	// Top rows: ranked again from the final area rows.
	for start, as := range byWindow {
		sort.Slice(as, func(i, j int) bool { return LessByCommits(as[j], as[i]) })
		for i, a := range as[:min(TopN, len(as))] {
			row := strings.Join([]string{KindTop, start, ends[start], a.Area, strconv.FormatInt(a.Commits, 10), strconv.FormatInt(a.Insertions, 10), strconv.FormatInt(a.Deletions, 10), strconv.Itoa(i + 1)}, ",")
			p.FinalRows = append(p.FinalRows, row)
		}
	}
	for _, rs := range tops {
		p.TopWindows++
		ranks := map[string]bool{}
		for _, r := range rs {
			if ranks[r.f[7]] {
				p.TopRefired++ // a rank twice: more than one pane
				break
			}
			ranks[r.f[7]] = true
		}
	}

	// Sessions: a pane of a session that later merged with another is
	// contained in the merged one's [first, last]; the final sessions of
	// an area are the maximal intervals (two final sessions are at least
	// the gap apart), each with its largest (latest) total.
	for _, rs := range sessions {
		slices.SortFunc(rs, func(a, b streamRow) int {
			return cmp.Or(strings.Compare(a.f[1], b.f[1]), -strings.Compare(a.f[2], b.f[2]), -cmp.Compare(a.totals.Commits, b.totals.Commits))
		})
		lastEnd := ""
		for _, r := range rs {
			if lastEnd != "" && r.f[2] <= lastEnd {
				continue // inside a session kept already
			}
			if lastEnd != "" && r.f[1] <= lastEnd {
				return nil, fmt.Errorf("commitactivity: area %s: session %s..%s overlaps the one before it (ending %s) and no pane holds both", r.f[3], r.f[1], r.f[2], lastEnd)
			}
			p.FinalRows = append(p.FinalRows, r.row)
			p.SessionCommits += r.totals.Commits
			lastEnd = r.f[2]
		}
	}
	slices.Sort(p.FinalRows)
	return p, nil
}

// The unique names of the GroupByKeys of the job's windows with
// Windowing.Panes (Windows, sumPerKey): the plan's stages they head. (The
// Go SDK's GroupByKey is a CoGBK of one input, named so.)
const (
	// FixedGroupByKey groups the commits of each area and 30-day window.
	FixedGroupByKey = "Fixed30d/CoGBK"
	// SessionsGroupByKey groups the commits of each area's sessions.
	SessionsGroupByKey = "Sessions7d/CoGBK"
)

// DroppedRows returns the values the runner dropped as expired
// (runner.Result.LateDropped, by stage name) at the GroupByKey whose
// unique name is gbk (FixedGroupByKey, SessionsGroupByKey) in plan pl:
// with Windowing.Panes its values are commits, so these are rows. It fails
// if no stage of pl is headed by gbk.
func DroppedRows(pl *plan.Plan, lateDropped map[string]int64, gbk string) (int64, error) {
	for _, st := range pl.Stages {
		if st.Head == plan.HeadGroupByKey && st.HeadUniqueName == gbk {
			return lateDropped[st.Name], nil
		}
	}
	return 0, fmt.Errorf("commitactivity: no GroupByKey stage %q in the plan of %s", gbk, pl.ApplicationID)
}

func indexes(rs []streamRow) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.index
	}
	return out
}

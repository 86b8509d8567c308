package activity

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/top"
)

// The job's windows.
const (
	// WindowSize is the length of the fixed event-time windows of the
	// per-area totals and the top areas: 30 days, aligned on the Unix epoch.
	WindowSize = 30 * 24 * time.Hour
	// SessionGap is the gap of the per-area session windows: a session ends
	// when an area sees no commit for 7 days of event time.
	SessionGap = 7 * 24 * time.Hour
	// TopN is how many areas the "top" rows rank per window.
	TopN = 5
)

// Header is the first line of git-commits.csv; it is skipped, not counted
// as malformed.
const Header = "arrival_ms,event_ms,commit,area,files,insertions,deletions"

// CSVHeader names the columns of every output row (see Kind*). The CSV file
// written by textio.Write holds the rows only, in no particular order.
const CSVHeader = "kind,start,end,area,commits,insertions,deletions,rank"

// The kinds of output rows (the first column).
const (
	// KindArea: one area's totals in one fixed window; start and end are
	// the window's bounds [start, end); rank is empty.
	KindArea = "area"
	// KindTop: one of the TopN areas of a fixed window by commits (ties:
	// area name ascending); rank is 1..TopN.
	KindTop = "top"
	// KindSession: one session of an area; start is its first commit's
	// event time, end its last commit's (the session window itself ends
	// SessionGap later); rank is empty.
	KindSession = "session"
)

// MalformedRows counts input rows that are skipped because they do not
// parse (the header is not one of them). Each one is also logged.
var MalformedRows = beam.NewCounter("commitactivity", "malformed_rows")

// ParsedRows counts input rows that parse: the commits the job counts.
var ParsedRows = beam.NewCounter("commitactivity", "parsed_rows")

// Totals are the commits, inserted and deleted lines of one area in one
// window. Summed with SumTotals.
type Totals struct {
	Commits, Insertions, Deletions int64
}

// AreaTotals is an area with its totals in one window: the element ranked
// by top.Largest.
type AreaTotals struct {
	Area string
	Totals
}

// Row is one parsed line of git-commits.csv, the fields the job uses.
type Row struct {
	// EventMillis is the author time, Unix epoch milliseconds.
	EventMillis int64
	Area        string
	Insertions  int64
	Deletions   int64
}

// ParseRow parses one line of git-commits.csv (a trailing "\r" is ignored).
// It returns an error naming the problem for a line that is not 7
// comma-separated fields with integer event_ms, files, insertions and
// deletions, and a non-empty area. The header is an error too: callers skip
// it first.
func ParseRow(line string) (Row, error) {
	line = strings.TrimRight(line, "\r")
	f := strings.Split(line, ",")
	if len(f) != 7 {
		return Row{}, fmt.Errorf("%d fields, want 7", len(f))
	}
	var r Row
	var err error
	if r.EventMillis, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return Row{}, fmt.Errorf("event_ms %q is not an integer", f[1])
	}
	if f[3] == "" {
		return Row{}, fmt.Errorf("empty area")
	}
	r.Area = f[3]
	if _, err := strconv.ParseInt(f[4], 10, 64); err != nil {
		return Row{}, fmt.Errorf("files %q is not an integer", f[4])
	}
	if r.Insertions, err = strconv.ParseInt(f[5], 10, 64); err != nil {
		return Row{}, fmt.Errorf("insertions %q is not an integer", f[5])
	}
	if r.Deletions, err = strconv.ParseInt(f[6], 10, 64); err != nil {
		return Row{}, fmt.Errorf("deletions %q is not an integer", f[6])
	}
	if t := mtime.Time(r.EventMillis); t < mtime.MinTimestamp || t >= mtime.EndOfGlobalWindowTime {
		return Row{}, fmt.Errorf("event_ms %d is outside Beam's time range", r.EventMillis)
	}
	return r, nil
}

// parseFn turns a line into (area, Totals of one commit) at the commit's
// event time. The header is dropped; a malformed line is counted in
// MalformedRows, logged with the reason, and dropped.
func parseFn(ctx context.Context, line string, emit func(beam.EventTime, string, Totals)) {
	if strings.TrimRight(line, "\r") == Header {
		return
	}
	r, err := ParseRow(line)
	if err != nil {
		MalformedRows.Inc(ctx, 1)
		log.Warnf(ctx, "commitactivity: skipping malformed row %q: %v", line, err)
		return
	}
	ParsedRows.Inc(ctx, 1)
	emit(mtime.FromMilliseconds(r.EventMillis), r.Area, Totals{Commits: 1, Insertions: r.Insertions, Deletions: r.Deletions})
}

// SumTotals adds two Totals: the combine function of every per-area sum.
func SumTotals(a, b Totals) Totals {
	return Totals{Commits: a.Commits + b.Commits, Insertions: a.Insertions + b.Insertions, Deletions: a.Deletions + b.Deletions}
}

// LessByCommits orders AreaTotals by commits, then by area name descending,
// so that top.Largest ranks more commits first and, among equals, the
// alphabetically first area first.
func LessByCommits(a, b AreaTotals) bool {
	if a.Commits != b.Commits {
		return a.Commits < b.Commits
	}
	return a.Area > b.Area
}

func toAreaTotals(area string, t Totals) AreaTotals { return AreaTotals{Area: area, Totals: t} }

// FormatTime is how output rows write times: RFC 3339 in UTC, to the second.
func FormatTime(t mtime.Time) string {
	return t.ToTime().UTC().Format(time.RFC3339)
}

// FormatRow writes one output row (columns as in CSVHeader); rank 0 is
// written as an empty column.
func FormatRow(kind string, start, end mtime.Time, area string, t Totals, rank int) string {
	r := ""
	if rank > 0 {
		r = strconv.Itoa(rank)
	}
	return fmt.Sprintf("%s,%s,%s,%s,%d,%d,%d,%s", kind, FormatTime(start), FormatTime(end), area, t.Commits, t.Insertions, t.Deletions, r)
}

func interval(w beam.Window) (window.IntervalWindow, error) {
	iw, ok := w.(window.IntervalWindow)
	if !ok {
		return window.IntervalWindow{}, fmt.Errorf("commitactivity: window %v is not an interval window", w)
	}
	return iw, nil
}

// formatAreaFn formats one area's totals in one fixed window (KindArea).
type formatAreaFn struct {
	// Panes appends the pane's columns (PaneColumns).
	Panes bool `json:"panes,omitempty"`
}

// ProcessElement formats one pane of (area, window).
func (f *formatAreaFn) ProcessElement(pn beam.PaneInfo, w beam.Window, area string, t Totals) (string, error) {
	iw, err := interval(w)
	if err != nil {
		return "", err
	}
	return withPane(f.Panes, pn, FormatRow(KindArea, iw.Start, iw.End, area, t, 0)), nil
}

// formatTopFn formats the ranked areas of one fixed window (KindTop).
type formatTopFn struct {
	// Panes appends empty pane columns (PaneColumns): top.Largest is a
	// Combine, and the Go SDK's combine passes no pane downstream.
	Panes bool `json:"panes,omitempty"`
}

// ProcessElement formats a window's ranking, a row per rank.
func (f *formatTopFn) ProcessElement(w beam.Window, ranked []AreaTotals, emit func(string)) error {
	iw, err := interval(w)
	if err != nil {
		return err
	}
	for i, a := range ranked {
		row := FormatRow(KindTop, iw.Start, iw.End, a.Area, a.Totals, i+1)
		if f.Panes {
			row += ",,"
		}
		emit(row)
	}
	return nil
}

// formatSessionFn formats one session of an area (KindSession).
type formatSessionFn struct {
	// Panes appends the pane's columns (PaneColumns).
	Panes bool `json:"panes,omitempty"`
}

// ProcessElement formats one pane of (area, session window).
func (f *formatSessionFn) ProcessElement(pn beam.PaneInfo, w beam.Window, area string, t Totals) (string, error) {
	iw, err := interval(w)
	if err != nil {
		return "", err
	}
	return withPane(f.Panes, pn, FormatRow(KindSession, iw.Start, iw.End-mtime.FromDuration(SessionGap), area, t, 0)), nil
}

// PaneColumns name the two columns a row gets when Windowing.Panes is
// set: the pane's timing ("early", "ontime" or "late", as
// typex.PaneTiming.String) and its index (0 for a window's first pane).
// Both are empty in "top" rows (see formatTopFn).
const PaneColumns = "pane,pane_index"

// withPane appends the pane's columns to row if panes is set.
func withPane(panes bool, pn beam.PaneInfo, row string) string {
	if !panes {
		return row
	}
	return row + "," + pn.Timing.String() + "," + strconv.FormatInt(pn.Index, 10)
}

func init() {
	register.Function3x0(parseFn)
	register.Emitter3[beam.EventTime, string, Totals]()
	register.Function2x1(SumTotals)
	register.Function2x1(LessByCommits)
	register.Function2x1(toAreaTotals)
	register.DoFn4x2[beam.PaneInfo, beam.Window, string, Totals, string, error](&formatAreaFn{})
	register.DoFn3x1[beam.Window, []AreaTotals, func(string), error](&formatTopFn{})
	register.Function2x2(sumValuesFn)
	register.Iter1[Totals]()
	register.Emitter1[string]()
	register.DoFn4x2[beam.PaneInfo, beam.Window, string, Totals, string, error](&formatSessionFn{})
}

// Options say where the job reads and writes.
type Options struct {
	// Input is the git-commits.csv file (any Beam filesystem path; the
	// local one is linked in).
	Input string
	// Output is the CSV file textio.Write writes; empty writes none.
	Output string
}

// OutputScope is the name of the scope of the Reshuffle whose Kafka topic
// on the kafkastreams runner is the job's output topic: the runner names it
// "<application_id>-s<N>-" + OutputScope + "…" (see OutputTopic).
const OutputScope = "KafkaOutput"

// Build adds the job to s and returns its output rows (strings as in
// CSVHeader, in the global window): textio.Read -> Parse (event time) ->
// Windows, then textio.Write(Output) and a Reshuffle in scope OutputScope,
// whose input topic on this runner holds every row exactly once.
func Build(s beam.Scope, opts Options) beam.PCollection {
	lines := textio.Read(s.Scope("Read"), opts.Input)
	rows := Windows(s, Parse(s, lines), Windowing{})
	if opts.Output != "" {
		textio.Write(s, opts.Output, rows)
	}
	beam.Reshuffle(s.Scope(OutputScope), rows)
	return rows
}

// Parse turns lines of git-commits.csv (strings, any windowing) into the
// commits the windows take: KV<area, Totals of one commit>, each at its
// row's event_ms. The header is dropped; a malformed line is counted
// (MalformedRows), logged and dropped; every other line is counted
// (ParsedRows). Its transforms are in scope "Parse".
func Parse(s beam.Scope, lines beam.PCollection) beam.PCollection {
	return beam.ParDo(s.Scope("Parse"), parseFn, lines)
}

// Windowing is how the job's windows treat values behind the watermark.
// The zero value is Beam's default, the bounded job's: no allowed
// lateness (a late value is dropped), discarding panes, rows as in
// CSVHeader.
type Windowing struct {
	// AllowedLateness is how long after its window's end (in event time,
	// as the input watermark measures it) a value is still added to the
	// window and fires a late pane, rather than being dropped; >= 0.
	AllowedLateness time.Duration
	// Accumulate makes every pane of a window hold all of the window's
	// values so far (beam.PanesAccumulate), so a window's last pane is its
	// whole total; false: each pane holds only the values since the
	// previous one (Beam's default, discarding).
	Accumulate bool
	// Panes appends PaneColumns to every output row, and computes the
	// per-area totals of both kinds of windows with GroupByKey and a sum
	// (sumPerKey) instead of CombinePerKey: the Go SDK's combine passes no pane downstream
	// (exec.MergeAccumulators and exec.ExtractOutput build their outputs
	// without one), and a GroupByKey's values are then the commits
	// themselves, so the values the runner drops as expired
	// (runner.Result.LateDropped) are rows, not precombined accumulators.
	Panes bool
}

// sumPerKey sums the Totals of each key and window of col: CombinePerKey,
// or with w.Panes GroupByKey and sumValuesFn.
func (w Windowing) sumPerKey(s beam.Scope, col beam.PCollection) beam.PCollection {
	if !w.Panes {
		return beam.CombinePerKey(s, SumTotals, col)
	}
	return beam.ParDo(s.Scope("Sum"), sumValuesFn, beam.GroupByKey(s, col))
}

// sumValuesFn is SumTotals over a key's grouped values.
func sumValuesFn(area string, values func(*Totals) bool) (string, Totals) {
	var sum, t Totals
	for values(&t) {
		sum = SumTotals(sum, t)
	}
	return area, sum
}

// options are the WindowInto options of w: none for the zero value, so
// the bounded job's pipeline is what it was before Windowing existed.
func (w Windowing) options() []beam.WindowIntoOption {
	var opts []beam.WindowIntoOption
	if w.AllowedLateness > 0 {
		opts = append(opts, beam.AllowedLateness(w.AllowedLateness))
	}
	if w.Accumulate {
		opts = append(opts, beam.PanesAccumulate())
	}
	return opts
}

// Windows adds the job's windows over commits (Parse's output) and returns
// the output rows (strings as in CSVHeader, plus PaneColumns if w.Panes,
// in the global window):
//
//   - 30-day fixed windows -> CombinePerKey(SumTotals) -> "area" rows, and
//     -> top.Largest(5) -> "top" rows;
//   - 7-day-gap sessions -> CombinePerKey(SumTotals) -> "session" rows;
//
// (GroupByKey and a sum instead of CombinePerKey if w.Panes), then all
// rows re-windowed into the global window and flattened. Both
// kinds of windows take w's allowed lateness and accumulation mode, under
// Beam's default trigger (a pane when the watermark passes the window's
// end, then one per late firing).
func Windows(s beam.Scope, commits beam.PCollection, w Windowing) beam.PCollection {
	fs := s.Scope("Fixed30d")
	fixed := beam.WindowInto(fs, window.NewFixedWindows(WindowSize), commits, w.options()...)
	perArea := w.sumPerKey(fs, fixed)
	areaRows := beam.ParDo(fs, &formatAreaFn{Panes: w.Panes}, perArea)
	ranked := top.Largest(fs, beam.ParDo(fs, toAreaTotals, perArea), TopN, LessByCommits)
	topRows := beam.ParDo(fs, &formatTopFn{Panes: w.Panes}, ranked)

	ss := s.Scope("Sessions7d")
	sessions := beam.WindowInto(ss, window.NewSessions(SessionGap), commits, w.options()...)
	sessionRows := beam.ParDo(ss, &formatSessionFn{Panes: w.Panes}, w.sumPerKey(ss, sessions))

	gs := s.Scope("Rows")
	global := func(c beam.PCollection) beam.PCollection { return beam.WindowInto(gs, window.NewGlobalWindows(), c) }
	return beam.Flatten(gs, global(areaRows), global(topRows), global(sessionRows))
}

// Pipeline is Build in a new pipeline.
func Pipeline(opts Options) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	Build(s, opts)
	return p
}

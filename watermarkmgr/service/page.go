package service

import (
	"fmt"
	"html"
	"sort"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/watermarkmgr/explain"
)

// PageHistory is how far back the page's watermark-over-time plots go.
const PageHistory = 10 * time.Minute

// PageState is what the live page at / shows, sent as JSON by GET /state
// and as server-sent events by GET /events (one "state" event a second and
// on every change, at most four a second).
type PageState struct {
	Application string `json:"application"`
	// Instance is the serving instance's id; empty in cmd/watermarkmgr.
	Instance string `json:"instance"`
	// NowMs is the server's wall clock, ms since the Unix epoch.
	NowMs        int64 `json:"nowMs"`
	StuckAfterMs int64 `json:"stuckAfterMs"`
	// GraphSVG is the stage graph drawn in Go (StageGraphSVG).
	GraphSVG string      `json:"graphSvg"`
	Stages   []PageStage `json:"stages"`
}

// PageStage is one stage on the page.
type PageStage struct {
	Info StageInfo `json:"info"`
	// Watermark is the stage as GET /watermarks shows it; nil before its
	// first report.
	Watermark *StageJSON `json:"watermark"`
	// NewestEventMs is the newest event time any source partition upstream
	// of the stage (or of the stage itself) has read, in ms; nil if none.
	NewestEventMs *int64 `json:"newestEventMs"`
	// BehindNewestMs is NewestEventMs minus the watermark; nil when either
	// has no value (the watermark at an end of Beam's range).
	BehindNewestMs *int64              `json:"behindNewestMs"`
	Explanation    explain.Explanation `json:"explanation"`
	// Local is this instance's share of the stage; nil in cmd/watermarkmgr.
	Local *LocalStage `json:"local"`
	// App is the application's counts of the stage (every instance's
	// committed transactions, from the metrics topic); nil on an
	// instance's page and before the stage's first counted commit.
	App *AppStage `json:"app"`
	// History are [wall-clock ms, watermark ms] points of the last
	// PageHistory, oldest first; a watermark at an end of Beam's range is
	// sent as null.
	History [][2]*int64 `json:"history"`
}

// BuildPageState assembles the page from the tracker's views, the graph,
// the local tasks, the application's counts (app, by stage name; may be
// nil) and the explanations, at now. Pure: the HTTP handler reads the
// tracker, the counts and the clock.
func BuildPageState(views []StageView, info Info, local map[string]LocalStage, app map[string]AppStage, since, now time.Time) PageState {
	in := ExplainInput(views, info, local, since, now)
	xs := explain.Explain(in)
	byName := map[string]StageView{}
	for _, v := range views {
		byName[v.Stage] = v
	}
	infos := map[string]StageInfo{}
	for _, si := range info.Stages {
		infos[si.Name] = si
	}
	ps := PageState{Application: info.Application, Instance: info.Instance, NowMs: now.UnixMilli(), StuckAfterMs: info.stuckAfter().Milliseconds()}
	newest := newestEventTimes(in.Stages, views)
	for i, st := range in.Stages {
		si, ok := infos[st.Name]
		if !ok {
			si = StageInfo{Name: st.Name}
		}
		pg := PageStage{Info: si, Explanation: xs[i]}
		if v, ok := byName[st.Name]; ok {
			j := ToJSON(v, now)
			pg.Watermark = &j
			from := now.Add(-PageHistory)
			for k, h := range v.History {
				if h.At.Before(from) && k+1 < len(v.History) && !v.History[k+1].At.After(from) {
					continue // superseded before the window
				}
				at := h.At.UnixMilli()
				pt := [2]*int64{&at, nil}
				if !h.Held && h.Watermark > mtime.MinTimestamp && h.Watermark < mtime.MaxTimestamp {
					wm := int64(h.Watermark)
					pt[1] = &wm
				}
				pg.History = append(pg.History, pt)
			}
			if n, ok := newest[st.Name]; ok && !v.Snapshot.Held && v.Snapshot.Watermark > mtime.MinTimestamp && v.Snapshot.Watermark < mtime.MaxTimestamp {
				b := n - int64(v.Snapshot.Watermark)
				pg.BehindNewestMs = &b
			}
		}
		if n, ok := newest[st.Name]; ok {
			pg.NewestEventMs = &n
		}
		if l, ok := local[st.Name]; ok {
			pg.Local = &l
		}
		if a, ok := app[st.Name]; ok {
			pg.App = &a
		}
		ps.Stages = append(ps.Stages, pg)
	}
	ps.GraphSVG = StageGraphSVG(ps.Stages)
	return ps
}

// newestEventTimes is, per stage, the newest event time read by a source
// partition of the stage or of a stage upstream of it (transitively).
func newestEventTimes(stages []explain.Stage, views []StageView) map[string]int64 {
	own := map[string]int64{}
	for _, v := range views {
		for _, src := range v.Source {
			if src.GetHasLastEventTime() {
				if n, ok := own[v.Stage]; !ok || src.GetLastEventTimeMillis() > n {
					own[v.Stage] = src.GetLastEventTimeMillis()
				}
			}
		}
	}
	ups := map[string][]string{}
	for _, s := range stages {
		ups[s.Name] = s.Upstreams
	}
	out := map[string]int64{}
	var visit func(name string, seen map[string]bool) (int64, bool)
	visit = func(name string, seen map[string]bool) (int64, bool) {
		if seen[name] {
			return 0, false
		}
		seen[name] = true
		best, ok := own[name]
		for _, u := range ups[name] {
			if n, found := visit(u, seen); found && (!ok || n > best) {
				best, ok = n, true
			}
		}
		return best, ok
	}
	for _, s := range stages {
		if n, ok := visit(s.Name, map[string]bool{}); ok {
			out[s.Name] = n
		}
	}
	return out
}

// Layout of the stage graph, in SVG user units.
const (
	nodeW, nodeH = 230, 74
	gapX, gapY   = 70, 24
	margin       = 12
)

// StageGraphSVG draws the stage graph: a node per stage (name, head kind,
// watermark, state colour; the fused transforms in its tooltip), an edge
// per upstream (a solid line for the input topic, a dashed one for a side
// input), stages in columns by their depth from the sources. Stages
// without graph information stand in one column by themselves. The graph
// is small (tens of stages), so a longest-path layering is enough; drawing
// it in Go keeps the page free of any JavaScript library.
func StageGraphSVG(stages []PageStage) string {
	depth := map[string]int{}
	known := map[string]*PageStage{}
	for i := range stages {
		known[stages[i].Info.Name] = &stages[i]
	}
	var d func(name string, guard int) int
	d = func(name string, guard int) int {
		if v, ok := depth[name]; ok {
			return v
		}
		s := known[name]
		if s == nil || guard > len(stages) {
			return 0
		}
		best := 0
		for _, u := range append(append([]string{}, s.Info.Upstreams...), s.Info.SideUpstreams...) {
			if known[u] != nil {
				best = max(best, d(u, guard+1)+1)
			}
		}
		depth[name] = best
		return best
	}
	cols := map[int][]string{}
	maxCol, maxRow := 0, 0
	for _, s := range stages {
		c := d(s.Info.Name, 0)
		cols[c] = append(cols[c], s.Info.Name)
		maxCol = max(maxCol, c)
		maxRow = max(maxRow, len(cols[c])-1)
	}
	type pos struct{ x, y int }
	at := map[string]pos{}
	for c, names := range cols {
		sort.Strings(names)
		for r, n := range names {
			at[n] = pos{margin + c*(nodeW+gapX), margin + r*(nodeH+gapY)}
		}
	}
	w := 2*margin + (maxCol+1)*nodeW + maxCol*gapX
	h := 2*margin + (maxRow+1)*nodeH + maxRow*gapY
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" id="graph" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="stage graph">`, w, h, w, h)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#667"/></marker></defs>`)
	edge := func(from, to string, side bool, label string) {
		a, ok1 := at[from]
		z, ok2 := at[to]
		if !ok1 || !ok2 {
			return
		}
		x1, y1 := a.x+nodeW, a.y+nodeH/2
		x2, y2 := z.x, z.y+nodeH/2
		dash := ""
		if side {
			dash = ` stroke-dasharray="5,4"`
		}
		// Straight at the source's height through the columns between,
		// then a bend in the last gap: an edge over several columns then
		// passes beside, not through, the nodes of the columns it skips
		// when they stand higher (as the upstream's column is filled first).
		bend := x2 - gapX
		if bend < x1 {
			bend = x1
		}
		fmt.Fprintf(&b, `<path class="edge" d="M%d,%d L%d,%d C%d,%d %d,%d %d,%d" fill="none" stroke="#667" stroke-width="1.5"%s marker-end="url(#arrow)"><title>%s</title></path>`,
			x1, y1, bend, y1, bend+gapX/2, y1, x2-gapX/2, y2, x2, y2, dash, html.EscapeString(label))
	}
	for _, s := range stages {
		for _, u := range s.Info.Upstreams {
			edge(u, s.Info.Name, false, "topic "+s.Info.InputTopic)
		}
		for _, u := range s.Info.SideUpstreams {
			edge(u, s.Info.Name, true, "side input of "+s.Info.Name)
		}
	}
	for _, s := range stages {
		p := at[s.Info.Name]
		state, wm := "noreport", "no report yet"
		if s.Watermark != nil {
			state, wm = nodeState(s), nodeWatermark(s.Watermark)
		}
		tip := s.Info.Name
		if s.Info.HeadTransform != "" {
			tip += "\nhead: " + s.Info.HeadTransform
		}
		if len(s.Info.Transforms) > 0 {
			tip += "\nfused: " + strings.Join(s.Info.Transforms, ", ")
		}
		if s.Explanation.Stuck {
			tip += "\nwhy: " + s.Explanation.Text
		}
		head := s.Info.Head
		if head == "" {
			head = "plan not read yet"
		}
		if len(s.Info.KafkaSinks) > 0 {
			head += " → " + strings.Join(s.Info.KafkaSinks, ", ")
		}
		fmt.Fprintf(&b, `<g class="node %s" data-stage="%s" transform="translate(%d,%d)"><title>%s</title>`, state, html.EscapeString(s.Info.Name), p.x, p.y, html.EscapeString(tip))
		fmt.Fprintf(&b, `<rect width="%d" height="%d" rx="8"/>`, nodeW, nodeH)
		fmt.Fprintf(&b, `<text x="10" y="20" class="n">%s</text>`, html.EscapeString(clip(s.Info.Name, 30)))
		fmt.Fprintf(&b, `<text x="10" y="40" class="k">%s</text>`, html.EscapeString(clip(head, 34)))
		fmt.Fprintf(&b, `<text x="10" y="60" class="w">%s</text></g>`, html.EscapeString(wm))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// nodeState is the CSS class of a stage's node: done, stuck, held or moving.
func nodeState(s PageStage) string {
	switch {
	case s.Explanation.Cause == explain.CauseDone:
		return "done"
	case s.Explanation.Stuck:
		return "stuck"
	case s.Watermark.Held, s.Watermark.State == "not started":
		return "held"
	}
	return "moving"
}

func nodeWatermark(j *StageJSON) string {
	switch j.State {
	case "running":
		return strings.TrimSuffix(j.GlobalIso, ".000Z")
	case "held":
		return fmt.Sprintf("held: %d of %d not reported", len(j.MissingPartitions), j.TotalSourcePartitions)
	}
	return j.State
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

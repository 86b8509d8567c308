package service

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/explain"
)

// clock is a settable wall clock for a Tracker.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The tracker keeps when a stage's watermark last moved and its history:
// a report that does not move it leaves MovedAt alone.
func TestTrackerMovedAtAndHistory(t *testing.T) {
	c := &clock{t: fixed}
	tr := NewTracker(c.now)
	must(t, tr.Apply([]*pb.WatermarkReport{rep("a", 0, 100, 1, false)}))
	c.add(time.Second)
	must(t, tr.Apply([]*pb.WatermarkReport{rep("a", 0, 200, 1, false)}))
	c.add(5 * time.Second)
	must(t, tr.Apply([]*pb.WatermarkReport{rep("a", 0, 200, 1, false)})) // no move
	v, _ := tr.Stage("a")
	if !v.MovedAt.Equal(fixed.Add(time.Second)) || !v.FirstSeen.Equal(fixed) {
		t.Errorf("MovedAt %v FirstSeen %v, want %v and %v", v.MovedAt, v.FirstSeen, fixed.Add(time.Second), fixed)
	}
	if len(v.History) != 2 || v.History[0].Watermark != 100 || v.History[1].Watermark != 200 {
		t.Errorf("history %+v, want the two changes", v.History)
	}
	for i := 0; i < HistoryLen+5; i++ {
		must(t, tr.Apply([]*pb.WatermarkReport{rep("a", 0, int64(300+i), 1, false)}))
	}
	v, _ = tr.Stage("a")
	if len(v.History) != HistoryLen || v.History[len(v.History)-1].Watermark != mtime.Time(300+HistoryLen+4) {
		t.Errorf("history has %d points ending at %v, want %d ending at the last", len(v.History), v.History[len(v.History)-1].Watermark, HistoryLen)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The explanation joins the reports (owner, source), the graph and the
// local tasks: the stuck downstream stage names its upstream's partition
// and this instance's open attempt.
func TestExplainInputJoinsGraphReportsAndLocalTasks(t *testing.T) {
	c := &clock{t: fixed}
	tr := NewTracker(c.now)
	src := func(p int32, has bool) *pb.WatermarkReport {
		r := rep("s1", p, 1000, 2, false)
		r.Instance = "vm-1"
		r.Source = &pb.SourcePartition{Topic: "orders", HasLastEventTime: has, LastEventTimeMillis: 5000}
		return r
	}
	must(t, tr.Apply([]*pb.WatermarkReport{src(0, true), src(1, true), rep("s2", 0, 1000, 1, false)}))
	c.add(2 * time.Minute)
	info := Info{Instance: "vm-1", StuckAfter: time.Minute, Stages: []StageInfo{
		{Name: "s1", Head: "kafka_source", InputTopic: "orders", Partitions: 2},
		{Name: "s2", Head: "group_by_key", Upstreams: []string{"s1"}},
	}}
	local := map[string]LocalStage{"s1": {Tasks: []LocalTask{{Partition: 0, AttemptSince: fixed.Add(30 * time.Second), LagRecords: -1}}}}
	xs := explain.Explain(ExplainInput(tr.Stages(), info, local, tr.Started(), c.now()))
	if len(xs) != 2 || xs[1].Stage != "s2" {
		t.Fatalf("explanations %+v", xs)
	}
	x := xs[1]
	if !x.Stuck || x.Cause != explain.CauseAttemptOpen || x.RootStage != "s1" || x.Partition == nil || *x.Partition != 0 {
		t.Fatalf("s2: %+v", x)
	}
	for _, w := range []string{"s2 is held by its input from s1", "s1 task 0 has not reported since", "owned by this instance (vm-1), whose attempt (bundles and transaction) has been open for 1 min 30 s"} {
		if !strings.Contains(x.Text, w) {
			t.Errorf("lacks %q: %s", w, x.Text)
		}
	}
}

func TestExplainEndpointAndPage(t *testing.T) {
	c := &clock{t: fixed}
	tr := NewTracker(c.now)
	r := rep("s1", 0, 1000, 2, false)
	r.Source = &pb.SourcePartition{Topic: "orders", HasLastEventTime: true, LastEventTimeMillis: 9000}
	r.Instance = "vm-7"
	must(t, tr.Apply([]*pb.WatermarkReport{r}))
	c.add(20 * time.Second)
	info := Info{Application: "app", StuckAfter: 10 * time.Second, Stages: []StageInfo{{Name: "s1", Head: "kafka_source", InputTopic: "orders", Partitions: 2, Transforms: []string{"Parse"}}, {Name: "s2", Upstreams: []string{"s1"}, KafkaSinks: []string{"out"}}}}
	srv := httptest.NewServer(NewHTTPHandlerWith(tr, nil, nil, func() Info { return info }))
	defer srv.Close()

	var ex ExplainJSON
	getJSON(t, srv.URL+"/watermarks/explain", &ex)
	if ex.StuckAfterMs != 10000 || len(ex.Stages) != 2 {
		t.Fatalf("explain: %+v", ex)
	}
	if x := ex.Stages[0]; !x.Stuck || x.Cause != explain.CauseNeverReceivedNoIdleness || x.Partition == nil || *x.Partition != 1 ||
		!strings.Contains(x.Text, "partition 1 of topic orders has never received a record and the source has no idleness set") {
		t.Errorf("s1: %+v", x)
	}

	resp, err := http.Get(srv.URL + "/")
	must(t, err)
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	resp.Body.Close()
	if !strings.Contains(b.String(), `<script src="/page/app.js">`) || strings.Contains(b.String(), "http://") || strings.Contains(b.String(), "https://") {
		t.Errorf("page: want the embedded script and no external address:\n%s", b.String())
	}
	for _, asset := range []string{"/page/app.js", "/page/style.css"} {
		resp, err := http.Get(srv.URL + asset)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", asset, resp.Status)
		}
	}

	var ps PageState
	getJSON(t, srv.URL+"/state", &ps)
	if ps.Application != "app" || len(ps.Stages) != 2 || ps.Stages[0].Watermark == nil || ps.Stages[1].Watermark != nil {
		t.Fatalf("state: %+v", ps)
	}
	if o := ps.Stages[0].Watermark.Partitions["s1:0"].Owner; o == nil || *o != "vm-7" {
		t.Errorf("owner of s1:0: %v, want vm-7 (from its report)", o)
	}
	if n := ps.Stages[0].NewestEventMs; n == nil || *n != 9000 || ps.Stages[1].NewestEventMs == nil {
		t.Errorf("newest event time: s1 %v, s2 %v; want 9000 for both (s2 is downstream)", n, ps.Stages[1].NewestEventMs)
	}
	for _, w := range []string{`data-stage="s1"`, `data-stage="s2"`, `class="node stuck"`, `class="node noreport"`, "fused: Parse", "marker-end"} {
		if !strings.Contains(ps.GraphSVG, w) {
			t.Errorf("graph lacks %q:\n%s", w, ps.GraphSVG)
		}
	}

	// Server-sent events: a state at once, another within about a second.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
	resp, err = http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	start := time.Now()
	states := 0
	for states < 2 && sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") {
			var s PageState
			must(t, json.Unmarshal([]byte(line[len("data: "):]), &s))
			states++
		}
	}
	if states < 2 {
		t.Fatalf("got %d states from /events: %v", states, sc.Err())
	}
	if el := time.Since(start); el > 2*EventInterval {
		t.Errorf("two states took %v, want about %v", el, EventInterval)
	}
}

// The graph puts a stage right of its upstreams, with one edge per
// upstream (dashed for a side input).
func TestStageGraphSVGLayers(t *testing.T) {
	st := func(name string, ups, side []string) PageStage {
		return PageStage{Info: StageInfo{Name: name, Upstreams: ups, SideUpstreams: side}}
	}
	svg := StageGraphSVG([]PageStage{st("s0", nil, nil), st("s1", []string{"s0"}, nil), st("s2", []string{"s1"}, []string{"s0"})})
	for name, x := range map[string]int{"s0": margin, "s1": margin + nodeW + gapX, "s2": margin + 2*(nodeW+gapX)} {
		if !strings.Contains(svg, `data-stage="`+name+`" transform="translate(`+itoa(x)+",") {
			t.Errorf("%s not at x=%d:\n%s", name, x, svg)
		}
	}
	if n := strings.Count(svg, `class="edge"`); n != 3 {
		t.Errorf("%d edges, want 3", n)
	}
	if n := strings.Count(svg, "stroke-dasharray"); n != 1 {
		t.Errorf("%d dashed edges, want 1", n)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

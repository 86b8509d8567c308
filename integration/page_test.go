package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/chromedp/chromedp"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/runner/plantopic"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// RequireChromiumEnv, set to 1 (.ci/run sets it), makes the tests that
// drive a browser fail instead of skipping when no Chromium is installed:
// in CI a missing browser is a missing install step, not a reason to test
// less.
const RequireChromiumEnv = "KAFKASTREAMS_REQUIRE_CHROMIUM"

// chromiumPath returns the Chromium binary (Debian's chromium package), or
// skips the test, or fails it under RequireChromiumEnv=1.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(RequireChromiumEnv) == "1" {
		t.Fatalf("no chromium in PATH, and %s=1: install Debian's chromium package (.ci/run does)", RequireChromiumEnv)
	}
	t.Skipf("no chromium in PATH (apt-get install chromium); set %s=1 to fail instead", RequireChromiumEnv)
	return ""
}

// newBrowser starts headless Chromium and returns a chromedp context on a
// tab of it; the test's cleanup closes it.
func newBrowser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })
	if err := chromedp.Do(bctx, chromedp.Sleep(0)); err != nil {
		t.Fatalf("starting headless chromium: %v", err)
	}
	return bctx
}

// pageLook is what a person sees on the page at one moment, read from the
// DOM.
type pageLook struct {
	Live bool `json:"live"`
	// Stages are the stage cards: name -> the watermark text shown.
	Stages map[string]string `json:"stages"`
	// Nodes are the stages drawn in the graph.
	Nodes []string `json:"nodes"`
	// Stuck are the "why is it stuck" entries: stage -> sentences.
	Stuck map[string]string `json:"stuck"`
	// MinRows are the partition rows marked as the minimum.
	MinRows int `json:"minRows"`
	// Texts are the stage cards' whole texts: name -> text.
	Texts map[string]string `json:"texts"`
}

const lookJS = `(() => {
  const out = {live: document.getElementById("conn").textContent === "live", stages: {}, nodes: [], stuck: {}, minRows: 0, texts: {}};
  for (const e of document.querySelectorAll("#stages .stage")) {
    const wm = e.querySelector(".wm");
    out.stages[e.dataset.stage] = wm ? wm.textContent : "";
    out.texts[e.dataset.stage] = e.textContent;
  }
  for (const g of document.querySelectorAll("#graph g.node")) out.nodes.push(g.dataset.stage);
  if (!document.getElementById("stuck").hidden)
    for (const li of document.querySelectorAll("#stuck-list li")) out.stuck[li.dataset.stage] = li.textContent;
  out.minRows = document.querySelectorAll("table.parts tr.min").length;
  return out;
})()`

func look(t *testing.T, bctx context.Context) pageLook {
	t.Helper()
	l, err := chromedp.Run(bctx, chromedp.Evaluate[pageLook](lookJS))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	return l
}

// TestLivePage opens an instance's page in headless Chromium while a job
// runs, as a person would, and checks what it shows. The job has two
// independent branches: a moving one (topic a, one partition, records
// stamped with the wall clock every 100 ms, 1-second windows counted and
// written out) and a deliberately stuck one (topic b, two partitions,
// records in partition 0 only, no idleness: partition 1 holds its source
// stage forever, seed 002's trap). The page must show every stage of the
// plan (a card and a graph node each), the moving branch's watermarks
// later at a second look 3 s after the first, the minimum partition
// marked, and under "Why is it stuck" the stuck source stage explained
// with partition 1 of topic b, with --watermark_stuck_threshold=2s.
func TestLivePage(t *testing.T) {
	chromiumPath(t) // first: skipping (or failing) for want of a browser needs no broker
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bctx := newBrowser(t, ctx)

	ta, tb, out := uniqueName(t, "a"), uniqueName(t, "b"), uniqueName(t, "out")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(ta, 1), userTopic(tb, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	produceAt(t, bs, tb, 0, kioRec{key: []byte("k"), value: []byte("v"), ts: time.Now().UnixMilli()})
	// The moving branch's input: a record every 100 ms, event time now.
	pctx, pcancel := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		for i := 0; pctx.Err() == nil; i++ {
			produceAt(t, bs, ta, 0, kioRec{key: []byte(fmt.Sprint("k", i)), value: []byte("v"), ts: time.Now().UnixMilli()})
			select {
			case <-pctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { pcancel(); <-pdone }()

	p, s := beam.NewPipelineWithRoot()
	moving := kafkaio.Read(s.Scope("moving"), ta, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(time.Minute))
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Second), beam.ParDo(s, kioConst, moving)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))
	stuck := kafkaio.Read(s.Scope("stuck"), tb, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1))
	kafkaio.Write(s, out, stuck)

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	app := uniqueName(t, "app")
	done := startJob(sctx, bs, app, p, func(o *runner.Options) { o.WatermarkStuckThreshold = 2 * time.Second })
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)

	// The plan's stages, as the server knows them.
	var ex service.ExplainJSON
	for deadline := time.Now().Add(30 * time.Second); len(ex.Stages) == 0; time.Sleep(100 * time.Millisecond) {
		if err := getJSONErr("http://"+addr+"/watermarks/explain", &ex); err != nil && time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	var want []string
	for _, x := range ex.Stages {
		want = append(want, x.Stage)
	}
	sort.Strings(want)
	if len(want) < 3 {
		t.Fatalf("the plan has %d stages %v, want the two sources and the GroupByKey at least", len(want), want)
	}
	stuckStage := ""
	for _, n := range want {
		if strings.Contains(n, "stuck") {
			stuckStage = n
		}
	}
	if stuckStage == "" {
		t.Fatalf("no stage of the stuck source among %v", want)
	}

	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatal(err)
	}
	// First look: every stage shown, every moving stage with a watermark,
	// the stuck source explained.
	var first pageLook
	ready := func(l pageLook) string {
		if !l.Live {
			return "the page is not live (no server-sent event yet)"
		}
		var got []string
		for n := range l.Stages {
			got = append(got, n)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Sprintf("stage cards %v, want %v", got, want)
		}
		nodes := append([]string{}, l.Nodes...)
		sort.Strings(nodes)
		if strings.Join(nodes, ",") != strings.Join(want, ",") {
			return fmt.Sprintf("graph nodes %v, want %v", nodes, want)
		}
		for n, wm := range l.Stages {
			if n != stuckStage && !isISO(wm) {
				return fmt.Sprintf("stage %s shows watermark %q, not a time yet", n, wm)
			}
		}
		if why := l.Stuck[stuckStage]; !strings.Contains(why, "partition 1 of topic "+tb) {
			return fmt.Sprintf("why is %s stuck: %q, want it to name partition 1 of topic %s", stuckStage, why, tb)
		}
		return ""
	}
	var why string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		first = look(t, bctx)
		if why = ready(first); why == "" {
			break
		}
		if time.Now().After(deadline) {
			shot(t, bctx)
			t.Fatalf("after 90 s the page does not show what it should: %s\nlast look: %+v", why, first)
		}
	}
	t.Logf("first look: stages %v; stuck: %q", first.Stages, first.Stuck[stuckStage])
	// cmd/watermarkmgr's page draws the graph from the plan topic: the
	// same stages as the instance's.
	pl, err := plantopic.ReadNew(ctx, bs, nil, app, app+"-plan-watermarkmgr")
	if err != nil || pl == nil {
		t.Fatalf("plantopic.ReadNew(%s): %v, %v", app, pl, err)
	}
	var fromPlan []string
	for _, si := range plantopic.StageInfos(pl) {
		fromPlan = append(fromPlan, si.Name)
	}
	sort.Strings(fromPlan)
	if strings.Join(fromPlan, ",") != strings.Join(want, ",") {
		t.Errorf("stages from the plan topic %v, want %v", fromPlan, want)
	}
	if first.MinRows == 0 {
		t.Errorf("no partition row is marked as the minimum")
	}
	// The GroupByKey stage says what state it holds (its open panes).
	heldShown := false
	for n, text := range first.Texts {
		if strings.Contains(n, "GroupByKey") || strings.Contains(n, "SumPerKey") {
			heldShown = heldShown || regexp.MustCompile(`state held \d+ panes? \(key, window\)`).MatchString(text)
		}
	}
	if !heldShown {
		t.Errorf("no GroupByKey stage card says what state it holds (\"state held N panes (key, window)\"): %v", first.Texts)
	}
	for _, w := range []string{"never received a record", "no idleness"} {
		if !strings.Contains(first.Stuck[stuckStage], w) {
			t.Errorf("the explanation of %s lacks %q: %q", stuckStage, w, first.Stuck[stuckStage])
		}
	}

	// Second look, 3 s later, without reloading: the moving stages' watermarks are later.
	time.Sleep(3 * time.Second)
	second := look(t, bctx)
	for n, wm1 := range first.Stages {
		if n == stuckStage {
			continue
		}
		wm2 := second.Stages[n]
		t1, err1 := time.Parse(time.RFC3339Nano, wm1)
		t2, err2 := time.Parse(time.RFC3339Nano, wm2)
		if err1 != nil || err2 != nil || !t2.After(t1) {
			t.Errorf("stage %s: watermark %q at the first look, %q 3 s later: want it to advance", n, wm1, wm2)
		}
	}
	if _, ok := second.Stuck[stuckStage]; !ok {
		t.Errorf("at the second look %s is no longer explained as stuck: %+v", stuckStage, second.Stuck)
	}
	for n := range second.Stuck {
		if n != stuckStage {
			t.Errorf("stage %s of the moving branch is explained as stuck: %q", n, second.Stuck[n])
		}
	}
	if t.Failed() || os.Getenv("KAFKASTREAMS_PAGE_SHOT_DIR") != "" {
		shot(t, bctx)
	}
}

// shot saves a full-page screenshot of the page into the test's output
// directory, or $KAFKASTREAMS_PAGE_SHOT_DIR (then also when the test
// passes), and logs where.
func shot(t *testing.T, bctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot failed: %v", err)
		return
	}
	dir := os.Getenv("KAFKASTREAMS_PAGE_SHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot of the page: %s", path)
}

// isISO says whether s is an ISO 8601 time as the page shows a watermark.
func isISO(s string) bool {
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

func getJSONErr(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

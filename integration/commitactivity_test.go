package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/kafkastreams/kafkastreams/cmd/commitactivity/activity"
	"github.com/kafkastreams/kafkastreams/runner"
)

// commitActivityData is the main job's input in the repository.
const commitActivityData = "../cmd/commitactivity/data/git-commits.csv"

// commitActivityInput writes the job's input plus three malformed rows to
// a temporary file and returns its path and lines.
func commitActivityInput(t *testing.T) (string, []string) {
	t.Helper()
	lines := readLines(t, commitActivityData)
	if len(lines) != 60747 {
		t.Fatalf("%s has %d lines, want 60747 (a header and 60 746 rows)", commitActivityData, len(lines))
	}
	lines = append(lines, "1,2,3", "1,not-a-time,abc,t,1,1,1", "")
	in := filepath.Join(t.TempDir(), "git-commits-and-3-malformed.csv")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return in, lines
}

func sortedLines(t *testing.T, path string) []string {
	t.Helper()
	l := readLines(t, path)
	slices.Sort(l)
	return l
}

func counters(res beam.PipelineResult) map[string]int64 {
	out := map[string]int64{}
	for _, c := range res.Metrics().AllMetrics().Counters() {
		out[c.Key.Name] += c.Committed
	}
	return out
}

// TestCommitActivityMatchesPrism runs the main job (cmd/commitactivity:
// textio.Read, event times, 30-day fixed windows with CombinePerKey and
// top.Largest, 7-day sessions, Flatten, textio.Write and the output topic)
// over git-commits.csv plus three malformed rows, on Prism in this process
// and on this runner against the real broker (with --gbk_fire_budget=2000:
// the GroupByKey tasks fire their panes over many transactions), and
// checks that:
//
//   - both CSV files hold the same rows, and those are the rows computed
//     directly in Go (activity.Reference);
//   - the output topic, read_committed, holds the same rows, each once;
//   - both runners count 60 746 parsed and 3 malformed rows;
//   - some GroupByKey task stopped at the fire budget.
//
// It logs both wall times and their ratio.
func TestCommitActivityMatchesPrism(t *testing.T) {
	b := needBroker(t)
	in, lines := commitActivityInput(t)
	want, malformed := activity.Reference(lines)
	if malformed != 3 {
		t.Fatalf("reference: %d malformed rows, want 3", malformed)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if !beam.Initialized() {
		beam.Init()
	}
	checkCounters := func(name string, res beam.PipelineResult) {
		t.Helper()
		c := counters(res)
		if c["parsed_rows"] != 60746 || c["malformed_rows"] != 3 {
			t.Errorf("%s: counters parsed_rows=%d malformed_rows=%d, want 60746 and 3", name, c["parsed_rows"], c["malformed_rows"])
		}
	}

	prismOut := filepath.Join(dir, "prism.csv")
	start := time.Now()
	res, err := prism.Execute(ctx, activity.Pipeline(activity.Options{Input: in, Output: prismOut}))
	if err != nil {
		t.Fatalf("prism: %v", err)
	}
	prismTime := time.Since(start)
	checkCounters("prism", res)
	prismRows := sortedLines(t, prismOut)
	if !slices.Equal(prismRows, want) {
		t.Errorf("prism wrote %d rows, the reference has %d; first differences:%s", len(prismRows), len(want), activity.DiffSorted(prismRows, want, 5))
	}

	ksOut := filepath.Join(dir, "kafkastreams.csv")
	// A small fire budget: the GroupByKey tasks fire their panes over
	// many transactions (owing the rest, woken at once), which must give
	// Prism's rows all the same.
	start = time.Now()
	res, err = beam.Run(withJob(ctx, b.BootstrapServers(), uniqueName(t, "app"), func(o *runner.Options) { o.GBKFireBudget = caFireBudget }), runner.Name, activity.Pipeline(activity.Options{Input: in, Output: ksOut}))
	if err != nil {
		t.Fatalf("kafkastreams: %v", err)
	}
	ksTime := time.Since(start)
	checkCounters("kafkastreams", res)
	stops := int64(0)
	for _, n := range res.(*runner.Result).FireBudgetStops {
		stops += n
	}
	if stops == 0 {
		t.Errorf("no GroupByKey task stopped at --gbk_fire_budget=%d: the test does not exercise owed panes", caFireBudget)
	}
	// The Sessions7d combine keeps one accumulator per session
	// (--merge_accumulators, on by default): sessions open across
	// transactions had theirs merged, and the rows are still Prism's.
	merges := int64(0)
	for name, n := range res.(*runner.Result).AccumulatorMerges {
		if strings.Contains(name, "Sessions7d") {
			merges += n
		}
	}
	if merges == 0 {
		t.Errorf("the Sessions7d GroupByKey merged no session's accumulators (AccumulatorMerges %v): the test does not exercise --merge_accumulators", res.(*runner.Result).AccumulatorMerges)
	}
	t.Logf("sessions whose accumulators were merged: %d; fire budget stops: %d", merges, stops)
	ksRows := sortedLines(t, ksOut)
	if !slices.Equal(ksRows, prismRows) {
		t.Errorf("kafkastreams wrote %d rows, prism %d; first differences (extra: only on kafkastreams):%s", len(ksRows), len(prismRows), activity.DiffSorted(ksRows, prismRows, 5))
	}

	topic, err := activity.OutputTopic(res.(*runner.Result).Plan)
	if err != nil {
		t.Fatal(err)
	}
	topicRows, err := activity.ReadTopic(ctx, b.BootstrapServers(), topic)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(topicRows)
	if !slices.Equal(topicRows, want) {
		t.Errorf("output topic %s holds %d rows, want %d, each once; first differences:%s", topic, len(topicRows), len(want), activity.DiffSorted(topicRows, want, 5))
	}
	t.Logf("%d rows; prism %v, kafkastreams %v (%.1f× prism; %d stops at the fire budget)", len(want), prismTime.Round(time.Millisecond), ksTime.Round(time.Millisecond), ksTime.Seconds()/prismTime.Seconds(), stops)
}

// TestCommitActivityThreeInstances runs the main job as three OS processes
// (the built cmd/commitactivity, as `make run INSTANCES=3` does) with one
// --application_id over git-commits.csv plus three malformed rows, and
// checks that each input row was parsed or skipped once across the
// instances (the job's counters, in every instance's log) and that the
// output topic and the CSV hold exactly the rows of activity.Reference,
// each once. (The file is read by the Impulse stage, one task: one
// instance reads it all; the GroupByKey stages' four tasks are spread over
// the three.)
func TestCommitActivityThreeInstances(t *testing.T) {
	b := needBroker(t)
	bin := filepath.Join(t.TempDir(), "commitactivity")
	build := exec.Command("go", "build", "-o", bin, "../cmd/commitactivity")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/commitactivity: %v\n%s", err, out)
	}
	in, lines := commitActivityInput(t)
	want, malformed := activity.Reference(lines)
	if malformed != 3 {
		t.Fatalf("reference: %d malformed rows, want 3", malformed)
	}
	app := uniqueName(t, "app")
	out := filepath.Join(t.TempDir(), "out.csv")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const n = 3
	logs := make([]strings.Builder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		cmd := exec.CommandContext(ctx, bin, "--bootstrap_servers="+b.BootstrapServers(), "--application_id="+app,
			"--input="+in, "--output="+out, "--table=false", "--watermarks_addr=")
		cmd.Stdout, cmd.Stderr = &logs[i], &logs[i]
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = cmd.Run() }()
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			// Every instance's whole log, kept: a hang is in another
			// instance's (a task that never reported is someone's).
			if dir, derr := os.MkdirTemp("", "kafkastreams-threeinstances-"); derr == nil {
				for j := range n {
					_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("instance-%d.log", j)), []byte(logs[j].String()), 0o644)
				}
				t.Logf("the %d instances' logs are in %s", n, dir)
			}
			t.Fatalf("instance %d: %v\n%s", i, err, tail(logs[i].String(), 4000))
		}
		// Every instance reports the job's counters (the application's
		// metrics topic): each row parsed once, whichever instance did it.
		var p, m int
		log := logs[i].String()
		at := strings.Index(log, "the job parsed ")
		if at < 0 {
			t.Fatalf("instance %d did not log the job's counters:\n%s", i, tail(log, 4000))
		}
		if _, err := fmt.Sscanf(log[at:], "the job parsed %d rows and skipped %d malformed rows", &p, &m); err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		if p != 60746 || m != malformed {
			t.Errorf("instance %d: the job parsed %d rows and skipped %d malformed rows, want 60746 and %d (each row once)", i, p, m, malformed)
		}
	}
	topic, err := activity.FindOutputTopic(b.BootstrapServers(), app)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := activity.ReadTopic(ctx, b.BootstrapServers(), topic)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rows)
	if !slices.Equal(rows, want) {
		t.Errorf("output topic %s holds %d rows, want %d, each once; first differences:%s", topic, len(rows), len(want), activity.DiffSorted(rows, want, 5))
	}
	if got := sortedLines(t, out); !slices.Equal(got, want) {
		t.Errorf("%s holds %d rows, want %d; first differences:%s", out, len(got), len(want), activity.DiffSorted(got, want, 5))
	}
	t.Logf("three instances: %v", took.Round(time.Millisecond))
}

// caFireBudget is TestCommitActivityMatchesPrism's GroupByKey fire budget
// (Options.GBKFireBudget): small, so that its tasks fire their panes over
// many transactions.
const caFireBudget = 2000

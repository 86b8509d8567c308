package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	bexec "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/stage"
)

// This file runs pipelines as separate OS processes: the test binary starts
// copies of itself with KAFKASTREAMS_CHILD set, and TestMain
// (runChildIfAsked) turns such a copy into one instance of the application
// instead of a test run.

const (
	envChild     = "KAFKASTREAMS_CHILD"      // pipeline to run as a child instance
	envChildOut  = "KAFKASTREAMS_CHILD_OUT"  // where the child writes its childResult
	envChildApp  = "KAFKASTREAMS_CHILD_APP"  // --application_id
	envChildN    = "KAFKASTREAMS_CHILD_N"    // element count
	envChildSlow = "KAFKASTREAMS_CHILD_SLOW" // per-element delay in the last ParDo
)

// childResult is what a child instance reports.
type childResult struct {
	// Counters are the PipelineResult's committed counters by name: the
	// application's when ApplicationMetrics.
	Counters           map[string]int64
	ApplicationMetrics bool
	// ElementsIn are the elements this instance's stages committed, by stage.
	ElementsIn map[string]uint64
	// Stages are this instance's stage loops' committed counters, by stage.
	Stages  map[string]stage.Stats
	Err     string
	Seconds float64
}

var (
	tagged   = beam.NewCounter("kafkastreams.test", "tagged")
	finished = beam.NewCounter("kafkastreams.test", "finished")
)

func tag(ctx context.Context, s string) string {
	tagged.Inc(ctx, 1)
	return "v" + s
}

type finishFn struct {
	// SlowMicros is the work per element, in µs, to give a test time to
	// act; it sleeps 100 times as long every 100 elements (a sleep of a few
	// µs takes far longer than asked on a loaded machine).
	SlowMicros int
	n          int
}

func (f *finishFn) ProcessElement(ctx context.Context, s string) string {
	if f.n++; f.SlowMicros > 0 && f.n%100 == 0 {
		time.Sleep(time.Duration(f.SlowMicros*100) * time.Microsecond)
	}
	finished.Inc(ctx, 1)
	return s
}

func init() {
	register.Function2x1(tag)
	register.DoFn2x1[context.Context, string, string](&finishFn{})
	register.Function2x0(stampFn)
	register.Emitter3[beam.EventTime, string, int]()
	register.Function3x1(paneFn)
	register.Iter1[int]()
	register.DoFn3x0[string, int, func(string, int)](&slowKV{})
	register.Emitter2[string, int]()
}

// childPipelines are the child pipelines other files add (in their init):
// runChild builds the one named by KAFKASTREAMS_CHILD. The function may
// change the child's Options (bundle size, state directory) in o.
var childPipelines = map[string]func(o *runner.Options) *beam.Pipeline{}

// runChildIfAsked turns this process into a child instance when
// KAFKASTREAMS_CHILD names a pipeline: it runs it and exits. TestMain calls
// it first, so every file's init (registrations, childPipelines) has run.
func runChildIfAsked() {
	if name := os.Getenv(envChild); name != "" {
		os.Exit(runChild(name))
	}
}

// exactlyOncePipeline is Create(n strings) -> ParDo -> Reshuffle -> ParDo ->
// Reshuffle: the last Reshuffle stage's input topic holds the output.
func exactlyOncePipeline(n, slowMicros int) *beam.Pipeline {
	in := make([]string, n)
	for i := range in {
		in[i] = strconv.Itoa(i)
	}
	p, s := beam.NewPipelineWithRoot()
	col := beam.ParDo(s, tag, beam.CreateList(s, in))
	col = beam.ParDo(s, &finishFn{SlowMicros: slowMicros}, beam.Reshuffle(s, col))
	_ = beam.Reshuffle(s, col)
	return p
}

func runChild(name string) int {
	beam.Init()
	n, _ := strconv.Atoi(os.Getenv(envChildN))
	slow, _ := strconv.Atoi(os.Getenv(envChildSlow))
	// A killed peer's partitions move after the session timeout: keep it short.
	o := jobOptions(os.Getenv(kafkaenv.EnvBootstrapServers), os.Getenv(envChildApp))
	o.KafkaProperties["session.timeout.ms"] = "6000"
	var p *beam.Pipeline
	switch name {
	case "exactly-once":
		p = exactlyOncePipeline(n, slow)
	case "exactly-once-small-bundles":
		// Transactions of at most 500 records (~150 ms of the slow ParDo's
		// work at 300 µs each): an instance commits output early and often,
		// so a kill after its first commit is well before the end.
		o.MaxBundleSize = 500
		p = exactlyOncePipeline(n, slow)
	case "gbk":
		// Small bundles, so the GroupByKey stage commits state early and
		// often: a kill then leaves state to restore from the changelog.
		o.MaxBundleSize = 200
		p = gbkPipeline(n, slow)
	default:
		build := childPipelines[name]
		if build == nil {
			fmt.Fprintf(os.Stderr, "unknown child pipeline %q\n", name)
			return 2
		}
		p = build(&o)
	}
	// SIGTERM cancels the job: an unbounded one stops cleanly (its loops
	// close their transactions and leave their groups).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if path := os.Getenv(envChildProf); path != "" {
		// A CPU profile of the whole run (BenchmarkKafkaStreams).
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	start := time.Now()
	res, err := beam.Run(runner.WithOptions(ctx, o), runner.Name, p)
	out := childResult{Counters: map[string]int64{}, ElementsIn: map[string]uint64{}, Seconds: time.Since(start).Seconds()}
	if err != nil {
		out.Err = err.Error()
	}
	if res != nil {
		for _, c := range res.Metrics().AllMetrics().Counters() {
			out.Counters[c.Key.Name] += c.Committed
		}
	}
	if r, ok := res.(*runner.Result); ok {
		out.ApplicationMetrics = r.ApplicationMetrics
		out.Stages = r.Stats
		for name, st := range r.Stats {
			out.ElementsIn[name] = st.ElementsIn
		}
	}
	b, _ := json.Marshal(out)
	if err := os.WriteFile(os.Getenv(envChildOut), b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if out.Err != "" {
		return 1
	}
	return 0
}

type child struct {
	cmd *exec.Cmd
	out string
	log syncBuffer
}

// syncBuffer is a child's combined output, safe to read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuffer) Bytes() []byte { return []byte(b.String()) }

// waitForLog waits until c's output contains s, or fails the test after
// timeout.
func (c *child) waitForLog(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(c.log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("child output has no %q after %v:\n%s", s, timeout, tail(c.log.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firstOutputOf matches the stage loop's log line saying it first committed
// output, for the stage whose name starts with prefix.
func firstOutputOf(prefix string) *regexp.Regexp {
	return regexp.MustCompile(`stage: first output committed.* stage=` + regexp.QuoteMeta(prefix) + `\S*`)
}

// waitForChildLog waits until cs[i]'s output has a line matching re and
// returns that line; it fails the test after timeout, or as soon as any of
// cs has written its result (it finished before what was awaited).
func waitForChildLog(t *testing.T, cs []*child, i int, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := re.FindString(cs[i].log.String()); m != "" {
			return m
		}
		for j, c := range cs {
			if _, err := os.Stat(c.out); err == nil {
				t.Fatalf("instance %d finished before instance %d logged %q:\n%s", j, i, re, tail(cs[i].log.String(), 4000))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %d logged no %q after %v:\n%s", i, re, timeout, tail(cs[i].log.String(), 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startChild(t *testing.T, b *kafkaenv.Broker, app string, n, slow int, idx int) *child {
	return startPipelineChild(t, b, "exactly-once", app, n, slow, idx)
}

func startPipelineChild(t testing.TB, b *kafkaenv.Broker, pipeline, app string, n, slow int, idx int) *child {
	t.Helper()
	c := &child{out: fmt.Sprintf("%s/child-%d.json", t.TempDir(), idx)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		envChild+"="+pipeline, envChildOut+"="+c.out, envChildApp+"="+app,
		envChildN+"="+strconv.Itoa(n), envChildSlow+"="+strconv.Itoa(slow),
		kafkaenv.EnvBootstrapServers+"="+b.BootstrapServers())
	c.cmd.Stdout, c.cmd.Stderr = &c.log, &c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("KAFKASTREAMS_CHILD_LOG_DIR"); dir != "" {
		// For debugging: keep every child's log.
		t.Cleanup(func() {
			_ = os.WriteFile(fmt.Sprintf("%s/%s-%d.log", dir, nonName.ReplaceAllString(t.Name(), "_"), idx), c.log.Bytes(), 0o644)
		})
	}
	return c
}

func (c *child) result(t testing.TB) childResult {
	t.Helper()
	var r childResult
	b, err := os.ReadFile(c.out)
	if err != nil {
		t.Fatalf("child wrote no result (%v); its log:\n%s", err, tail(c.log.String(), 4000))
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// outputStrings reads the topic read_committed and decodes every element
// (a string in the global window), failing on a duplicate.
func outputStrings(t *testing.T, ctx context.Context, b *kafkaenv.Broker, topic string) map[string]int {
	t.Helper()
	recs, err := kafkaenv.Consume(ctx, b.BootstrapServers(), topic, -1, kafkaenv.ReadCommitted, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return decodeOutput(t, topic, recs)
}

// decodeOutput decodes the elements of records of topic (strings in the
// global window), counting each.
func decodeOutput(t *testing.T, topic string, recs []kafkaenv.Record) map[string]int {
	t.Helper()
	dec := bexec.MakeElementDecoder(coder.NewW(coder.NewString(), coder.NewGlobalWindow()))
	got := map[string]int{}
	for _, r := range recs {
		env := &pb.Envelope{}
		if err := proto.Unmarshal(r.Value, env); err != nil {
			t.Fatalf("record in %s is not an Envelope: %v", topic, err)
		}
		if env.GetElement() == nil {
			continue
		}
		fv, err := dec.Decode(bytes.NewReader(env.GetElement()))
		if err != nil {
			t.Fatalf("element in %s does not decode: %v", topic, err)
		}
		got[fv.Elm.(string)]++
	}
	return got
}

func checkExactlyOnce(t *testing.T, got map[string]int, n int) {
	t.Helper()
	missing, dup := 0, 0
	for i := 0; i < n; i++ {
		switch got["v"+strconv.Itoa(i)] {
		case 0:
			missing++
		case 1:
		default:
			dup++
		}
	}
	if missing > 0 || dup > 0 || len(got) != n {
		t.Fatalf("output: %d distinct, %d missing, %d duplicated (want %d, each once)", len(got), missing, dup, n)
	}
}

// TestTwoInstancesExactlyOnce: 100 000 elements through Create -> ParDo ->
// Reshuffle -> ParDo on 4 partitions with two instances (two OS processes)
// produce every element exactly once: in the output topic (read_committed),
// in each instance's PipelineResult counters (the application's metrics),
// and in the sum of the elements the instances' last stages committed.
func TestTwoInstancesExactlyOnce(t *testing.T) {
	b := needBroker(t)
	const n = 100_000
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	// 40 µs per element in the last ParDo (4 s of work in all), so that the
	// work is still there to share when the second instance has joined.
	cs := []*child{startChild(t, b, app, n, 40, 0), startChild(t, b, app, n, 40, 1)}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.cmd.Wait() }()
	}
	wg.Wait()
	const last = "s2-Reshuffle_1" // the stage of the last ParDo
	var lastIn uint64
	for i, c := range cs {
		r := c.result(t)
		if r.Err != "" {
			t.Fatalf("instance %d failed: %s\n%s", i, r.Err, tail(c.log.String(), 4000))
		}
		t.Logf("instance %d: %.1fs, counters %v (application's: %v), elements in %v", i, r.Seconds, r.Counters, r.ApplicationMetrics, r.ElementsIn)
		if !r.ApplicationMetrics || r.Counters["tagged"] != n || r.Counters["finished"] != n {
			t.Errorf("instance %d: counters tagged=%d finished=%d (application's: %v), want the application's, %d each", i, r.Counters["tagged"], r.Counters["finished"], r.ApplicationMetrics, n)
		}
		if r.ElementsIn[last] == 0 {
			t.Errorf("instance %d did none of stage %s's work: the instances did not share the partitions", i, last)
		}
		lastIn += r.ElementsIn[last]
	}
	t.Logf("two instances, %d elements: %.1fs", n, time.Since(start).Seconds())
	if lastIn != n {
		t.Errorf("the instances' %s stages committed %d elements in all, want %d", last, lastIn, n)
	}
	checkExactlyOnce(t, outputStrings(t, ctx, b, app+"-s2-Reshuffle_1"), n)
}

// TestInstancesStartingTogetherAgreeOnThePlan starts three instances of
// one application at the same moment, in rounds of a new application
// each: every instance runs to the end and the output holds every element
// exactly once. They race to record the plan under one transactional.id
// ("<application_id>-plan"): an instance whose plan producer another's
// InitTransactions fenced tries again with a new producer (its log says
// "recording the plan: attempt failed") and then reads the plan the other
// recorded. CI failed TestTwoInstancesExactlyOnce there once: the fenced
// producer's Produce said "Local: Fatal error", which the retry did not
// take for a fencing. The rounds go on until one of them saw a fencing
// (at most maxRounds): the test fails if none did, since then it checked
// nothing of the race. Here a round saw one in 6 of 14 (a second each):
// none in 20 rounds would be about 1 in 80 000.
func TestInstancesStartingTogetherAgreeOnThePlan(t *testing.T) {
	b := needBroker(t)
	const (
		n         = 2000
		instances = 3
		maxRounds = 20
	)
	fenced := false
	for round := 1; round <= maxRounds && !fenced; round++ {
		app := uniqueName(t, "app")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cs := make([]*child, instances)
		for i := range cs {
			cs[i] = startChild(t, b, app, n, 0, i)
		}
		for _, c := range cs {
			_ = c.cmd.Wait()
		}
		retried := 0
		for i, c := range cs {
			r := c.result(t)
			if r.Err != "" {
				cancel()
				t.Fatalf("round %d: instance %d failed: %s\n%s", round, i, r.Err, tail(c.log.String(), 4000))
			}
			if strings.Contains(c.log.String(), "recording the plan: attempt failed") {
				retried++
			}
		}
		checkExactlyOnce(t, outputStrings(t, ctx, b, app+"-s2-Reshuffle_1"), n)
		cancel()
		t.Logf("round %d: %d instances ran to the end, the output exactly once; %d of them had their plan producer fenced and tried again", round, instances, retried)
		fenced = retried > 0
	}
	if !fenced {
		t.Fatalf("no instance's plan producer was fenced in %d rounds of %d instances starting together: the race this test is for did not happen", maxRounds, instances)
	}
}

// TestSIGKILLLosesAndDuplicatesNothing kills one of two instances mid-stream
// (SIGKILL: no clean shutdown; whether a transaction was open at that
// moment is not checked here: TestScenarioSIGKILL and
// TestKafkaSinkExactlyOnceAfterSIGKILL kill with one open), starts a
// third, and checks the output holds every element exactly once. Mid-stream
// is checked: the kill comes after the killed instance logged its first
// committed output of the stage writing the checked topic, and right after
// it the output holds some of the elements but not all.
func TestSIGKILLLosesAndDuplicatesNothing(t *testing.T) {
	b := needBroker(t)
	const n = 20_000
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// 300 µs per element in the last ParDo: ~6 s of work to kill in.
	start := func(idx int) *child { return startPipelineChild(t, b, "exactly-once-small-bundles", app, n, 300, idx) }
	cs := []*child{start(0), start(1)}
	// Kill once instance 0 has committed output of the stage that writes
	// the checked topic (a fixed delay after its instance slot, taken
	// before any stage runs, passed on a slow machine without a kill
	// mid-stream), and fail if an instance finished before.
	t0 := time.Now()
	line := waitForChildLog(t, cs, 0, firstOutputOf("s1-"), 3*time.Minute)
	if err := cs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].cmd.Wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("instance 0 did not die of the SIGKILL: %v", err)
	}
	t.Logf("killed instance 0 (pid %d) %v after the start, after it logged %q", cs[0].cmd.Process.Pid, time.Since(t0).Round(time.Millisecond), line)
	// Mid-stream: some of the output committed, not all of it (read after
	// the kill: an upper bound of what was committed at the kill).
	if got := outputStrings(t, ctx, b, app+"-s2-Reshuffle_1"); len(got) == 0 || len(got) >= n {
		t.Fatalf("right after the kill, %d of %d elements are committed in the output: want some but not all (the kill was not mid-stream)", len(got), n)
	} else {
		t.Logf("right after the kill, %d of %d elements are committed in the output", len(got), n)
	}
	cs = append(cs, start(2))
	for i, c := range cs[1:] {
		_ = c.cmd.Wait()
		r := c.result(t)
		if r.Err != "" {
			t.Fatalf("instance %d failed: %s\n%s", i+1, r.Err, tail(c.log.String(), 4000))
		}
		t.Logf("instance %d: %.1fs, counters %v (application's: %v)", i+1, r.Seconds, r.Counters, r.ApplicationMetrics)
		if strings.Contains(c.log.String(), "waited for stable committed offsets") {
			t.Logf("instance %d waited for a transaction of the killed instance to end", i+1)
		}
		// The killed instance's committed bundles count, its open
		// transaction's do not, and no retried bundle counts twice.
		if !r.ApplicationMetrics || r.Counters["tagged"] != n || r.Counters["finished"] != n {
			t.Errorf("instance %d: counters tagged=%d finished=%d (application's: %v), want the application's, %d each", i+1, r.Counters["tagged"], r.Counters["finished"], r.ApplicationMetrics, n)
		}
	}
	// The replacement took the killed instance's slot, so its transactional
	// ids: its InitTransactions aborted what the killed one left open.
	if !strings.Contains(cs[2].log.String(), "instance slot taken over") {
		t.Errorf("the replacement did not take over the killed instance's slot:\n%s", tail(cs[2].log.String(), 4000))
	}
	checkExactlyOnce(t, outputStrings(t, ctx, b, app+"-s2-Reshuffle_1"), n)
}

// killWindow is the fixed window of gbkPipeline, in event time.
const killWindow = time.Minute

// stampFn gives element i the event time i seconds after the Unix epoch and
// the key "k<i mod 37>".
func stampFn(i int, emit func(beam.EventTime, string, int)) {
	emit(mtime.FromMilliseconds(int64(i)*1000), "k"+strconv.Itoa(i%37), i)
}

// paneFn formats one pane: "key|window start in ms|sum".
func paneFn(w typex.Window, k string, vs func(*int) bool) string {
	sum, v := 0, 0
	for vs(&v) {
		sum += v
	}
	return fmt.Sprintf("%s|%d|%d", k, w.MaxTimestamp().Milliseconds()+1-killWindow.Milliseconds(), sum)
}

type slowKV struct {
	SlowMicros int
	n          int
}

func (f *slowKV) ProcessElement(k string, v int, emit func(string, int)) {
	if f.n++; f.SlowMicros > 0 && f.n%100 == 0 {
		time.Sleep(time.Duration(f.SlowMicros*100) * time.Microsecond)
	}
	emit(k, v)
}

// gbkPipeline is Create(0..n-1) -> timestamps and keys -> Reshuffle -> slow
// ParDo -> fixed 1-minute windows -> GroupByKey -> sum per pane -> global
// window -> Reshuffle: the last stage's input topic holds one
// "key|window|sum" per pane.
func gbkPipeline(n, slowMicros int) *beam.Pipeline {
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, stampFn, beam.CreateList(s, in))
	kv = beam.ParDo(s, &slowKV{SlowMicros: slowMicros}, beam.Reshuffle(s, kv))
	w := beam.WindowInto(s, window.NewFixedWindows(killWindow), kv)
	panes := beam.ParDo(s, paneFn, beam.GroupByKey(s, w))
	_ = beam.Reshuffle(s, beam.WindowInto(s, window.NewGlobalWindows(), panes))
	return p
}

// restoredRe finds the state store's restore log lines and their record count.
var restoredRe = regexp.MustCompile(`restored task store from changelog.* records=(\d+)`)

// gbkExpected computes gbkPipeline's panes directly.
func gbkExpected(n int) map[string]int {
	sums := map[string]int{}
	for i := 0; i < n; i++ {
		win := int64(i) * 1000 / killWindow.Milliseconds() * killWindow.Milliseconds()
		sums[fmt.Sprintf("k%d|%d", i%37, win)] += i
	}
	out := map[string]int{}
	for k, v := range sums {
		out[fmt.Sprintf("%s|%d", k, v)] = 1
	}
	return out
}

// TestSIGKILLGroupByKeyGivesTheSamePanes: a two-instance GroupByKey job
// where one instance is SIGKILLed mid-stream (its tasks hold buffered values
// in their stores) gives exactly the panes of an uninterrupted run, computed
// directly, each once in a read_committed read of the output.
func TestSIGKILLGroupByKeyGivesTheSamePanes(t *testing.T) {
	b := needBroker(t)
	const n = 20_000
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// 1 ms of work per element before the GroupByKey: ~10 s per instance.
	start := time.Now()
	cs := []*child{startPipelineChild(t, b, "gbk", app, n, 1000, 0), startPipelineChild(t, b, "gbk", app, n, 1000, 1)}
	// Kill once GroupByKey state is committed (a fixed delay was too short
	// on a loaded machine, where the instances start slowly), and a second
	// more of buffering: mid-stream, with state a restore must bring back.
	changelog, err := waitForChangelogRecords(b.BootstrapServers(), app, 3*time.Minute, 1, func() error {
		for i, c := range cs {
			if _, err := os.Stat(c.out); err == nil {
				return fmt.Errorf("instance %d finished before the kill (its result is in %s)", i, c.out)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := cs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restored := false
	if err := cs[0].cmd.Wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("instance 0 did not die of the SIGKILL: %v", err)
	}
	t.Logf("killed instance 0 (pid %d) %v after the start, state committed in %s", cs[0].cmd.Process.Pid, time.Since(start).Round(time.Millisecond), changelog)
	cs = append(cs, startPipelineChild(t, b, "gbk", app, n, 1000, 2))
	for i, c := range cs[1:] {
		_ = c.cmd.Wait()
		r := c.result(t)
		if r.Err != "" {
			t.Fatalf("instance %d failed: %s\n%s", i+1, r.Err, tail(c.log.String(), 4000))
		}
		t.Logf("instance %d: %.1fs", i+1, r.Seconds)
		if m := restoredRe.FindAllStringSubmatch(c.log.String(), -1); len(m) > 0 {
			for _, r := range m {
				if r[1] != "0" {
					restored = true
				}
			}
		}
	}
	if !restored {
		t.Errorf("no surviving instance restored GroupByKey state from the changelog: the kill did not test recovery (kill later or slow the job)")
	}
	checkPanes(t, outputStringsByName(t, ctx, b, app, "Reshuffle_1"), gbkExpected(n))
}

// outputStringsByName reads the input topic of the stage whose name ends in
// suffix (topics are "<app>-s<N>-<name>").
func outputStringsByName(t *testing.T, ctx context.Context, b *kafkaenv.Broker, app, suffix string) map[string]int {
	t.Helper()
	for _, topic := range topicsWithPrefix(t, b.BootstrapServers(), app+"-s") {
		if strings.HasSuffix(topic, "-"+suffix) {
			return outputStrings(t, ctx, b, topic)
		}
	}
	t.Fatalf("no topic %s-s<N>-%s", app, suffix)
	return nil
}

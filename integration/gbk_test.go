package integration

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	bexec "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// gbkKeyed makes element i the KV ("k<i mod 5>", i), at event time i s.
func gbkKeyed(i int, emit func(beam.EventTime, string, int)) {
	emit(mtime.FromMilliseconds(int64(i)*1000), fmt.Sprintf("k%d", i%5), i)
}

// gbkSum formats one fired pane: key, window, timestamp, pane, count, sum.
func gbkSum(pn typex.PaneInfo, w typex.Window, ts beam.EventTime, key string, values func(*int) bool) string {
	n, sum := 0, 0
	var v int
	for values(&v) {
		n++
		sum += v
	}
	return fmt.Sprintf("%s %s ts=%s %s n=%d sum=%d", key, gbkWindow(w), gbkTime(mtime.Time(ts)), gbkPane(pn), n, sum)
}

// gbkSlow passes elements on after SlowMillis ms each.
type gbkSlow struct{ SlowMillis int }

func (f *gbkSlow) ProcessElement(i int) int {
	time.Sleep(time.Duration(f.SlowMillis) * time.Millisecond)
	return i
}

// gbkCoFormat formats one CoGroupByKey result: the key, then each input's
// values sorted.
func gbkCoFormat(key string, emails, phones func(*string) bool) string {
	var es, ps []string
	var s string
	for emails(&s) {
		es = append(es, s)
	}
	for phones(&s) {
		ps = append(ps, s)
	}
	sort.Strings(es)
	sort.Strings(ps)
	return fmt.Sprintf("%s emails=%v phones=%v", key, es, ps)
}

// gbkFormatKV formats a per-key result.
func gbkFormatKV(k string, v int) string { return fmt.Sprintf("%s=%d", k, v) }

// gbkFormatInt formats a global result.
func gbkFormatInt(v int) string { return fmt.Sprintf("total=%d", v) }

// gbkTimed turns "key:seconds" into the KV (key, seconds) at event time
// seconds s.
func gbkTimed(s string, emit func(beam.EventTime, string, int)) {
	k, v, _ := strings.Cut(s, ":")
	var sec int
	fmt.Sscan(v, &sec)
	emit(mtime.FromMilliseconds(int64(sec)*1000), k, sec)
}

func gbkSplit(s string) (string, string) {
	k, v, _ := strings.Cut(s, ":")
	return k, v
}

func init() {
	register.Function2x0(gbkKeyed)
	register.Function5x1(gbkSum)
	register.Function3x1(gbkCoFormat)
	register.Function1x2(gbkSplit)
	register.Function2x0(gbkTimed)
	register.Function2x1(gbkFormatKV)
	register.Function1x1(gbkFormatInt)
	register.DoFn1x1[int, int](&gbkSlow{})
	register.Emitter3[beam.EventTime, string, int]()
	register.Iter1[int]()
	register.Iter1[string]()
}

func gbkWindow(w typex.Window) string {
	switch w := w.(type) {
	case window.GlobalWindow:
		return "global"
	case window.IntervalWindow:
		return fmt.Sprintf("[%d,%d)", int64(w.Start), int64(w.End))
	}
	return fmt.Sprint(w)
}

func gbkTime(t mtime.Time) string {
	switch t {
	case mtime.EndOfGlobalWindowTime:
		return "eogw"
	case mtime.MaxTimestamp:
		return "max"
	case mtime.MinTimestamp:
		return "min"
	}
	return fmt.Sprint(int64(t))
}

func gbkPane(p typex.PaneInfo) string {
	t := map[typex.PaneTiming]string{typex.PaneEarly: "EARLY", typex.PaneOnTime: "ON_TIME", typex.PaneLate: "LATE", typex.PaneUnknown: "UNKNOWN"}[p.Timing]
	return fmt.Sprintf("%s/%d/%d/first=%v/last=%v", t, p.Index, p.NonSpeculativeIndex, p.IsFirst, p.IsLast)
}

// runApp runs p as application app on the broker and returns the result.
func runApp(t *testing.T, ctx context.Context, bootstrap, app string, p *beam.Pipeline, set ...func(*runner.Options)) *runner.Result {
	t.Helper()
	start := time.Now()
	res, err := beam.Run(withJob(ctx, bootstrap, app, set...), runner.Name, p)
	if err != nil {
		t.Fatal(err)
	}
	r := res.(*runner.Result)
	t.Logf("ran in %v; stats %+v", time.Since(start), r.Stats)
	return r
}

// sinkStrings reads the last stage's input topic (read_committed) and
// decodes its elements, windowed strings (in interval windows if interval,
// else in the global window): what a pipeline ending in Reshuffle of
// strings wrote, each exactly once.
func sinkStrings(t *testing.T, ctx context.Context, bootstrap string, pl *plan.Plan, interval bool) []string {
	t.Helper()
	last := pl.Stages[len(pl.Stages)-1]
	if last.Head != plan.HeadReshuffle {
		t.Fatalf("last stage %s is a %s, want the reshuffle the test ends with", last.Name, last.Head)
	}
	recs, err := kafkaenv.Consume(ctx, bootstrap, last.InputTopic, -1, kafkaenv.ReadCommitted, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wc := coder.NewGlobalWindow()
	if interval {
		wc = coder.NewIntervalWindow()
	}
	dec := bexec.MakeWindowDecoder(wc)
	var out []string
	for _, r := range recs {
		env := &pb.Envelope{}
		if err := proto.Unmarshal(r.Value, env); err != nil {
			t.Fatalf("record in %s is not an Envelope: %v", last.InputTopic, err)
		}
		e := env.GetElement()
		if e == nil {
			continue
		}
		rd := bytes.NewReader(e)
		if _, _, _, err := bexec.DecodeWindowedValueHeader(dec, rd); err != nil {
			t.Fatal(err)
		}
		s, err := coder.DecodeStringUTF8(rd)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func checkLines(t *testing.T, got, want []string) {
	t.Helper()
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %d lines:\n  %s\nwant %d:\n  %s", len(got), strings.Join(got, "\n  "), len(want), strings.Join(want, "\n  "))
	}
}

// gbkSumPipeline: 0..n-1 keyed by i mod 5 at event time i s, optionally in
// fixed windows of size, grouped, summed, formatted, reshuffled (the sink
// topic the test reads). slowMillis slows the elements before the
// GroupByKey.
func gbkSumPipeline(n int, size time.Duration, slowMillis int) *beam.Pipeline {
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	p, s := beam.NewPipelineWithRoot()
	col := beam.CreateList(s, in)
	if slowMillis > 0 {
		col = beam.ParDo(s, &gbkSlow{SlowMillis: slowMillis}, beam.Reshuffle(s, col))
	}
	kv := beam.ParDo(s, gbkKeyed, col)
	if size > 0 {
		kv = beam.WindowInto(s, window.NewFixedWindows(size), kv)
	}
	out := beam.ParDo(s, gbkSum, beam.GroupByKey(s, kv))
	_ = beam.Reshuffle(s, out)
	return p
}

// wantSums is the expected output of gbkSumPipeline: for the global window
// one ON_TIME pane per key at the end of the global window; for fixed
// windows one per (key, window) at the window's max timestamp.
func wantSums(n int, size time.Duration) []string {
	type kw struct {
		key   string
		start int64
	}
	sums, counts := map[kw]int{}, map[kw]int{}
	for i := 0; i < n; i++ {
		k := kw{key: fmt.Sprintf("k%d", i%5)}
		if size > 0 {
			ms := size.Milliseconds()
			k.start = int64(i) * 1000 / ms * ms
		}
		sums[k] += i
		counts[k]++
	}
	var out []string
	for k, sum := range sums {
		w, ts := "global", "eogw"
		if size > 0 {
			w = fmt.Sprintf("[%d,%d)", k.start, k.start+size.Milliseconds())
			ts = fmt.Sprint(k.start + size.Milliseconds() - 1)
		}
		out = append(out, fmt.Sprintf("%s %s ts=%s ON_TIME/0/0/first=true/last=true n=%d sum=%d", k.key, w, ts, counts[k], sum))
	}
	return out
}

// TestGroupByKeyGlobalWindow: a GroupByKey sum per key over the global
// window fires once per key when the input reaches the end of time, with
// the exact sums, each pane exactly once in the sink topic (read_committed).
func TestGroupByKeyGlobalWindow(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 500
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), gbkSumPipeline(n, 0, 0))
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), wantSums(n, 0))
}

// TestGroupByKeyFixedWindows: fixed windows of 10 s over 60 s of event
// time: one pane per (key, window), at the window's max timestamp.
func TestGroupByKeyFixedWindows(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 60
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), gbkSumPipeline(n, 10*time.Second, 0))
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, true), wantSums(n, 10*time.Second))
}

// TestCoGroupByKey: the Go SDK marshals CoGroupByKey as an inject ParDo per
// input, a Flatten and a GroupByKey of union values; the runner groups the
// tagged values of both inputs under each key.
func TestCoGroupByKey(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	emails := beam.ParDo(s, gbkSplit, beam.Create(s, "amy:amy@a.org", "carl:carl@c.org", "amy:amy@b.org", "julia:julia@j.org"))
	phones := beam.ParDo(s, gbkSplit, beam.Create(s, "amy:111", "carl:222", "carl:333", "james:444"))
	out := beam.ParDo(s, gbkCoFormat, beam.CoGroupByKey(s, emails, phones))
	_ = beam.Reshuffle(s, out)
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), []string{
		"amy emails=[amy@a.org amy@b.org] phones=[111]",
		"carl emails=[carl@c.org] phones=[222 333]",
		"james emails=[] phones=[444]",
		"julia emails=[julia@j.org] phones=[]",
	})
}

// gbkRecoveryPipeline groups two branches: 0..n/2-1 straight from Create,
// and n/2..n-1 through a Reshuffle and a ParDo taking slow ms per element
// (one bundle of n/2 elements). The fast half reaches the GroupByKey (and
// its changelog) long before the slow half; the global window holds it.
func gbkRecoveryPipeline(n, slow int) *beam.Pipeline {
	var fast, late []int
	for i := 0; i < n; i++ {
		if i < n/2 {
			fast = append(fast, i)
		} else {
			late = append(late, i)
		}
	}
	p, s := beam.NewPipelineWithRoot()
	a := beam.ParDo(s, gbkKeyed, beam.CreateList(s, fast))
	b := beam.ParDo(s, gbkKeyed, beam.ParDo(s, &gbkSlow{SlowMillis: slow}, beam.Reshuffle(s, beam.CreateList(s, late))))
	out := beam.ParDo(s, gbkSum, beam.GroupByKey(s, beam.Flatten(s, a, b)))
	_ = beam.Reshuffle(s, out)
	return p
}

// TestGroupByKeyRecovery: an instance is stopped while the GroupByKey stage
// holds buffered values committed to its changelog (the fast half) and the
// slow half is still being processed upstream; a new instance of the same
// application restores the stores from the changelog and finishes. The
// sink topic (read_committed) holds exactly the expected panes, none twice,
// and the sums include the restored values.
func TestGroupByKeyRecovery(t *testing.T) {
	b := needBroker(t)
	const n, slow = 400, 25
	app := uniqueName(t, "app")
	bs := b.BootstrapServers()

	// First instance: stopped once the GroupByKey committed state (the slow
	// half takes ~n/2*slow ms more): at least 60 changelog records (a value
	// and a meta record each, 30 values). With any one record it was
	// stopped once after a first commit of 2 values (CI, 2026-12-05), and
	// the second instance read 398 records and 12 reports: 410, not fewer
	// than n (RecordsIn counts the report records too).
	stopOnceStateCommitted(t, bs, app, gbkRecoveryPipeline(n, slow), 60)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Second instance, same application: restores and completes.
	r := runApp(t, ctx, bs, app, gbkRecoveryPipeline(n, slow))
	checkLines(t, sinkStrings(t, ctx, bs, r.Plan, false), wantSums(n, 0))
	// The second instance read the rest of the GroupByKey's input and fired
	// every pane (the global window fires only at the end of time), with
	// the values the first one had committed to the changelog.
	for _, s := range r.Plan.Stages {
		if s.Head == plan.HeadGroupByKey {
			st := r.Stats[s.Name]
			if st.RecordsIn == 0 || st.RecordsIn >= n || st.ElementsOut != 5 {
				t.Errorf("second instance's GroupByKey stage %s: %+v, want some but fewer than %d records in, report records included (the rest restored), and 5 panes out", s.Name, st, n)
			}
		}
	}
}

// findChangelog returns a state changelog topic of app, or "", as admin's
// metadata request says.
func findChangelog(admin *kafka.AdminClient, app string) string {
	md, err := admin.GetMetadata(nil, true, 5000)
	if err != nil {
		return ""
	}
	for name := range md.Topics {
		if strings.HasPrefix(name, app+"-") && strings.HasSuffix(name, "-changelog") {
			return name
		}
	}
	return ""
}

// waitForChangelogRecords waits until one of app's changelog topics has at
// least min committed records (state a restore must bring back) and
// returns its name.
// It stops early with ended's error when ended (the job's state) returns one.
// One admin client serves every poll for the topic (it was a client per
// poll, every 100 ms for up to timeout).
func waitForChangelogRecords(bs, app string, timeout time.Duration, min int, ended func() error) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		return "", fmt.Errorf("admin client: %w", err)
	}
	defer admin.Close()
	var changelog string
	for changelog == "" || !hasRecords(ctx, bs, changelog, min) {
		if ctx.Err() != nil {
			return "", fmt.Errorf("no committed record in a changelog topic of %s after %v", app, timeout)
		}
		if err := ended(); err != nil {
			return "", fmt.Errorf("waiting for changelog records of %s: %w", app, err)
		}
		time.Sleep(100 * time.Millisecond)
		changelog = findChangelog(admin, app)
	}
	return changelog, nil
}

// hasRecords reports whether topic has at least min committed records.
func hasRecords(ctx context.Context, bootstrap, topic string, min int) bool {
	recs, _ := kafkaenv.Consume(ctx, bootstrap, topic, min, kafkaenv.ReadCommitted, 500*time.Millisecond)
	return len(recs) >= min
}

// TestGroupByKeySlidingWindows: windows of 10 s every 5 s put each element
// in two windows; one pane per (key, window).
func TestGroupByKeySlidingWindows(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 20
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	p, s := beam.NewPipelineWithRoot()
	kv := beam.WindowInto(s, window.NewSlidingWindows(5*time.Second, 10*time.Second), beam.ParDo(s, gbkKeyed, beam.CreateList(s, in)))
	_ = beam.Reshuffle(s, beam.ParDo(s, gbkSum, beam.GroupByKey(s, kv)))
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)

	type kw struct {
		key   string
		start int64
	}
	sums, counts := map[kw]int{}, map[kw]int{}
	for i := 0; i < n; i++ {
		last := int64(i) / 5 * 5000
		for _, start := range []int64{last - 5000, last} {
			k := kw{fmt.Sprintf("k%d", i%5), start}
			sums[k] += i
			counts[k]++
		}
	}
	var want []string
	for k, sum := range sums {
		want = append(want, fmt.Sprintf("%s [%d,%d) ts=%d ON_TIME/0/0/first=true/last=true n=%d sum=%d", k.key, k.start, k.start+10000, k.start+9999, counts[k], sum))
	}
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, true), want)
}

// TestGroupByKeySessions: session windows with a 10 s gap merge
// runner-side: a's values at 0, 4 and 12 s form one session [0,22) (12
// bridges nothing here but extends it), 40 s starts another; b's 5 s is
// alone; c's 30 s and 35 s merge.
func TestGroupByKeySessions(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, gbkTimed, beam.Create(s, "a:0", "a:4", "a:12", "a:40", "b:5", "c:30", "c:35"))
	kv = beam.WindowInto(s, window.NewSessions(10*time.Second), kv)
	_ = beam.Reshuffle(s, beam.ParDo(s, gbkSum, beam.GroupByKey(s, kv)))
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, true), []string{
		"a [0,22000) ts=21999 ON_TIME/0/0/first=true/last=true n=3 sum=16",
		"a [40000,50000) ts=49999 ON_TIME/0/0/first=true/last=true n=1 sum=40",
		"b [5000,15000) ts=14999 ON_TIME/0/0/first=true/last=true n=1 sum=5",
		"c [30000,45000) ts=44999 ON_TIME/0/0/first=true/last=true n=2 sum=65",
	})
}

// TestCombinePerKey: stats.SumPerKey and a global beam.Combine (the Go SDK
// marshals both as a combine_per_key composite; the runner lifts them, see
// combine_test.go: a precombine before the shuffle, merge and extract
// after the GroupByKey).
func TestCombinePerKey(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 200
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	p, s := beam.NewPipelineWithRoot()
	col := beam.CreateList(s, in)
	perKey := beam.ParDo(s, gbkFormatKV, stats.SumPerKey(s, beam.ParDo(s, gbkKeyed, col)))
	total := beam.ParDo(s, gbkFormatInt, stats.Sum(s, col))
	_ = beam.Reshuffle(s, beam.Flatten(s, perKey, total))
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)
	want := []string{fmt.Sprintf("total=%d", n*(n-1)/2)}
	for k := 0; k < 5; k++ {
		sum := 0
		for i := k; i < n; i += 5 {
			sum += i
		}
		want = append(want, fmt.Sprintf("k%d=%d", k, sum))
	}
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), want)
}

// stopOnceStateCommitted runs p as an instance of application app and stops
// it (cancels its context: a clean stop) as soon as a changelog topic of the
// application holds at least min committed records, i.e. a stateful stage
// has committed state. It returns that changelog topic.
func stopOnceStateCommitted(t *testing.T, bs, app string, p *beam.Pipeline, min int) string {
	t.Helper()
	ctx1, cancel1 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := beam.Run(withJob(ctx1, bs, app), runner.Name, p)
		done <- err
	}()
	var runErr error
	ended := func() error {
		select {
		case runErr = <-done:
			return fmt.Errorf("the first instance ended before committing state: %v", runErr)
		default:
			return nil
		}
	}
	changelog, err := waitForChangelogRecords(bs, app, 3*time.Minute, min, ended)
	cancel1()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && ctx1.Err() == nil {
		t.Fatalf("first instance: %v", err)
	}
	t.Logf("first instance stopped with state in %s", changelog)
	return changelog
}

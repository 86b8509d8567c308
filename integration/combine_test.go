package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// cmbMeanAcc is the accumulator of cmbMeanFn: a type distinct from the
// input (int) and the output (float64), so the shuffle carries the
// accumulator coder's bytes.
type cmbMeanAcc struct {
	Sum, Count int
}

// cmbMeanFn is a CombineFn: the mean of ints.
type cmbMeanFn struct{}

func (*cmbMeanFn) CreateAccumulator() cmbMeanAcc { return cmbMeanAcc{} }

func (*cmbMeanFn) AddInput(a cmbMeanAcc, v int) cmbMeanAcc {
	return cmbMeanAcc{Sum: a.Sum + v, Count: a.Count + 1}
}

func (*cmbMeanFn) MergeAccumulators(a, b cmbMeanAcc) cmbMeanAcc {
	return cmbMeanAcc{Sum: a.Sum + b.Sum, Count: a.Count + b.Count}
}

func (*cmbMeanFn) ExtractOutput(a cmbMeanAcc) float64 {
	if a.Count == 0 {
		return 0
	}
	return float64(a.Sum) / float64(a.Count)
}

func cmbAdd(a, b int) int { return a + b }

// cmbFormatKV formats a per-key result with its window and timestamp.
func cmbFormatKV(w typex.Window, ts beam.EventTime, k string, v int) string {
	return fmt.Sprintf("%s %s ts=%s =%d", k, gbkWindow(w), gbkTime(mtime.Time(ts)), v)
}

// cmbFormatMean formats a per-key mean.
func cmbFormatMean(w typex.Window, ts beam.EventTime, k string, v float64) string {
	return fmt.Sprintf("mean %s %s ts=%s =%.3f", k, gbkWindow(w), gbkTime(mtime.Time(ts)), v)
}

// cmbFormatTotal formats a global result.
func cmbFormatTotal(w typex.Window, ts beam.EventTime, v int) string {
	return fmt.Sprintf("total %s ts=%s =%d", gbkWindow(w), gbkTime(mtime.Time(ts)), v)
}

type cmbTag struct{ Tag string }

func (f *cmbTag) ProcessElement(s string) string { return f.Tag + " " + s }

func init() {
	register.Combiner3[cmbMeanAcc, int, float64](&cmbMeanFn{})
	register.Function2x1(cmbAdd)
	register.Function4x1(cmbFormatKV)
	register.Function4x1(cmbFormatMean)
	register.Function3x1(cmbFormatTotal)
	register.DoFn1x1[string, string](&cmbTag{})
}

// combinePipeline: 0..n-1 as (k<i mod 5>, i) at event time i s (gbkKeyed),
// reshuffled first if reshuffle (so the precombine runs in the bundles of
// four tasks), in fixed windows of size if size > 0, then four combines,
// formatted, flattened and reshuffled to the sink topic:
//
//	sum   stats.SumPerKey             KV<string, int>, accumulator int
//	count stats.Count of the keys     KV<string, int>
//	total beam.Combine(cmbAdd)        a CombineGlobally: int
//	mean  CombinePerKey(cmbMeanFn)    accumulator cmbMeanAcc{Sum, Count}
func combinePipeline(n int, size time.Duration, reshuffle bool) *beam.Pipeline {
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	p, s := beam.NewPipelineWithRoot()
	col := beam.CreateList(s, in)
	if reshuffle {
		col = beam.Reshuffle(s, col)
	}
	kv := beam.ParDo(s, gbkKeyed, col)
	if size > 0 {
		kv = beam.WindowInto(s, window.NewFixedWindows(size), kv)
	}
	sum := beam.ParDo(s, &cmbTag{"sum"}, beam.ParDo(s, cmbFormatKV, stats.SumPerKey(s, kv)))
	count := beam.ParDo(s, &cmbTag{"count"}, beam.ParDo(s, cmbFormatKV, stats.Count(s, beam.DropValue(s, kv))))
	total := beam.ParDo(s, cmbFormatTotal, beam.Combine(s, cmbAdd, beam.DropKey(s, kv)))
	mean := beam.ParDo(s, cmbFormatMean, beam.CombinePerKey(s, &cmbMeanFn{}, kv))
	_ = beam.Reshuffle(s, beam.Flatten(s, sum, count, total, mean))
	return p
}

// wantCombines is combinePipeline's output computed in Go: one line per
// (combine, key, window), stamped at the window's max timestamp (the end of
// the global window, or start+size-1 ms).
func wantCombines(n int, size time.Duration) []string {
	type kw struct {
		key   string
		start int64
	}
	sums, counts := map[kw]int{}, map[kw]int{}
	totals := map[int64]int{}
	for i := 0; i < n; i++ {
		k := kw{key: fmt.Sprintf("k%d", i%5)}
		if size > 0 {
			ms := size.Milliseconds()
			k.start = int64(i) * 1000 / ms * ms
		}
		sums[k] += i
		counts[k]++
		totals[k.start] += i
	}
	win := func(start int64) (string, string) {
		if size == 0 {
			return "global", "eogw"
		}
		return fmt.Sprintf("[%d,%d)", start, start+size.Milliseconds()), fmt.Sprint(start + size.Milliseconds() - 1)
	}
	var out []string
	for k, sum := range sums {
		w, ts := win(k.start)
		out = append(out,
			fmt.Sprintf("sum %s %s ts=%s =%d", k.key, w, ts, sum),
			fmt.Sprintf("count %s %s ts=%s =%d", k.key, w, ts, counts[k]),
			fmt.Sprintf("mean %s %s ts=%s =%.3f", k.key, w, ts, float64(sum)/float64(counts[k])))
	}
	for start, total := range totals {
		w, ts := win(start)
		out = append(out, fmt.Sprintf("total %s ts=%s =%d", w, ts, total))
	}
	return out
}

// keepGBKTopics turns the purge off (issue 23): gbkTopicElements reads
// the GroupByKey stages' input topics after the job, and a job that ran
// longer than --purge_interval (30 s, under load) would have deleted what
// those stages consumed.
func keepGBKTopics(o *runner.Options) { o.PurgeInterval = 0 }

// gbkTopicElements counts the element records (not watermark reports) in
// the input topic of each GroupByKey stage of pl, read_committed.
func gbkTopicElements(t *testing.T, ctx context.Context, bootstrap string, pl *plan.Plan) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, s := range pl.Stages {
		if s.Head != plan.HeadGroupByKey {
			continue
		}
		recs, err := kafkaenv.Consume(ctx, bootstrap, s.InputTopic, -1, kafkaenv.ReadCommitted, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			env := &pb.Envelope{}
			if err := proto.Unmarshal(r.Value, env); err != nil {
				t.Fatalf("record in %s is not an Envelope: %v", s.InputTopic, err)
			}
			if env.GetElement() != nil {
				out[s.Name]++
			}
		}
	}
	return out
}

// checkLifted fails unless every GroupByKey stage of r is the head of a
// lifted combine (its first fused transform merges accumulators) and its
// topic carries at most one accumulator per pane per bundle of the stage
// writing it, and fewer records than the n values: the precombine emits one
// accumulator per (key, window) it saw in a bundle, a pane is one (key,
// window), and the stage loop runs one bundle per transaction (so Commits
// + Aborts bounds the bundles). It fails too unless r has exactly stages
// GroupByKey stages, each with records on its topic (none would pass every
// check above). It returns the element records per stage.
func checkLifted(t *testing.T, ctx context.Context, bootstrap string, r *runner.Result, n, stages int) map[string]int {
	t.Helper()
	got := gbkTopicElements(t, ctx, bootstrap, r.Plan)
	seen := 0
	for _, s := range r.Plan.Stages {
		if s.Head != plan.HeadGroupByKey {
			continue
		}
		seen++
		if got[s.Name] == 0 {
			t.Errorf("GroupByKey stage %s: no element record on its topic", s.Name)
		}
		if len(s.URNs) == 0 || s.URNs[0] != plan.URNCombinePerKeyMerge {
			t.Errorf("GroupByKey stage %s is not a lifted combine: fused %v", s.Name, s.TransformNames)
			continue
		}
		panes := int(r.Stats[s.Name].ElementsIn) // a GroupByKey head's elements are its fired panes
		bundles := 0
		for _, up := range s.Upstreams {
			st := r.Stats[up]
			bundles += int(st.Commits + st.Aborts)
		}
		if limit := panes * bundles; got[s.Name] > limit || got[s.Name] >= n {
			t.Errorf("stage %s: %d records on its topic for %d values, want at most %d panes × %d bundles = %d, and fewer than the values", s.Name, got[s.Name], n, panes, bundles, limit)
		}
		t.Logf("stage %s: %d accumulators on its topic for %d values (%d panes, %d upstream bundles)", s.Name, got[s.Name], n, panes, bundles)
	}
	if seen != stages {
		t.Errorf("%d GroupByKey stages in the plan, want %d (one per combine)", seen, stages)
	}
	return got
}

// TestCombineLiftedGlobalWindow: SumPerKey, Count, a global Combine and a
// CombineFn with a {sum, count} accumulator, lifted, over the global
// window: exact results, and the four shuffles carry accumulators. The
// values are made in one bundle (the Impulse stage), so each shuffle
// carries exactly one accumulator per key.
func TestCombineLiftedGlobalWindow(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 500
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), combinePipeline(n, 0, false), keepGBKTopics)
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), wantCombines(n, 0))
	got := checkLifted(t, ctx, b.BootstrapServers(), r, n, 4)
	total := 0
	for _, c := range got {
		total += c
	}
	if total != 5+5+1+5 {
		t.Errorf("shuffles carried %d accumulators (%v), want one per key of each combine: 16", total, got)
	}
}

// TestCombineLiftedFixedWindows: the same combines in fixed windows of 40 s
// over 0..199 s, with a Reshuffle first so the precombine runs in many
// bundles of four tasks: exact results per (key, window), and each
// shuffle carries at most keys × windows accumulators per upstream bundle.
//
// The window is 40 s, not 20 s, because the Reshuffle's topic is written
// round-robin (an unkeyed output): value i goes to partition i mod 4, and a
// pane (key i mod 5, window) of 20 s holds the values 20w+k+5j, j = 0..3,
// one on each partition. With one bundle per task nothing could combine and
// the "fewer records than values" check failed (CI, stop 19). A 40 s pane
// holds 8 values, two on each partition, five records apart.
func TestCombineLiftedFixedWindows(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 200
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), combinePipeline(n, 40*time.Second, true), keepGBKTopics)
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, true), wantCombines(n, 40*time.Second))
	checkLifted(t, ctx, b.BootstrapServers(), r, n, 4)
}

// cmbSumValues sums a grouped key's values: the unlifted expansion's
// combine, written by hand.
func cmbSumValues(k string, vs func(*int) bool) (string, int) {
	sum, v := 0, 0
	for vs(&v) {
		sum += v
	}
	return k, sum
}

func init() { register.Function2x2(cmbSumValues) }

// TestCombineLiftedShuffleVolume measures the shuffle of a sum per key of
// the same input, lifted (stats.SumPerKey) and unlifted (GroupByKey and a
// summing ParDo: the expansion the runner ran before lifting), both after a
// Reshuffle, so that the values arrive in several bundles (a transaction
// reads what one commit interval polls, at most
// stage.Config.MaxBatchRecords, 50 000 by default) of four tasks: the
// records on the GroupByKey stage's topic, with the same sums. Lifted, the
// topic carries at most one accumulator per key per upstream bundle.
func TestCombineLiftedShuffleVolume(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 25000
	build := func(lifted bool) *beam.Pipeline {
		in := make([]int, n)
		for i := range in {
			in[i] = i
		}
		p, s := beam.NewPipelineWithRoot()
		kv := beam.ParDo(s, gbkKeyed, beam.Reshuffle(s, beam.CreateList(s, in)))
		var sums beam.PCollection
		if lifted {
			sums = stats.SumPerKey(s, kv)
		} else {
			sums = beam.ParDo(s, cmbSumValues, beam.GroupByKey(s, kv))
		}
		_ = beam.Reshuffle(s, beam.ParDo(s, &cmbTag{"sum"}, beam.ParDo(s, cmbFormatKV, sums)))
		return p
	}
	var want []string
	for k := 0; k < 5; k++ {
		sum := 0
		for i := k; i < n; i += 5 {
			sum += i
		}
		want = append(want, fmt.Sprintf("sum k%d global ts=eogw =%d", k, sum))
	}
	count, bundles := map[bool]int{}, 0
	for _, lifted := range []bool{false, true} {
		r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, fmt.Sprint("lifted-", lifted)), build(lifted), keepGBKTopics)
		checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), want)
		for name, c := range gbkTopicElements(t, ctx, b.BootstrapServers(), r.Plan) {
			count[lifted] += c
			up := r.Plan.Stage(name).Upstreams[0]
			if lifted {
				bundles = int(r.Stats[up].Commits + r.Stats[up].Aborts)
			}
			t.Logf("lifted=%v: %d records on %s's topic for %d values; upstream %s: %+v", lifted, c, name, n, up, r.Stats[up])
		}
	}
	if count[false] != n {
		t.Errorf("unlifted: %d records on the GroupByKey topic, want one per value: %d", count[false], n)
	}
	if count[true] < 5 || count[true] > 5*bundles || count[true] >= n/10 {
		t.Errorf("lifted: %d records on the GroupByKey topic, want at least one per key (5), at most 5 keys × %d upstream bundles, far fewer than the %d values", count[true], bundles, n)
	}
	t.Logf("shuffle records for %d values: unlifted %d, lifted %d (%.1fx fewer)", n, count[false], count[true], float64(count[false])/float64(max(count[true], 1)))
}

// TestCombineLiftedSessions: session windows (10 s gap) lift too: the
// precombine accumulates per unmerged window (a value's [t, t+gap)), the
// GroupByKey merges the windows and MergeAccumulators their accumulators.
// Same input and sessions as TestGroupByKeySessions.
func TestCombineLiftedSessions(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, gbkTimed, beam.Create(s, "a:0", "a:4", "a:12", "a:40", "b:5", "c:30", "c:35"))
	kv = beam.WindowInto(s, window.NewSessions(10*time.Second), kv)
	sum := beam.ParDo(s, &cmbTag{"sum"}, beam.ParDo(s, cmbFormatKV, stats.SumPerKey(s, kv)))
	mean := beam.ParDo(s, cmbFormatMean, beam.CombinePerKey(s, &cmbMeanFn{}, kv))
	_ = beam.Reshuffle(s, beam.Flatten(s, sum, mean))
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p, keepGBKTopics)
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, true), []string{
		"sum a [0,22000) ts=21999 =16",
		"sum a [40000,50000) ts=49999 =40",
		"sum b [5000,15000) ts=14999 =5",
		"sum c [30000,45000) ts=44999 =65",
		"mean a [0,22000) ts=21999 =5.333",
		"mean a [40000,50000) ts=49999 =40.000",
		"mean b [5000,15000) ts=14999 =5.000",
		"mean c [30000,45000) ts=44999 =32.500",
	})
	// Lifted, but each value is alone in its unmerged window [t, t+gap)
	// here, so the precombine reduces nothing: one accumulator per value.
	got := gbkTopicElements(t, ctx, b.BootstrapServers(), r.Plan)
	stages := 0
	for _, s := range r.Plan.Stages {
		if s.Head != plan.HeadGroupByKey {
			continue
		}
		stages++
		if c := got[s.Name]; len(s.URNs) == 0 || s.URNs[0] != plan.URNCombinePerKeyMerge || c != 7 {
			t.Errorf("stage %s: fused %v, %d records on its topic; want a lifted combine and 7 (one per value and unmerged window)", s.Name, s.TransformNames, c)
		}
	}
	if stages != 2 {
		t.Errorf("%d GroupByKey stages in the plan, want 2 (SumPerKey and the mean's CombinePerKey)", stages)
	}
}

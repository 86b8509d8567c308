package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/kafkastreams/kafkastreams/runner"
)

// EnvBenchInstancesValues is BenchmarkInstances' input size in values;
// default 300 000.
const EnvBenchInstancesValues = "KAFKASTREAMS_BENCH_INSTANCES_VALUES"

// instancesBenchPartitions is the internal topics' partition count in
// BenchmarkInstances: divisible by 1, 2 and 3, so each instance count can
// share the tasks evenly.
const instancesBenchPartitions = 6

// genValues emits N values over N/10 keys, their event times spread over
// ten minutes (ten fixed one-minute windows); BenchmarkGroupByKeyStage's
// input too.
type genValues struct{ N int }

func (g *genValues) ProcessElement(_ []byte, emit func(beam.EventTime, string, int)) {
	keys := max(1, g.N/10)
	for i := 0; i < g.N; i++ {
		emit(mtime.FromMilliseconds(int64(i%600)*1000), "key"+strconv.Itoa(i%keys), i)
	}
}

func init() {
	register.DoFn2x0[[]byte, func(beam.EventTime, string, int)](&genValues{})
	// One instance of the job BenchmarkInstances measures: generate ->
	// Reshuffle -> identity -> GroupByKey (fixed one-minute windows) ->
	// count -> Reshuffle, on instancesBenchPartitions tasks per stage.
	childPipelines["bench-instances"] = func(o *runner.Options) *beam.Pipeline {
		n, _ := strconv.Atoi(os.Getenv(envChildN))
		o.InternalTopicPartitions = instancesBenchPartitions
		p, s := beam.NewPipelineWithRoot()
		kv := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, &genValues{N: n}, beam.Impulse(s)))
		kv = beam.ParDo(s, identityKV, beam.Reshuffle(s, kv))
		_ = beam.Reshuffle(s, beam.ParDo(s, countFn, beam.GroupByKey(s, kv)))
		return p
	}
}

// BenchmarkInstances runs one bounded job (genValues' values, Reshuffle,
// a GroupByKey over one-minute windows, a last Reshuffle: 4 stages of
// instancesBenchPartitions tasks, but the generator's one) as 1, 2 and 3
// instances (OS processes of this test binary, one application id each
// time, all started together) on the package's broker, one count after the
// other, and reports for each:
//
//	records/s    values / wall time (the first start to the last exit)
//	cpu-s/M      the instances' CPU seconds (user + system, summed) per
//	             million values: what a machine with more cores needs
//	wall-s       the wall time
//	busy-share   the least share of the GroupByKey stage's values one
//	             instance took (1/k when the tasks are shared evenly)
//
// It checks that the stateless stage's instances together took every value
// exactly once. On a machine with fewer cores than instances the records/s
// cannot grow; cpu-s/M says how many cores a rate needs. It ignores b.N:
// run it with -benchtime=1x.
func BenchmarkInstances(b *testing.B) {
	if broker == nil {
		b.Skip("needs a Kafka broker; not under -short")
	}
	n := 300_000
	if v := os.Getenv(EnvBenchInstancesValues); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("%s=%q: not a positive count", EnvBenchInstancesValues, v)
		}
	}
	b.ResetTimer()
	for k := 1; k <= 3; k++ {
		b.Run(fmt.Sprintf("instances=%d", k), func(b *testing.B) {
			app := fmt.Sprintf("bench-instances-%d-%d", k, time.Now().UnixNano())
			start := time.Now()
			cs := make([]*child, k)
			for i := range cs {
				cs[i] = startPipelineChild(b, broker, "bench-instances", app, n, 0, i)
			}
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() { defer wg.Done(); _ = c.cmd.Wait() }()
			}
			wg.Wait()
			wall := time.Since(start)
			var cpu time.Duration
			var stateless uint64
			gbk := make([]uint64, k)
			var gbkAll uint64
			for i, c := range cs {
				r := c.result(b)
				if r.Err != "" {
					b.Fatalf("instance %d of %d failed: %s\n%s", i, k, r.Err, tail(c.log.String(), 4000))
				}
				cpu += c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()
				for name, st := range r.Stages {
					switch {
					case strings.HasPrefix(name, "s1-Reshuffle"):
						stateless += st.ElementsIn
					case strings.Contains(name, "CoGBK"):
						gbk[i] += st.RecordsIn
						gbkAll += st.RecordsIn
					}
				}
			}
			if stateless != uint64(n) {
				b.Fatalf("%d instances: the stateless stage took %d values in all, want %d, each once", k, stateless, n)
			}
			least := 1.0
			for _, g := range gbk {
				least = min(least, float64(g)/float64(max(gbkAll, 1)))
			}
			b.ReportMetric(float64(n)/wall.Seconds(), "records/s")
			b.ReportMetric(cpu.Seconds()/float64(n)*1e6, "cpu-s/M")
			b.ReportMetric(wall.Seconds(), "wall-s")
			b.ReportMetric(least, "busy-share")
			b.Logf("%d instances, %d values: %.1f s, %.0f values/s, %.1f CPU s (%.1f per M values), GroupByKey records by instance %v",
				k, n, wall.Seconds(), float64(n)/wall.Seconds(), cpu.Seconds(), cpu.Seconds()/float64(n)*1e6, gbk)
		})
	}
}

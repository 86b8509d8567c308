package integration

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/periodic"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// sdfOne keys every element alike, to count them per window.
func sdfOne(_ []byte) (string, int) { return "n", 1 }

// sdfWindowCount formats a window's count with the window relative to
// Start (ms), so the expected output does not depend on the wall clock.
type sdfWindowCount struct{ Start int64 }

func (f *sdfWindowCount) ProcessElement(w beam.Window, _ string, n int) string {
	iw := w.(window.IntervalWindow)
	return fmt.Sprintf("[%d,%d) %d", int64(iw.Start)-f.Start, int64(iw.End)-f.Start, n)
}

// slowSDF claims the positions of [0, N) one by one, 10 ms apart, and
// never checkpoints by itself: only the runner can split it.
type slowSDF struct{ N int64 }

func (f *slowSDF) CreateInitialRestriction(_ []byte) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: f.N}
}
func (f *slowSDF) SplitRestriction(_ []byte, r offsetrange.Restriction) []offsetrange.Restriction {
	return []offsetrange.Restriction{r}
}
func (f *slowSDF) RestrictionSize(_ []byte, r offsetrange.Restriction) float64 { return r.Size() }
func (f *slowSDF) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}
func (f *slowSDF) ProcessElement(rt *sdf.LockRTracker, _ []byte, emit func(int)) sdf.ProcessContinuation {
	for p := rt.GetRestriction().(offsetrange.Restriction).Start; rt.TryClaim(p); p++ {
		emit(int(p))
		time.Sleep(10 * time.Millisecond)
	}
	return sdf.StopProcessing()
}

func init() {
	register.Function1x2(sdfOne)
	register.DoFn3x1[beam.Window, string, int, string](&sdfWindowCount{})
	register.DoFn3x1[*sdf.LockRTracker, []byte, func(int), sdf.ProcessContinuation](&slowSDF{})
	register.Emitter1[int]()
}

// TestRunnerInitiatedCheckpoint: a splittable DoFn that would claim its
// 150 positions in one 1.5 s call is split by the runner every commit
// interval (100 ms; a ProcessBundleSplit at fraction 0): its bundles stay
// short, the rest of the restriction is kept as a residual and resumed,
// and every position comes out exactly once (count and sum exact).
func TestRunnerInitiatedCheckpoint(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	out := beam.ParDo(s, &slowSDF{N: 150}, beam.Impulse(s))
	passert.Count(s, out, "positions", 150)
	passert.Sum(s, out, "sum", 150, 149*150/2)
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)
	for _, st := range r.Plan.Stages {
		if st.Head == plan.HeadSplittable {
			got := r.Stats[st.Name].Bundles
			if got < 3 {
				t.Errorf("stage %s ran %d bundles for a 1.5 s restriction, want several (split every 100 ms)", st.Name, got)
			}
			t.Logf("stage %s: %d bundles", st.Name, got)
			return
		}
	}
	t.Fatal("no splittable stage in the plan")
}

// TestSelfCheckpointingSplittableDoFn: periodic.Impulse, a splittable
// DoFn that emits one element at each 300 ms tick of [start, start+2.4 s)
// and checkpoints between ticks (sdf.ResumeProcessingIn) with a manual
// watermark estimator, runs as a splittable stage: each residual is kept in
// the task's state and resumed when its delay has passed, and the output
// watermark follows the estimator, so the 1-second windows fire with
// exactly the ticks they hold (4, 3 and 1) and the job ends by itself. The
// stage ran more than one bundle: the DoFn did checkpoint (a resumed
// residual emits every tick whose time has passed, so a late resume covers
// several).
func TestSelfCheckpointingSplittableDoFn(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now().Truncate(time.Second).Add(3 * time.Second)
	p, s := beam.NewPipelineWithRoot()
	ticks := periodic.Impulse(s, start, start.Add(2400*time.Millisecond), 300*time.Millisecond, false)
	counts := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Second), beam.ParDo(s, sdfOne, ticks)))
	out := beam.ParDo(s, &sdfWindowCount{Start: start.UnixMilli()}, counts)
	passert.Equals(s, beam.WindowInto(s, window.NewGlobalWindows(), out), "[0,1000) 4", "[1000,2000) 3", "[2000,3000) 1")
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)
	var st *plan.Stage
	for _, x := range r.Plan.Stages {
		if x.Head == plan.HeadSplittable {
			st = x
		}
	}
	if st == nil {
		t.Fatalf("no splittable stage in the plan: %v", r.Plan.Stages)
	}
	got := r.Stats[st.Name].Bundles
	if got < 2 {
		t.Errorf("stage %s ran %d bundle, want more: the DoFn did not checkpoint", st.Name, got)
	}
	if !strings.Contains(st.HeadUniqueName, "periodic") {
		t.Errorf("the splittable stage %s heads %q, want periodic.Impulse's DoFn", st.Name, st.HeadUniqueName)
	}
	t.Logf("stage %s: %d bundles for 8 ticks", st.Name, got)
}

// sdfTag formats a position as the exactly-once checks expect ("v<i>").
func sdfTag(i int) string { return "v" + strconv.Itoa(i) }

func init() {
	register.Function1x1(sdfTag)
	// slowSDF's n positions (10 ms each) as "v<i>" strings through a
	// Reshuffle (its topic is the output), in transactions of at most 20
	// records: the splittable stage commits output and residuals early.
	childPipelines["sdf-eos"] = func(o *runner.Options) *beam.Pipeline {
		o.MaxBundleSize = 20
		n, _ := strconv.Atoi(os.Getenv(envChildN))
		p, s := beam.NewPipelineWithRoot()
		_ = beam.Reshuffle(s, beam.ParDo(s, sdfTag, beam.ParDo(s, &slowSDF{N: int64(n)}, beam.Impulse(s))))
		return p
	}
}

// TestSIGKILLSplittableDoFn: the one instance running a self-checkpointing
// splittable DoFn (400 positions, 10 ms each; the runner checkpoints it
// every commit interval) is SIGKILLed once its splittable stage has
// committed output, mid-restriction, and a copy restarted in its slot
// restores the residual from the stage's changelog and goes on from it:
// every position is in the output exactly once.
func TestSIGKILLSplittableDoFn(t *testing.T) {
	b := needBroker(t)
	const n = 400
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	first := startPipelineChild(t, b, "sdf-eos", app, n, 0, 0)
	line := waitForChildLog(t, []*child{first}, 0, firstOutputOf("s1-"), 2*time.Minute)
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("the instance did not die of the SIGKILL: %v", err)
	}
	out := app + "-s2-Reshuffle"
	before := outputStrings(t, ctx, b, out)
	if len(before) == 0 || len(before) >= n {
		t.Fatalf("right after the kill, %d of %d positions are committed: want some but not all (the kill was not mid-restriction)", len(before), n)
	}
	t.Logf("killed after %q; %d of %d positions committed", line, len(before), n)
	second := startPipelineChild(t, b, "sdf-eos", app, n, 0, 1)
	_ = second.cmd.Wait()
	if r := second.result(t); r.Err != "" {
		t.Fatalf("the restarted instance failed: %s\n%s", r.Err, tail(second.log.String(), 4000))
	}
	if !regexp.MustCompile(`splittable: task ready.* residuals=1`).MatchString(second.log.String()) {
		t.Errorf("the restarted instance restored no residual:\n%s", tail(second.log.String(), 3000))
	}
	checkExactlyOnce(t, outputStrings(t, ctx, b, out), n)
}

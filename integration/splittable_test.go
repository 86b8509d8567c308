package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/periodic"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

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

func init() {
	register.Function1x2(sdfOne)
	register.DoFn3x1[beam.Window, string, int, string](&sdfWindowCount{})
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

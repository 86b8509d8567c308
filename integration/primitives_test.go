package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/test/integration/primitives"

	"github.com/kafkastreams/kafkastreams/runner"
)

// The Go SDK's integration suite (sdks/go/test/integration/primitives) is this
// runner's ValidatesRunner suite. Its test files are not importable, so each
// of its 64 tests is listed here with the exported pipeline it builds, and
// runs on this runner against the real broker unless skipList names it with
// the reason. The skip list must shrink to nothing.

// primitive is one test of the suite.
type primitive struct {
	name  string                // the suite's test name
	scope func(beam.Scope)      // the pipeline, built in a fresh root scope, or
	pipe  func() *beam.Pipeline // the pipeline, built whole
	// then is a second pipeline the same test runs after the first.
	then func(beam.Scope)
	// custom, if set, is the test itself, for a primitive whose check is
	// not in its pipeline (the suite's test body, rewritten for this runner).
	custom func(t *testing.T, bootstrap string)
}

var primitiveSuite = []primitive{
	{name: "TestCheckpointing", scope: primitives.Checkpoints},
	{name: "TestCoGBK", scope: primitives.CoGBK},
	{name: "TestReshuffle", scope: primitives.Reshuffle},
	{name: "TestReshuffleKV", scope: primitives.ReshuffleKV},
	{name: "TestGBKShortRead", scope: primitives.GBKShortRead},
	{name: "TestDrain", custom: drainPrimitive},
	{name: "TestFlatten", scope: primitives.Flatten},
	{name: "TestFlattenDup", scope: primitives.FlattenDup},
	{name: "TestOomParDo"},
	{name: "TestParDoMultiOutput", pipe: primitives.ParDoMultiOutput},
	{name: "TestParDoSideInput", pipe: primitives.ParDoSideInput},
	{name: "TestParDoKVSideInput", pipe: primitives.ParDoKVSideInput},
	{name: "TestParDoMultiMapSideInput", pipe: primitives.ParDoMultiMapSideInput},
	{name: "TestParDoPipelineOptions", pipe: primitives.ParDoPipelineOptions},
	{name: "TestParDoBundleFinalizer", custom: bundleFinalizer},
	{name: "TestValueState", scope: primitives.ValueStateParDo},
	{name: "TestValueStateWindowed", scope: primitives.ValueStateParDoWindowed},
	{name: "TestValueStateClear", scope: primitives.ValueStateParDoClear},
	{name: "TestBagState", scope: primitives.BagStateParDo},
	{name: "TestBagStateClear", scope: primitives.BagStateParDoClear},
	{name: "TestBagStateBlindWrite", scope: primitives.BagStateBlindWriteParDo},
	{name: "TestCombiningState", scope: primitives.CombiningStateParDo},
	{name: "TestMapState", scope: primitives.MapStateParDo},
	{name: "TestMapStateClear", scope: primitives.MapStateParDoClear},
	{name: "TestSetState", scope: primitives.SetStateParDo},
	{name: "TestSetStateClear", scope: primitives.SetStateParDoClear},
	{name: "TestOrderedListState", scope: primitives.OrderedListStateParDo},
	{name: "TestTestStreamStrings", scope: primitives.TestStreamStrings},
	{name: "TestTestStreamByteSliceSequence", scope: primitives.TestStreamByteSliceSequence},
	{name: "TestTestStreamInt64Sequence", scope: primitives.TestStreamInt64Sequence},
	{name: "TestTestStreamInt16Sequence", scope: primitives.TestStreamInt16Sequence},
	{name: "TestTestStreamTwoInt64Sequences", scope: primitives.TestStreamTwoInt64Sequences},
	{name: "TestTestStreamFloat64Sequence", scope: primitives.TestStreamFloat64Sequence},
	{name: "TestTestStreamTwoFloat64Sequences", scope: primitives.TestStreamTwoFloat64Sequences},
	{name: "TestTestStreamBoolSequence", scope: primitives.TestStreamBoolSequence},
	{name: "TestTestStreamTwoBoolSequences", scope: primitives.TestStreamTwoBoolSequences},
	{name: "TestTestStreamTwoUserTypeSequences", scope: primitives.TestStreamTwoUserTypeSequences},
	{name: "TestTestStreamSimple", scope: primitives.TestStreamSimple},
	{name: "TestTestStreamSimple_InfinityDefault", scope: primitives.TestStreamSimple_InfinityDefault},
	{name: "TestTestStreamToGBK", scope: primitives.TestStreamToGBK},
	{name: "TestTestStreamTimersEventTime", scope: primitives.TestStreamTimersEventTime},
	{name: "TestTimers_EventTime_Bounded", scope: primitives.TimersEventTimeBounded},
	{name: "TestTimers_EventTime_Unbounded", scope: primitives.TimersEventTimeUnbounded},
	{name: "TestTimers_EventTime_WithOutputTimestamp", scope: primitives.TimersEventTime_WithOutputTimestamp},
	{name: "TestTimers_EventTime_WithNoOutputTimestamp", scope: primitives.TimersEventTime_WithNoOutputTimestamp},
	{name: "TestTimers_ProcessingTime_Infinity", scope: primitives.TimersProcessingTimeTestStream_Infinity},
	{name: "TestTimers_ProcessingTime_Bounded", scope: primitives.TimersProcessingTime_Bounded},
	{name: "TestTimers_ProcessingTime_Unbounded", scope: primitives.TimersProcessingTime_Unbounded},
	{name: "TestPanes", scope: primitives.Panes},
	{name: "TestWindowSums_Lifted", scope: primitives.WindowSums_Lifted},
	{name: "TestWindowSums_GBK", scope: primitives.WindowSums_GBK},
	{name: "TestValidateWindowedSideInputs", scope: primitives.ValidateWindowedSideInputs},
	{name: "TestTriggerDefault", scope: primitives.TriggerDefault},
	{name: "TestTriggerAlways", scope: primitives.TriggerAlways},
	{name: "TestTriggerElementCount", scope: primitives.TriggerElementCount},
	{name: "TestTriggerRepeat", scope: primitives.TriggerRepeat},
	{name: "TestTriggerAfterEndOfWindow", scope: primitives.TriggerAfterEndOfWindow},
	{name: "TestTriggerAfterAll", scope: primitives.TriggerAfterAll},
	{name: "TestTriggerAfterEach", scope: primitives.TriggerAfterEach},
	{name: "TestTriggerAfterAny", scope: primitives.TriggerAfterAny},
	{name: "TestTriggerAfterProcessingTime", scope: primitives.TriggerAfterProcessingTime, then: primitives.TriggerAfterProcessingTimeNotTriggered},
	{name: "TestTriggerAfterSynchronizedProcessingTime", scope: primitives.TriggerAfterSynchronizedProcessingTime},
	{name: "TestTriggerNever", scope: primitives.TriggerNever},
	{name: "TestTriggerOrFinally", scope: primitives.TriggerOrFinally},
}

// Reasons a primitive does not run yet, each naming what is missing.
const (
	needsGBK     = "needs runner-side GroupByKey (passert groups by a fixed key): in progress"
	needsOptions = "needs pipeline options in the harness: the DoFn's beam.PipelineOptions.Get(\"A\") is empty (passert reports A: , B: , C: ); not built yet"
	// The Beam model, not a missing piece: a trigger that finished closes
	// its window.
	needsTestStreamClock = "its first pipeline expects [6, 4], as Prism gives; here TestStream's AdvanceProcessingTime moves the job clock as on Prism (step.Config.JobClock), so AfterProcessingTime(+5s) fires [6] before 4 arrives, and then, by the Beam model, the trigger (not Repeatedly) has finished and its window is closed: 4 is dropped (Java's ReduceFnRunner: droppedDueToClosedWindow), the output is [6]. TestTestStreamProcessingTime (teststream_test.go) runs this pipeline here and asserts [6], and [6, 4] with Repeatedly. The NotTriggered half passes"
	needsTempLoc         = "needs --temp_location and heap dumps on OOM, a Dataflow-specific feature"
)

// skipList names every primitive that does not run today and why.
var skipList = map[string]string{
	"TestOomParDo": needsTempLoc,

	"TestTriggerAfterProcessingTime": needsTestStreamClock,
}

// TestPrimitiveSuiteIsComplete guards the list itself: every primitive is
// listed once, and every skip names a listed primitive.
func TestPrimitiveSuiteIsComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range primitiveSuite {
		if seen[p.name] {
			t.Errorf("%s listed twice", p.name)
		}
		seen[p.name] = true
		if p.scope == nil && p.pipe == nil && p.custom == nil {
			if _, ok := skipList[p.name]; !ok {
				t.Errorf("%s has no pipeline and no skip reason", p.name)
			}
		}
	}
	for name := range skipList {
		if !seen[name] {
			t.Errorf("skip list names %s, which is not in the suite", name)
		}
	}
	if len(primitiveSuite) != 64 {
		t.Errorf("the suite has 64 tests in Beam v2.77.0; the list has %d", len(primitiveSuite))
	}
	ran := len(primitiveSuite) - len(skipList)
	t.Logf("primitives: %d of %d run on this runner; %d skipped, each with its reason", ran, len(primitiveSuite), len(skipList))
}

// TestPrimitives runs the suite's pipelines on this runner.
func TestPrimitives(t *testing.T) {
	b := needBroker(t)
	for _, p := range primitiveSuite {
		t.Run(p.name, func(t *testing.T) {
			if why, ok := skipList[p.name]; ok {
				t.Skip("skipped because it " + why)
			}
			if p.custom != nil {
				p.custom(t, b.BootstrapServers())
				return
			}
			var pipes []*beam.Pipeline
			if p.pipe != nil {
				pipes = append(pipes, p.pipe())
			}
			for _, f := range []func(beam.Scope){p.scope, p.then} {
				if f != nil {
					pp, s := beam.NewPipelineWithRoot()
					f(s)
					pipes = append(pipes, pp)
				}
			}
			for i, pipe := range pipes {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				_, err := beam.Run(withJob(ctx, b.BootstrapServers(), uniqueName(t, fmt.Sprintf("app%d", i))), runner.Name, pipe)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// bundleFinalizer is the suite's TestParDoBundleFinalizer: each DoFn
// registers finalization callbacks (in StartBundle, ProcessElement,
// FinishBundle) that add to a process-wide counter; the runner runs them
// once the bundle's transaction has committed, so after the job the counter
// holds exactly the callbacks registered.
func bundleFinalizer(t *testing.T, bootstrap string) {
	for _, tc := range []struct {
		name string
		fn   func(beam.Scope)
		want int32
	}{
		{"InProcessElement", primitives.ParDoProcessElementBundleFinalizer, primitives.BundleFinalizerProcess},
		{"InFinishBundle", primitives.ParDoFinishBundleFinalizer, primitives.BundleFinalizerFinish},
		{"InStartProcessFinishBundle", primitives.ParDoFinalizerInAll, primitives.BundleFinalizerStart + primitives.BundleFinalizerProcess + primitives.BundleFinalizerFinish},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primitives.CountInvokeBundleFinalizer.Store(0)
			p, s := beam.NewPipelineWithRoot()
			tc.fn(s)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := beam.Run(withJob(ctx, bootstrap, uniqueName(t, "app")), runner.Name, p); err != nil {
				t.Fatal(err)
			}
			if got := primitives.CountInvokeBundleFinalizer.Load(); got != tc.want {
				t.Errorf("finalization callbacks added %d, want %d", got, tc.want)
			}
		})
	}
}

// drainPrimitive is the suite's TestDrain: primitives.Drain's splittable
// DoFn (TruncateFn) claims positions forever, one a second; the runner
// checkpoints it every commit interval. The test asks the application to
// drain (runner.Drain, as --drain and SIGUSR1 do) once the DoFn has
// emitted: the residuals run truncated (TruncateFn's TruncateRestriction:
// 20 positions), the watermark reaches the end of time, and the job ends
// by itself without an error.
func drainPrimitive(t *testing.T, bootstrap string) {
	p, s := beam.NewPipelineWithRoot()
	primitives.Drain(s)
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := startJob(ctx, bootstrap, app, p)
	select {
	case err := <-done:
		t.Fatalf("the unbounded job ended before the drain: %v", err)
	case <-time.After(4 * time.Second):
	}
	start := time.Now()
	if err := runner.Drain(ctx, bootstrap, nil, app, "drainPrimitive"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drained job: %v", err)
		}
		t.Logf("the drained job ended %v after the request", time.Since(start).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the job did not end after the drain")
	}
}

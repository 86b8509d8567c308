package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/periodic"
)

// TestUnboundedSDFHeadsItsStage: periodic.Impulse's splittable DoFn (it
// returns a ProcessContinuation, so its output is unbounded) is split:
// pair and split fuse into the Impulse stage, which writes the sized
// restrictions to the splittable stage's topic, and the process step heads
// that stage with the transforms after it fused. A second Build of the
// rewritten pipeline plans the same.
func TestUnboundedSDFHeadsItsStage(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	now := time.Now()
	ticks := periodic.Impulse(s, now, now.Add(time.Second), 100*time.Millisecond, false)
	beam.ParDo(s, toUpper, beam.ParDo(s, func(b []byte) string { return string(b) }, ticks))
	pp := marshal(t, p)
	pl, err := Build(pp, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := describe(pl)
	if len(pl.Stages) != 2 || pl.Stages[1].Head != HeadSplittable {
		t.Fatalf("plan:\n%s\nwant an impulse stage and a splittable stage", got)
	}
	imp, sdf := pl.Stages[0], pl.Stages[1]
	names := strings.Join(imp.TransformNames, " ")
	if !strings.Contains(names, "/PairWithRestriction") || !strings.Contains(names, "/SplitAndSizeRestrictions") {
		t.Errorf("impulse stage fuses %v, want the pair and split steps", imp.TransformNames)
	}
	if len(imp.Outputs) != 1 || imp.Outputs[0].Topics[0] != sdf.InputTopic {
		t.Errorf("impulse stage outputs %+v, want the sized restrictions to %s", imp.Outputs, sdf.InputTopic)
	}
	if sdf.Transforms[0] != sdf.HeadTransform || pp.GetComponents().GetTransforms()[sdf.HeadTransform].GetSpec().GetUrn() != URNSDFProcessSizedElements {
		t.Errorf("splittable stage's first transform %s is not its head, the process step", sdf.Transforms[0])
	}
	if !strings.HasSuffix(sdf.TransformNames[len(sdf.TransformNames)-1], "toUpper") {
		t.Errorf("splittable stage fuses %v, want the ParDos after the DoFn", sdf.TransformNames)
	}
	again, err := Build(pp, opts)
	if err != nil {
		t.Fatal(err)
	}
	if describe(again) != got {
		t.Errorf("a second Build planned\n%s\nthe first\n%s", describe(again), got)
	}
}

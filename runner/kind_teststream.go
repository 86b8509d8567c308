package runner

import (
	"context"
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/teststream"
)

// The TestStream kind (plan.HeadTestStream): the plan transaction writes
// one record per segment of the stream's events (teststream.Parse) to
// the stage's one-partition input topic; the head replays them. A job
// with a TestStream runs on its job clock.
func init() { registerKind(plan.HeadTestStream, testStreamKind{}) }

// testStreamKind is plan.HeadTestStream's kind.
type testStreamKind struct{}

// check parses the TestStream's events into segments: a payload the
// runner does not replay is refused here, before any topic is created.
func (testStreamKind) check(e *checkEnv, s *plan.Stage) (stageHead, error) {
	t := e.comps.GetTransforms()[s.HeadTransform]
	p := &pipepb.TestStreamPayload{}
	if err := proto.Unmarshal(t.GetSpec().GetPayload(), p); err != nil {
		return nil, fmt.Errorf("kafkastreams: TestStream %q: payload: %w", s.HeadUniqueName, err)
	}
	segs, err := teststream.Parse(fmt.Sprintf("%q (id %s)", s.HeadUniqueName, s.HeadTransform), p)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: %w", err)
	}
	return &testStreamStage{s: s, segs: segs}, nil
}

// testStreamStage is a checked TestStream stage and its segments.
type testStreamStage struct {
	s    *plan.Stage
	segs []teststream.Segment
}

func (ts *testStreamStage) needs() stageNeeds {
	return stageNeeds{records: append([][]byte{}, teststream.Records(ts.segs)...), jobClock: true}
}

func (ts *testStreamStage) build(_ context.Context, e *buildEnv) (builtHead, error) {
	enc, err := teststream.NewEncoder(e.comps, ts.s.HeadOutput)
	if err != nil {
		return builtHead{}, fmt.Errorf("kafkastreams: TestStream %q: %w", ts.s.HeadUniqueName, err)
	}
	h, err := teststream.NewHead(ts.s.Name, ts.segs, enc)
	if err != nil {
		return builtHead{}, err
	}
	return builtHead{head: h}, nil
}

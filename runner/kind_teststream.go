package runner

import (
	"fmt"
	"sort"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/teststream"
)

// planTestStreams parses the events of every TestStream stage of pl into
// segments (teststream.Parse), by stage name. A payload the runner does not
// replay is refused here, before any topic is created.
func planTestStreams(comps *pipepb.Components, pl *plan.Plan) (map[string][]teststream.Segment, error) {
	out := map[string][]teststream.Segment{}
	for _, s := range pl.Stages {
		if s.Head != plan.HeadTestStream {
			continue
		}
		t := comps.GetTransforms()[s.HeadTransform]
		p := &pipepb.TestStreamPayload{}
		if err := proto.Unmarshal(t.GetSpec().GetPayload(), p); err != nil {
			return nil, fmt.Errorf("kafkastreams: TestStream %q: payload: %w", s.HeadUniqueName, err)
		}
		segs, err := teststream.Parse(fmt.Sprintf("%q (id %s)", s.HeadUniqueName, s.HeadTransform), p)
		if err != nil {
			return nil, fmt.Errorf("kafkastreams: %w", err)
		}
		out[s.Name] = segs
	}
	return out, nil
}

// sourceRecords are the records recordPlan writes to source stages' input
// topics besides the impulses: every TestStream stage's segment records.
func sourceRecords(pl *plan.Plan, streams map[string][]teststream.Segment) map[string][][]byte {
	out := map[string][][]byte{}
	for name, segs := range streams {
		out[pl.Stage(name).InputTopic] = teststream.Records(segs)
	}
	return out
}

// newTestStreamHead builds the head of TestStream stage s.
func newTestStreamHead(comps *pipepb.Components, s *plan.Stage, segs []teststream.Segment) (*teststream.Head, error) {
	enc, err := teststream.NewEncoder(comps, s.HeadOutput)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: TestStream %q: %w", s.HeadUniqueName, err)
	}
	return teststream.NewHead(s.Name, segs, enc)
}

func sortedTopics[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

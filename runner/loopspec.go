package runner

import (
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// LoopSpec is what stage s's Loop needs of the plan: its topics, its
// upstreams, and for each output topic its partitions and whether it is
// keyed (a GroupByKey's or stateful ParDo's input, plan.HeadKind.Keyed).
// A source stage (plan.HeadKind.Source) reads raw records.
func LoopSpec(pl *plan.Plan, s *plan.Stage) (step.Spec, error) {
	topics := pl.Topics()
	sp := step.Spec{
		ApplicationID: pl.ApplicationID,
		Name:          s.Name,
		InputTopic:    s.InputTopic,
		Partitions:    s.Partitions,
		RawInput:      s.Head.Source(),
		Upstreams:     s.Upstreams,
		HeadOutput:    s.HeadOutput,
	}
	for _, o := range s.Outputs {
		out := step.Output{PCollection: o.PCollection}
		for i, t := range o.Topics {
			n, ok := topics[t]
			if !ok {
				return step.Spec{}, fmt.Errorf("kafkastreams: stage %s: output topic %s is not in the plan", s.Name, t)
			}
			c := pl.Consumer(t)
			out.Topics = append(out.Topics, step.OutputTopic{Name: t, Partitions: n, Keyed: c != nil && c.Head.Keyed(), Copies: o.Copies[i]})
		}
		sp.Outputs = append(sp.Outputs, out)
	}
	return sp, nil
}

// intervalWindowCoder is Beam's interval window coder URN (beam_runner_api
// StandardCoders.INTERVAL_WINDOW).
const intervalWindowCoder = "beam:coder:interval_window:v1"

// markIntervalWindows sets Output.IntervalWindows on each of sp's outputs
// whose PCollection's windowing strategy has the interval window coder:
// the stage writes such an element once per window (step.ExplodeWindows).
func markIntervalWindows(comps *pipepb.Components, sp *step.Spec) {
	for i, o := range sp.Outputs {
		col := comps.GetPcollections()[o.PCollection]
		ws := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
		sp.Outputs[i].IntervalWindows = comps.GetCoders()[ws.GetWindowCoderId()].GetSpec().GetUrn() == intervalWindowCoder
	}
}

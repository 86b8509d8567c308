package runner

import (
	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/sideinput"
)

// sideInputs copies stage s's side inputs from the plan into what
// stage/sideinput needs of them (sideinput.Input), in the stage's order:
// the package reads no plan.
func sideInputs(s *plan.Stage) []sideinput.Input {
	out := make([]sideinput.Input, 0, len(s.SideInputs))
	for _, si := range s.SideInputs {
		out = append(out, sideinput.Input{
			Transform: si.Transform, TransformName: si.TransformName, LocalName: si.LocalName,
			PCollection: si.PCollection, Topic: si.Topic, Upstream: si.Upstream,
		})
	}
	return out
}

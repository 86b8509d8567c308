package runner

import (
	"context"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// The passthrough kinds: a Reshuffle (the topic hop is the reshuffle), a
// Flatten (every input writes to the stage's topic) and a ParDo with side
// inputs that needs a stage of its own. Their records are their elements:
// nothing to check, no state, no topic of their own.
func init() {
	registerKind(plan.HeadReshuffle, passthroughKind{})
	registerKind(plan.HeadFlatten, passthroughKind{})
	registerKind(plan.HeadSideInputs, passthroughKind{})
}

// passthroughKind is a head kind whose head is step.Passthrough.
type passthroughKind struct{}

func (passthroughKind) check(*checkEnv, *plan.Stage) (stageHead, error) {
	return passthroughStage{}, nil
}

// passthroughStage is a checked passthrough stage.
type passthroughStage struct{}

func (passthroughStage) needs() stageNeeds { return stageNeeds{} }

func (passthroughStage) build(context.Context, *buildEnv) (builtHead, error) {
	return builtHead{head: &step.Passthrough{}}, nil
}

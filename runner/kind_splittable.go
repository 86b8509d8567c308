package runner

import (
	"context"
	"fmt"
	"log/slog"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/splittable"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// The splittable kind (plan.HeadSplittable): the process step of a
// splittable DoFn that may checkpoint heads a stage; its head
// (stage/splittable) keeps each task's residuals in task stores with a
// changelog. Its bundles are asked to checkpoint within the commit
// interval, and a drain runs them on a descriptor with the DoFn's
// truncate step (buildDrainStage).
func init() { registerKind(plan.HeadSplittable, splittableKind{}) }

// splittableKind is plan.HeadSplittable's kind.
type splittableKind struct{}

func (splittableKind) check(_ *checkEnv, s *plan.Stage) (stageHead, error) {
	return splittableStage{s: s}, nil
}

// splittableStage is a checked splittable stage.
type splittableStage struct{ s *plan.Stage }

func (splittableStage) needs() stageNeeds { return stageNeeds{changelog: true} }

// build opens the stage's stores and registers its drain descriptor.
func (ss splittableStage) build(ctx context.Context, e *buildEnv) (builtHead, error) {
	s := ss.s
	if e.fs == nil {
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: a splittable stage without SDK transforms", s.Name)
	}
	h, err := openStores(e, s, func(stores *state.Manager) (*splittable.Head, error) {
		return newSplittableHead(s, stores, e.log)
	})
	if err != nil {
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
	}
	drain, err := buildDrainStage(e.comps, s, e.srv.Endpoint())
	if err != nil {
		h.Close()
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: drain descriptor: %w", s.Name, err)
	}
	if err := e.srv.RegisterStage(ctx, drain.Descriptor); err != nil {
		h.Close()
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
	}
	// Runner-initiated checkpoints keep a bundle of a splittable DoFn
	// within the commit interval (a DoFn that never returns by itself is
	// split at its next claim; the rest is kept as a residual).
	return builtHead{head: h, close: h.Close, bundles: bundleOptions{drain: drain, checkpointAfter: e.o.CommitInterval, residuals: true}}, nil
}

// newSplittableHead builds the head of splittable stage s over its task
// stores (openStores: one per input partition with the stage's changelog),
// holding the residuals of its splittable DoFn (stage/splittable).
func newSplittableHead(s *plan.Stage, stores *state.Manager, log *slog.Logger) (*splittable.Head, error) {
	h, err := splittable.NewHead(splittable.Config{Stage: s.Name, Stores: stores, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("kafkastreams: splittable DoFn stage", "stage", s.Name, "transform", s.HeadUniqueName)
	return h, nil
}

// urnSDFTruncate is the truncate step of a splittable ParDo
// (beam_runner_api.proto, SplittableParDoComponents): the DoFn's
// TruncateRestriction, run on drain.
const urnSDFTruncate = "beam:transform:sdf_truncate_sized_restrictions:v1"

// buildDrainStage builds splittable stage s's drain descriptor (id
// "<stage>/drain"): the same transforms with the DoFn's truncate step
// between the data source and its process step, so that a restriction
// runs truncated (Beam's drain: the DoFn's TruncateRestriction, by
// default the whole of a bounded restriction and nothing of an unbounded
// one) and then to its end (the process step, no longer fed by the data
// source, cannot checkpoint).
func buildDrainStage(comps *pipepb.Components, s *plan.Stage, endpoint string) (*fnapi.Stage, error) {
	c := proto.Clone(comps).(*pipepb.Components)
	process := c.GetTransforms()[s.HeadTransform]
	var mainLocal string
	for local, pc := range process.GetInputs() {
		if pc == s.HeadOutput {
			mainLocal = local
		}
	}
	if mainLocal == "" {
		return nil, fmt.Errorf("process step %s does not read %s", s.HeadTransform, s.HeadOutput)
	}
	sized := c.GetPcollections()[s.HeadOutput]
	truncated := s.HeadOutput + "_truncated"
	tc := proto.Clone(sized).(*pipepb.PCollection)
	tc.UniqueName = sized.GetUniqueName() + "/Truncated"
	c.Pcollections[truncated] = tc
	tid := s.HeadTransform + "_truncate"
	c.Transforms[tid] = &pipepb.PTransform{
		UniqueName:    process.GetUniqueName() + "/TruncateSizedRestrictions",
		Spec:          &pipepb.FunctionSpec{Urn: urnSDFTruncate, Payload: process.GetSpec().GetPayload()},
		Inputs:        map[string]string{mainLocal: s.HeadOutput},
		Outputs:       map[string]string{"i0": truncated},
		EnvironmentId: process.GetEnvironmentId(),
	}
	process.Inputs[mainLocal] = truncated
	spec := stageSpec(s)
	spec.ID = s.Name + "/drain"
	spec.Transforms = append([]string{tid}, spec.Transforms...)
	return fnapi.BuildStage(c, spec, endpoint)
}

package runner

import (
	"fmt"
	"log/slog"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/sideinput"
	"github.com/kafkastreams/kafkastreams/stage/splittable"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/userstate"
)

// newStatefulHead builds the head of stateful ParDo stage s (fs is its
// built descriptor): a task store per input partition with the stage's
// changelog, the input's window coder and allowed lateness (for state
// garbage collection), and the ParDo's timer families; sides, the stage's
// side inputs (nil without), hold back timers of windows they are not
// ready for. The stores live under storeDir (the instance slot's); the
// stage's state.Manager is added to opened (the metrics read its stores).
func newStatefulHead(comps *pipepb.Components, pl *plan.Plan, s *plan.Stage, fs *fnapi.Stage, sides *sideinput.Set, storeDir, bootstrap string, props map[string]string, log *slog.Logger, opened map[string]*state.Manager) (*userstate.Head, error) {
	col, ok := comps.GetPcollections()[s.HeadOutput]
	if !ok {
		return nil, fmt.Errorf("stateful ParDo %q: input pcollection %s not found", s.HeadUniqueName, s.HeadOutput)
	}
	ws := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
	wc := comps.GetCoders()[ws.GetWindowCoderId()]
	stores, err := state.Open(state.Options{
		Dir:       storeDir,
		Name:      pl.ApplicationID + "-" + s.Name,
		Topic:     kafkaclient.ChangelogTopic(pl.ApplicationID, s.Name),
		Changelog: kafkaclient.ChangelogReader(bootstrap, props),
		Logger:    log,
	})
	if err != nil {
		return nil, err
	}
	var gate userstate.WindowGate
	if sides != nil {
		gate = sides
	}
	opened[s.Name] = stores
	h, err := userstate.NewHead(userstate.Config{
		Stage:           s.Name,
		Transform:       s.HeadTransform,
		Partitions:      s.Partitions,
		Stores:          stores,
		WindowCoderURN:  wc.GetSpec().GetUrn(),
		AllowedLateness: mtime.Time(ws.GetAllowedLateness()),
		Timers:          fs.Timers,
		Logger:          log,
		SideInputs:      gate,
	})
	if err != nil {
		stores.Close()
		return nil, err
	}
	log.Info("kafkastreams: stateful ParDo stage", "stage", s.Name, "transform", s.HeadUniqueName, "timer_families", len(fs.Timers), "allowed_lateness_ms", ws.GetAllowedLateness())
	return h, nil
}

// newSplittableHead builds the head of splittable stage s: a task store per
// input partition with the stage's changelog, holding the residuals of its
// splittable DoFn (stage/splittable). The stores live under storeDir.
func newSplittableHead(pl *plan.Plan, s *plan.Stage, storeDir, bootstrap string, props map[string]string, log *slog.Logger, opened map[string]*state.Manager) (*splittable.Head, error) {
	stores, err := state.Open(state.Options{
		Dir:       storeDir,
		Name:      pl.ApplicationID + "-" + s.Name,
		Topic:     kafkaclient.ChangelogTopic(pl.ApplicationID, s.Name),
		Changelog: kafkaclient.ChangelogReader(bootstrap, props),
		Logger:    log,
	})
	if err != nil {
		return nil, err
	}
	opened[s.Name] = stores
	h, err := splittable.NewHead(splittable.Config{Stage: s.Name, Stores: stores, Logger: log})
	if err != nil {
		stores.Close()
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

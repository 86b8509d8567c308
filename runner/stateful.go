package runner

import (
	"fmt"
	"log/slog"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/splittable"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/userstate"
)

// newStatefulHead builds the head of stateful ParDo stage s (fs is its
// built descriptor): a task store per input partition with the stage's
// changelog, the input's window coder and allowed lateness (for state
// garbage collection), and the ParDo's timer families. The stores live
// under storeDir (the instance slot's).
func newStatefulHead(comps *pipepb.Components, pl *plan.Plan, s *plan.Stage, fs *fnapi.Stage, storeDir, bootstrap string, props map[string]string, log *slog.Logger) (*userstate.Head, error) {
	col, ok := comps.GetPcollections()[s.HeadOutput]
	if !ok {
		return nil, fmt.Errorf("stateful ParDo %q: input pcollection %s not found", s.HeadUniqueName, s.HeadOutput)
	}
	ws := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
	wc := comps.GetCoders()[ws.GetWindowCoderId()]
	stores, err := state.Open(state.Options{
		Dir:              storeDir,
		Name:             pl.ApplicationID + "-" + s.Name,
		Topic:            state.ChangelogTopic(pl.ApplicationID, s.Name),
		BootstrapServers: bootstrap,
		Properties:       props,
		Logger:           log,
	})
	if err != nil {
		return nil, err
	}
	h, err := userstate.NewHead(userstate.Config{
		Stage:           s.Name,
		Transform:       s.HeadTransform,
		Partitions:      s.Partitions,
		Stores:          stores,
		WindowCoderURN:  wc.GetSpec().GetUrn(),
		AllowedLateness: mtime.Time(ws.GetAllowedLateness()),
		Timers:          fs.Timers,
		Logger:          log,
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
func newSplittableHead(pl *plan.Plan, s *plan.Stage, storeDir, bootstrap string, props map[string]string, log *slog.Logger) (*splittable.Head, error) {
	stores, err := state.Open(state.Options{
		Dir:              storeDir,
		Name:             pl.ApplicationID + "-" + s.Name,
		Topic:            state.ChangelogTopic(pl.ApplicationID, s.Name),
		BootstrapServers: bootstrap,
		Properties:       props,
		Logger:           log,
	})
	if err != nil {
		return nil, err
	}
	h, err := splittable.NewHead(splittable.Config{Stage: s.Name, Stores: stores, Logger: log})
	if err != nil {
		stores.Close()
		return nil, err
	}
	log.Info("kafkastreams: splittable DoFn stage", "stage", s.Name, "transform", s.HeadUniqueName)
	return h, nil
}

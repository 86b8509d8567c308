package runner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// gbkAllowMerging says whether session (merging) windows are executed.
const gbkAllowMerging = true

// gbkSpec is what a GroupByKey stage's head needs from the pipeline.
type gbkSpec struct {
	strategy gbk.Strategy
	codec    *gbk.Codec
}

// The GroupByKey kind (plan.HeadGroupByKey): a runner-side GroupByKey
// (stage/gbk) over a keyed input topic, its panes in task stores with a
// changelog, firing at most Options.GBKFireBudget values per transaction.
func init() { registerKind(plan.HeadGroupByKey, gbkKind{}) }

var _ eventTimeWaiter = gbkKind{}

// waitsOnEventTime implements eventTimeWaiter: a GroupByKey in windows
// other than the global one, or with allowed lateness, fires on the
// watermark.
func (gbkKind) waitsOnEventTime(comps *pipepb.Components, s *plan.Stage) string {
	for _, pc := range comps.GetTransforms()[s.HeadTransform].GetInputs() {
		ws := comps.GetWindowingStrategies()[comps.GetPcollections()[pc].GetWindowingStrategyId()]
		if ws.GetWindowFn().GetUrn() != "beam:window_fn:global_windows:v1" {
			return "the windowed GroupByKey"
		}
		if ws.GetAllowedLateness() > 0 {
			return "the GroupByKey with allowed lateness"
		}
	}
	return ""
}

// gbkKind is plan.HeadGroupByKey's kind.
type gbkKind struct{}

// What the page and the metrics topic read of a GroupByKey head (kinds.go).
var (
	_ gbkCounters  = (*gbk.Head)(nil)
	_ windowCounts = (*gbk.Head)(nil)
	_ attemptDrops = (*gbk.Head)(nil)
)

// check reads the GroupByKey's windowing strategy and wire coders.
// Unsupported windowing (wrapping gbk.ErrUnsupported, naming the
// transform and the feature) and coders the runner cannot cut into key
// and value are refused here, before any topic is created.
func (gbkKind) check(e *checkEnv, s *plan.Stage) (stageHead, error) {
	comps := e.comps
	t := comps.GetTransforms()[s.HeadTransform]
	if len(t.GetInputs()) != 1 {
		return nil, fmt.Errorf("kafkastreams: GroupByKey %q has %d inputs, want 1", s.HeadUniqueName, len(t.GetInputs()))
	}
	var in string
	for _, pc := range t.GetInputs() {
		in = pc
	}
	ws := comps.GetWindowingStrategies()[comps.GetPcollections()[in].GetWindowingStrategyId()]
	strat, err := gbk.ParseStrategy(fmt.Sprintf("%q (id %s)", s.HeadUniqueName, s.HeadTransform), ws, gbkAllowMerging)
	if err != nil {
		return nil, err
	}
	codec, err := gbk.NewCodec(comps, in, s.HeadOutput)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: GroupByKey %q: %w", s.HeadUniqueName, err)
	}
	return &gbkStage{s: s, spec: &gbkSpec{strategy: strat, codec: codec}}, nil
}

// gbkStage is a checked GroupByKey stage.
type gbkStage struct {
	s    *plan.Stage
	spec *gbkSpec
}

func (*gbkStage) needs() stageNeeds { return stageNeeds{changelog: true} }

// build opens the stage's stores, registers the accumulator merger's
// descriptor when there is one (accumulatorMerger) and the stage's
// kafkastreams_late_elements_dropped_total.
func (g *gbkStage) build(ctx context.Context, e *buildEnv) (builtHead, error) {
	s := g.s
	merger, err := accumulatorMerger(ctx, e.srv, e.comps, s, g.spec, e.o.MergeAccumulators)
	if err != nil {
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
	}
	h, err := openStores(e, s, func(stores *state.Manager) (*gbk.Head, error) {
		return newGBKHead(g.spec, s, stores, e.log, merger, e.o.GBKFireBudget)
	})
	if err != nil {
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
	}
	e.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "kafkastreams_late_elements_dropped_total",
		Help:        "Elements behind the watermark by more than the allowed lateness, dropped by the stage's GroupByKey (Beam: droppedDueToLateness).",
		ConstLabels: prometheus.Labels{"stage": s.Name},
	}, func() float64 { return float64(h.Dropped()) }))
	return builtHead{head: h, counters: h, close: h.Close}, nil
}

// newGBKHead builds the head of GroupByKey stage s over its task stores
// (openStores), firing at most budget values per transaction
// (Options.GBKFireBudget: 0 or negative, no bound).
func newGBKHead(spec *gbkSpec, s *plan.Stage, stores *state.Manager, log *slog.Logger, compact func([]gbk.Pane) ([][]byte, error), budget int) (*gbk.Head, error) {
	log.Info("kafkastreams: GroupByKey stage", "stage", s.Name, "transform", s.HeadUniqueName, "windowing", spec.strategy.String(), "merges_accumulators", compact != nil)
	if budget <= 0 {
		budget = -1 // HeadConfig: negative is no bound
	}
	return gbk.NewHead(gbk.HeadConfig{Stage: s.Name, Strategy: spec.strategy, Codec: spec.codec, Stores: stores, Logger: log, FireBudget: budget, Compact: compact})
}

// accumulatorMerger returns gbk.HeadConfig.Compact for GroupByKey stage s: a
// lifted combine's (its first fused transform is the combine's
// MergeAccumulators), under the default trigger, in discarding mode, with
// merge (Options.MergeAccumulators), over any window fn (sessions: one
// accumulator per session instead of one per element; fixed, sliding
// and global windows: one per key and window instead of one per
// precombined bundle, so a window's firing reads, fires and deletes one
// value per key).
// Otherwise nil. It
// registers with srv a descriptor of the MergeAccumulators transform
// alone (input: the GroupByKey's output, KV(K, Iterable(Acc)); output:
// KV(K, Acc), which must decode as the GroupByKey's input does); Compact
// runs the windows it is given through it as one bundle and returns each
// merged accumulator, checking that the bundle gave one output per window,
// in order, with the window's key.
func accumulatorMerger(ctx context.Context, srv *fnapi.Server, comps *pipepb.Components, s *plan.Stage, spec *gbkSpec, merge bool) (func([]gbk.Pane) ([][]byte, error), error) {
	st := spec.strategy
	if !merge || st.Trigger != nil || st.Accumulating || len(s.URNs) == 0 || s.URNs[0] != plan.URNCombinePerKeyMerge {
		return nil, nil
	}
	mergeID := s.Transforms[0]
	var out string
	for _, pc := range comps.GetTransforms()[mergeID].GetOutputs() {
		out = pc
	}
	if err := spec.codec.CheckDecodes(comps, out); err != nil {
		return nil, fmt.Errorf("merging accumulators: %w", err)
	}
	fs, err := fnapi.BuildStage(comps, fnapi.StageSpec{ID: s.Name + "/merge-accumulators", Transforms: []string{mergeID}, Input: s.HeadOutput, Outputs: []string{out}}, srv.Endpoint())
	if err != nil {
		return nil, fmt.Errorf("merging accumulators: %w", err)
	}
	if err := srv.RegisterStage(ctx, fs.Descriptor); err != nil {
		return nil, fmt.Errorf("merging accumulators: %w", err)
	}
	id, source, sink := fs.Descriptor.GetId(), fs.Source, fs.Sinks[out]
	return func(panes []gbk.Pane) ([][]byte, error) {
		elems := make([][]byte, len(panes))
		for i, pn := range panes {
			pn.Timestamp = pn.Window.MaxTimestamp()
			e, err := spec.codec.Encode(pn)
			if err != nil {
				return nil, err
			}
			elems[i] = e
		}
		bctx, cancel := context.WithTimeout(ctx, mergeBundleTimeout)
		defer cancel()
		res, err := srv.ProcessBundle(bctx, id, map[string][][]byte{source: elems})
		if err != nil {
			return nil, err
		}
		outs := res.Outputs[sink]
		if len(outs) != len(panes) {
			return nil, fmt.Errorf("MergeAccumulators gave %d outputs for %d windows", len(outs), len(panes))
		}
		merged := make([][]byte, len(outs))
		for i, o := range outs {
			d, err := spec.codec.Decode(o)
			if err != nil {
				return nil, fmt.Errorf("MergeAccumulators output %d: %w", i, err)
			}
			if !bytes.Equal(d.Key, panes[i].Key) {
				return nil, fmt.Errorf("MergeAccumulators output %d has key %x, its window's key is %x", i, d.Key, panes[i].Key)
			}
			merged[i] = d.Value
		}
		return merged, nil
	}, nil
}

// mergeBundleTimeout bounds one bundle of accumulatorMerger's.
const mergeBundleTimeout = 2 * time.Minute

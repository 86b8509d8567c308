package runner

import (
	"time"

	"fmt"
	"slices"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// LoopSpec is what stage s's Loop needs of the plan: its topics, its
// upstreams, and for each output topic its partitions and whether it is
// keyed (a GroupByKey's or stateful ParDo's input, plan.HeadKind.Keyed).
// A source stage (plan.HeadKind.Source) reads raw records.
func LoopSpec(pl *plan.Plan, s *plan.Stage) (step.Spec, error) {
	return loopSpec(pl, s, builtHead{})
}

// loopSpec is LoopSpec with what stage s's kind built (b): the input
// topic's partition count when the plan does not know it, and whether the
// input grows.
func loopSpec(pl *plan.Plan, s *plan.Stage, b builtHead) (step.Spec, error) {
	partitions := s.Partitions
	if b.partitions != 0 {
		partitions = b.partitions
	}
	topics := pl.Topics()
	sp := step.Spec{
		ApplicationID: pl.ApplicationID,
		Name:          s.Name,
		InputTopic:    s.InputTopic,
		Partitions:    partitions,
		GrowingInput:  b.growing,
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

// keyOf returns stage.Config.KeyOf for stage s: for every output
// PCollection written to a GroupByKey stage's topic, the function cutting
// the key bytes out of its wire elements.
func keyOf(comps *pipepb.Components, pl *plan.Plan, s *plan.Stage) (map[string]func([]byte) ([]byte, error), error) {
	out := map[string]func([]byte) ([]byte, error){}
	for _, o := range s.Outputs {
		for _, t := range o.Topics {
			if c := pl.Consumer(t); c == nil || !c.Head.Keyed() {
				continue
			}
			w, err := fnapi.NewKVWire(comps, o.PCollection, false)
			if err != nil {
				return nil, fmt.Errorf("kafkastreams: stage %s output %s to keyed topic %s: %w", s.Name, o.PCollection, t, err)
			}
			out[o.PCollection] = w.KeyOf
		}
	}
	return out, nil
}

// stageLoopSpec is stage s's whole step.Spec: LoopSpec with what its
// kind built (b), the interval-window outputs (markIntervalWindows) and
// its Kafka sinks (sinkSpecs, with the users' topics' partition counts
// and timestamp limits).
func stageLoopSpec(comps *pipepb.Components, pl *plan.Plan, s *plan.Stage, b builtHead, users map[string]int32, afterMax map[string]time.Duration) (step.Spec, error) {
	spec, err := loopSpec(pl, s, b)
	if err != nil {
		return step.Spec{}, err
	}
	markIntervalWindows(comps, &spec)
	if spec.Sinks, err = sinkSpecs(comps, s, users, afterMax); err != nil {
		return step.Spec{}, err
	}
	if !spec.RawInput {
		if spec.CheckElement, err = inputCheck(comps, pl, s); err != nil {
			return step.Spec{}, err
		}
	}
	return spec, nil
}

// inputCheck returns step.Spec.CheckElement of stage s, which reads an
// internal topic: an element must be exactly one wire element of a
// PCollection some upstream stage writes to s's input topic (one, or
// several of a Flatten's). nil when no upstream writes one, or one of
// them has a wire coding fnapi cannot walk (a window coder other than
// the global and interval ones): such a stage runs unchecked, as before,
// its elements decoded by the SDK harness alone.
func inputCheck(comps *pipepb.Components, pl *plan.Plan, s *plan.Stage) (func([]byte) error, error) {
	var wires []*fnapi.WireElements
	seen := map[string]bool{}
	for _, up := range pl.Stages {
		for _, o := range up.Outputs {
			if seen[o.PCollection] || !slices.Contains(o.Topics, s.InputTopic) {
				continue
			}
			seen[o.PCollection] = true
			w, err := fnapi.NewWireElements(comps, o.PCollection, false)
			if err != nil {
				return nil, nil
			}
			wires = append(wires, w)
		}
	}
	switch len(wires) {
	case 0:
		return nil, nil
	case 1:
		return wires[0].Check, nil
	}
	return func(e []byte) error {
		var first error
		for _, w := range wires {
			err := w.Check(e)
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
		return first
	}, nil
}

// nextWindowEnd is stage.Config.NextWindowEnd for a stage writing sp's
// outputs: the least end after wm of a window of an output that goes to
// a keyed topic (a GroupByKey's or a stateful ParDo's input), over the
// outputs whose window ends can be told ahead (gbk.WindowEnds: fixed and
// sliding windows); nil if there is none.
func nextWindowEnd(comps *pipepb.Components, sp step.Spec) func(mtime.Time) (mtime.Time, bool) {
	var ends []func(mtime.Time) (mtime.Time, bool)
	for _, o := range sp.Outputs {
		if !slices.ContainsFunc(o.Topics, func(t step.OutputTopic) bool { return t.Keyed }) {
			continue
		}
		pc := comps.GetPcollections()[o.PCollection]
		if next, ok := gbk.WindowEnds(comps.GetWindowingStrategies()[pc.GetWindowingStrategyId()]); ok {
			ends = append(ends, next)
		}
	}
	if len(ends) == 0 {
		return nil
	}
	return func(wm mtime.Time) (due mtime.Time, ok bool) {
		for _, next := range ends {
			if e, eok := next(wm); eok && (!ok || e < due) {
				due, ok = e, true
			}
		}
		return due, ok
	}
}

package fnapi

import (
	"fmt"
	"maps"
	"slices"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// URNs of the steps a splittable ParDo is expanded into
// (beam_runner_api.proto, StandardPTransforms.SplittableParDoComponents).
const (
	urnPairWithRestriction                 = "beam:transform:sdf_pair_with_restriction:v1"
	urnSplitAndSizeRestrictions            = "beam:transform:sdf_split_and_size_restrictions:v1"
	urnProcessSizedElementsAndRestrictions = "beam:transform:sdf_process_sized_element_and_restrictions:v1"
)

// Splittable DoFns (SDFs) in a fused stage.
//
// A ParDo whose payload names a restriction coder is splittable. BuildStage
// replaces it with its three component steps, all in the same descriptor:
//
//	in: E ──pair──▶ KV<E, R> ──split&size──▶ KV<KV<E, R>, double> ──process──▶ the ParDo's outputs
//
// where E is the main input's element coder (as the descriptor has it, so
// wire-safe when the main input is the stage input), R the payload's
// restriction coder (the Go SDK's KV<restriction, watermark estimator state
// or bool>) and double the size. The process step keeps the ParDo's transform
// id, inputs (main input rewired) and outputs, so that metrics keep naming the
// user's transform; pair and split get fresh ids. Side inputs stay on all
// three steps, as the SDK expects.
//
// Each restriction the SDF's SplitRestriction returns is processed whole in
// the bundle of its element: the runner never asks for dynamic splits.
//
// Self-checkpointing happens elsewhere: the Go harness checkpoints (returns
// residual roots) only for a process step read directly by a data source
// (exec.DataSource.getProcessContinuation); fused behind pair and split, a
// returned sdf.ProcessContinuation would be dropped with the rest of the
// restriction. The Go SDK marks the outputs of an SDF whose ProcessElement
// returns a ProcessContinuation unbounded, and the planner splits every SDF
// with an unbounded output into its three steps before it fuses
// (runner/plan's splitUnboundedSDFs, plan.HeadSplittable): the process step
// then heads its stage, fed by the data source, and arrives here already
// expanded. So checkSplittable refuses an unexpanded SDF with an unbounded
// input or output: the planner should have split it.

// checkSplittable returns an error if the splittable ParDo tid cannot be run
// whole in a fused stage: an input or output PCollection that is unbounded
// (the DoFn may self-checkpoint, see above), or a restriction coder that is
// not in comps.
func checkSplittable(comps *pipepb.Components, tid string, t *pipepb.PTransform, pardo *pipepb.ParDoPayload) error {
	if _, ok := comps.GetCoders()[pardo.GetRestrictionCoderId()]; !ok {
		return fmt.Errorf("transform %q (%s) is a splittable DoFn whose restriction coder %q is not in the pipeline", tid, t.GetUniqueName(), pardo.GetRestrictionCoderId())
	}
	for _, m := range []map[string]string{t.GetInputs(), t.GetOutputs()} {
		for _, local := range slices.Sorted(maps.Keys(m)) {
			pid := m[local]
			if comps.GetPcollections()[pid].GetIsBounded() == pipepb.IsBounded_UNBOUNDED {
				return fmt.Errorf("transform %q (%s) is a splittable DoFn with unbounded pcollection %q (%s): self-checkpointing and unbounded splittable DoFns are not supported yet", tid, t.GetUniqueName(), pid, local)
			}
		}
	}
	return nil
}

// sdfBuild is what expandSplittable needs of the descriptor being built.
type sdfBuild struct {
	cs         *coderSet
	pcols      map[string]*pipepb.PCollection // the descriptor's PCollections; added to
	transforms map[string]*pipepb.PTransform  // the descriptor's transforms; rewritten
	// freshTransform and freshPCollection return ids starting with want that
	// name nothing in the pipeline nor in the descriptor.
	freshTransform   func(want string) string
	freshPCollection func(want string) string
}

// expandSplittables replaces every splittable ParDo among b.transforms by its
// three steps (see above), in transform id order so that ids are
// deterministic.
func (b *sdfBuild) expandSplittables() error {
	ids := slices.Sorted(maps.Keys(b.transforms))
	for _, tid := range ids {
		t := b.transforms[tid]
		if t.GetSpec().GetUrn() != urnParDo {
			continue
		}
		pardo := &pipepb.ParDoPayload{}
		if err := proto.Unmarshal(t.GetSpec().GetPayload(), pardo); err != nil {
			return fmt.Errorf("transform %q: bad ParDoPayload: %v", tid, err)
		}
		if pardo.GetRestrictionCoderId() == "" {
			continue
		}
		if err := b.expand(tid, t, pardo); err != nil {
			return fmt.Errorf("transform %q (%s): %w", tid, t.GetUniqueName(), err)
		}
	}
	return nil
}

func (b *sdfBuild) expand(tid string, t *pipepb.PTransform, pardo *pipepb.ParDoPayload) error {
	mainLocal := ""
	for _, local := range slices.Sorted(maps.Keys(t.GetInputs())) {
		if _, side := pardo.GetSideInputs()[local]; side {
			continue
		}
		if mainLocal != "" {
			return fmt.Errorf("splittable DoFn with two main inputs (%q, %q)", mainLocal, local)
		}
		mainLocal = local
	}
	if mainLocal == "" {
		return fmt.Errorf("splittable DoFn without a main input")
	}
	in := b.pcols[t.GetInputs()[mainLocal]]

	sizeID := b.cs.freshID(tid + "_sdf_size")
	b.cs.added[sizeID] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderDouble}}
	pairedCoder := b.cs.freshID(tid + "_sdf_kv_elem_rest")
	b.cs.added[pairedCoder] = &pipepb.Coder{
		Spec:              &pipepb.FunctionSpec{Urn: urnCoderKV},
		ComponentCoderIds: []string{in.GetCoderId(), pardo.GetRestrictionCoderId()},
	}
	sizedCoder := b.cs.freshID(tid + "_sdf_kv_elem_rest_size")
	b.cs.added[sizedCoder] = &pipepb.Coder{
		Spec:              &pipepb.FunctionSpec{Urn: urnCoderKV},
		ComponentCoderIds: []string{pairedCoder, sizeID},
	}

	pcol := func(want, coderID string) string {
		id := b.freshPCollection(want)
		b.pcols[id] = &pipepb.PCollection{
			UniqueName:          id,
			CoderId:             coderID,
			IsBounded:           in.GetIsBounded(),
			WindowingStrategyId: in.GetWindowingStrategyId(),
		}
		return id
	}
	paired := pcol(tid+"_sdf_paired", pairedCoder)
	sized := pcol(tid+"_sdf_sized", sizedCoder)

	step := func(suffix, urn, from string, outputs map[string]string) *pipepb.PTransform {
		inputs := maps.Clone(t.GetInputs())
		inputs[mainLocal] = from
		return &pipepb.PTransform{
			UniqueName:    t.GetUniqueName() + suffix,
			Spec:          &pipepb.FunctionSpec{Urn: urn, Payload: t.GetSpec().GetPayload()},
			Inputs:        inputs,
			Outputs:       outputs,
			EnvironmentId: t.GetEnvironmentId(),
		}
	}
	pair := step("/PairWithRestriction", urnPairWithRestriction, t.GetInputs()[mainLocal], map[string]string{"i0": paired})
	split := step("/SplitAndSizeRestrictions", urnSplitAndSizeRestrictions, paired, map[string]string{"i0": sized})
	process := step("", urnProcessSizedElementsAndRestrictions, sized, maps.Clone(t.GetOutputs()))
	b.transforms[b.freshTransform(tid+"_sdf_pair")] = pair
	b.transforms[b.freshTransform(tid+"_sdf_split")] = split
	b.transforms[tid] = process
	return nil
}

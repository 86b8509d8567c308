package plan

import (
	"fmt"
	"maps"
	"slices"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// URNs of the steps a splittable ParDo expands into
// (beam_runner_api.proto, StandardPTransforms.SplittableParDoComponents).
const (
	URNSDFPairWithRestriction  = "beam:transform:sdf_pair_with_restriction:v1"
	URNSDFSplitAndSize         = "beam:transform:sdf_split_and_size_restrictions:v1"
	URNSDFProcessSizedElements = "beam:transform:sdf_process_sized_element_and_restrictions:v1"

	urnCoderDouble = "beam:coder:double:v1"
)

// splitUnboundedSDFs rewrites, in p, every splittable ParDo that may
// checkpoint into its three steps (pair with restriction, split and size,
// process sized elements and restrictions), so that Build can put a stage
// boundary before the process step (HeadSplittable):
//
//	E ──pair──▶ KV<E, R> ──split&size──▶ KV<KV<E, R>, double> ║ process ──▶ outputs
//
// The pair and split steps fuse into the stage of E's producer; the sized
// restrictions cross a topic; the process step is the first transform of
// its stage, fed by the stage's data source, which is the only place the Go
// harness checkpoints a splittable DoFn (exec.DataSource hands a
// ProcessContinuation back as a residual root only for a process step it
// feeds directly). The residuals come back in the data source's coder, so
// the stage's head can keep them (stage/splittable) and send them to the
// same data source later.
//
// A splittable ParDo may checkpoint when any of its outputs is unbounded:
// the Go SDK marks the outputs of a DoFn whose ProcessElement returns an
// sdf.ProcessContinuation unbounded (and those of any DoFn with an
// unbounded input). Bounded ones stay ParDos, fused whole (stage/fnapi).
//
// The process step keeps the ParDo's id, name and outputs; the pair and
// split steps and the two PCollections between them get fresh ids, and are
// listed in the ParDo's parent's subtransforms. p means the same pipeline
// after; a second call finds nothing to rewrite. A splittable ParDo with side
// inputs is refused (ErrUnsupported).
func splitUnboundedSDFs(p *pipepb.Pipeline) error {
	comps := p.GetComponents()
	parent := map[string]string{} // transform -> its composite ("" for a root)
	for id, t := range comps.GetTransforms() {
		for _, sub := range t.GetSubtransforms() {
			parent[sub] = id
		}
	}
	for _, id := range slices.Sorted(maps.Keys(comps.GetTransforms())) {
		t := comps.GetTransforms()[id]
		if t.GetSpec().GetUrn() != URNParDo || len(t.GetSubtransforms()) > 0 || NativeDoFn(t) != nil {
			continue // a native source (runner/kafkaio's unbounded Read) is the runner's own
		}
		pd := &pipepb.ParDoPayload{}
		if err := unmarshal(t.GetSpec().GetPayload(), pd); err != nil || pd.GetRestrictionCoderId() == "" {
			continue
		}
		unbounded := false
		for _, pc := range t.GetOutputs() {
			unbounded = unbounded || comps.GetPcollections()[pc].GetIsBounded() == pipepb.IsBounded_UNBOUNDED
		}
		if !unbounded {
			continue
		}
		name := fmt.Sprintf("transform %q (id %s)", t.GetUniqueName(), id)
		if len(pd.GetSideInputs()) > 0 {
			return fmt.Errorf("%w: %s: an unbounded splittable DoFn with side inputs is not implemented yet", ErrUnsupported, name)
		}
		if len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0 {
			return fmt.Errorf("%w: %s: a splittable DoFn with state or timers", ErrUnsupported, name)
		}
		ins := mainInputs(t)
		if len(ins) != 1 {
			return fmt.Errorf("%w: %s: a splittable DoFn with %d main inputs, want 1", ErrMalformed, name, len(ins))
		}
		var mainLocal string
		for local, pc := range t.GetInputs() {
			if pc == ins[0] {
				mainLocal = local
			}
		}
		in := comps.GetPcollections()[ins[0]]
		if _, ok := comps.GetCoders()[pd.GetRestrictionCoderId()]; !ok {
			return fmt.Errorf("%w: %s: restriction coder %q is not in the pipeline", ErrMalformed, name, pd.GetRestrictionCoderId())
		}
		fresh := func(m map[string]bool, want string) string {
			for i := 0; ; i++ {
				id := want
				if i > 0 {
					id = fmt.Sprintf("%s%d", want, i)
				}
				if !m[id] {
					return id
				}
			}
		}
		taken := func(ks ...[]string) map[string]bool {
			m := map[string]bool{}
			for _, k := range ks {
				for _, s := range k {
					m[s] = true
				}
			}
			return m
		}
		coder := func(want string, c *pipepb.Coder) string {
			cid := fresh(taken(slices.Sorted(maps.Keys(comps.GetCoders()))), want)
			comps.Coders[cid] = c
			return cid
		}
		sizeCoder := coder(id+"_sdf_size", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderDouble}})
		pairedCoder := coder(id+"_sdf_kv_elem_rest", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{in.GetCoderId(), pd.GetRestrictionCoderId()}})
		sizedCoder := coder(id+"_sdf_kv_elem_rest_size", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{pairedCoder, sizeCoder}})
		pcol := func(want, coderID string) string {
			pid := fresh(taken(slices.Sorted(maps.Keys(comps.GetPcollections()))), want)
			comps.Pcollections[pid] = &pipepb.PCollection{
				UniqueName:          t.GetUniqueName() + "/" + want,
				CoderId:             coderID,
				IsBounded:           in.GetIsBounded(),
				WindowingStrategyId: in.GetWindowingStrategyId(),
			}
			return pid
		}
		paired := pcol(id+"_sdf_paired", pairedCoder)
		sized := pcol(id+"_sdf_sized", sizedCoder)
		step := func(suffix, urn, from, out string) *pipepb.PTransform {
			return &pipepb.PTransform{
				UniqueName:    t.GetUniqueName() + suffix,
				Spec:          &pipepb.FunctionSpec{Urn: urn, Payload: t.GetSpec().GetPayload()},
				Inputs:        map[string]string{mainLocal: from},
				Outputs:       map[string]string{"i0": out},
				EnvironmentId: t.GetEnvironmentId(),
			}
		}
		pairID := fresh(taken(slices.Sorted(maps.Keys(comps.GetTransforms()))), id+"_sdf_pair")
		comps.Transforms[pairID] = step("/PairWithRestriction", URNSDFPairWithRestriction, ins[0], paired)
		splitID := fresh(taken(slices.Sorted(maps.Keys(comps.GetTransforms()))), id+"_sdf_split")
		comps.Transforms[splitID] = step("/SplitAndSizeRestrictions", URNSDFSplitAndSize, paired, sized)
		process := proto.Clone(t).(*pipepb.PTransform)
		process.Spec.Urn = URNSDFProcessSizedElements
		process.Inputs = maps.Clone(t.GetInputs())
		process.Inputs[mainLocal] = sized
		comps.Transforms[id] = process
		if par, ok := parent[id]; ok {
			pt := comps.GetTransforms()[par]
			subs := make([]string, 0, len(pt.GetSubtransforms())+2)
			for _, sub := range pt.GetSubtransforms() {
				if sub == id {
					subs = append(subs, pairID, splitID)
				}
				subs = append(subs, sub)
			}
			pt.Subtransforms = subs
		} else {
			roots := make([]string, 0, len(p.GetRootTransformIds())+2)
			for _, r := range p.GetRootTransformIds() {
				if r == id {
					roots = append(roots, pairID, splitID)
				}
				roots = append(roots, r)
			}
			p.RootTransformIds = roots
		}
	}
	return nil
}

// isSplittableProcess says whether t is the process step of a splittable
// ParDo split by splitUnboundedSDFs: the head of a HeadSplittable stage.
func isSplittableProcess(t *pipepb.PTransform) bool {
	return t.GetSpec().GetUrn() == URNSDFProcessSizedElements
}

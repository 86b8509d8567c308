package plan

import (
	"fmt"
	"maps"
	"slices"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// URNs of the lifted combine's parts (beam_runner_api.proto,
// StandardPTransforms.CombineComponents). Their payload is the composite's
// CombinePayload; the Go SDK harness executes them (exec.LiftedCombine,
// exec.MergeAccumulators, exec.ExtractOutput).
const (
	URNCombinePerKeyPrecombine = "beam:transform:combine_per_key_precombine:v1"
	URNCombinePerKeyMerge      = "beam:transform:combine_per_key_merge_accumulators:v1"
	URNCombinePerKeyExtract    = "beam:transform:combine_per_key_extract_outputs:v1"

	urnCoderKV       = "beam:coder:kv:v1"
	urnCoderIterable = "beam:coder:iterable:v1"
)

// Combiner lifting (beam_runner_api.proto, CombinePayload and
// CombineComponents; the Beam programming guide, "Combiner lifting": a
// partial combine before the shuffle, so the shuffle carries one
// accumulator per key, window and bundle instead of every value).
//
// The SDK writes a CombinePerKey as a composite whose expansion is the
// unlifted form, which the planner runs as it is when it does not lift:
//
//	INPUT KV<K, I> -> GroupByKey -> KV<K, Iterable<I>> -> Combine ParDo -> OUTPUT KV<K, O>
//
// Lifted, the composite's subtransforms become
//
//	INPUT   KV<K, I>
//	  -> Precombine         -> LIFTED  KV<K, A>            fused after INPUT's producer
//	  -> GroupByKey         -> GROUPED KV<K, Iterable<A>>  the head of a GroupByKey stage
//	  -> MergeAccumulators  -> MERGED  KV<K, A>            fused after the head
//	  -> ExtractOutputs     -> OUTPUT  KV<K, O>            fused after the head
//
// with A the accumulator coder of the CombinePayload. LIFTED takes INPUT's
// windowing strategy and boundedness (the precombine keeps windows: it
// combines per key and window), GROUPED and MERGED take OUTPUT's (they are
// after the GroupByKey, as the unlifted GroupByKey's output was). The
// expansion's old transforms, and the PCollections only they used, are
// removed from the components. CombineGlobally is the same composite over
// a fixed key in the Go SDK (beam.TryCombine: AddFixedKey, CombinePerKey,
// DropKey), so it lifts the same way.
//
// Every added id is derived from the composite's id tid and every added
// unique name from its unique name X, so every instance adds the same:
//
//	transforms    tid_lift_precombine  "X/Precombine"
//	              tid_lift_gbk         "X/GroupByKey"
//	              tid_lift_merge       "X/MergeAccumulators"
//	              tid_lift_extract     "X/ExtractOutputs"
//	PCollections  tid_lift_lifted, tid_lift_grouped, tid_lift_merged
//	coders        tid_lift_iter_acc = Iterable(A), tid_lift_kv_acc = KV(K, A),
//	              tid_lift_kv_iter_acc = KV(K, Iterable(A))
//
// A composite one of whose ids or names is already taken by the pipeline
// is not lifted (see liftable): ids never collide.
type liftedIDs struct {
	precombine, gbk, merge, extract string
	lifted, grouped, merged         string
	iterAcc, kvAcc, kvIterAcc       string
}

func liftedIDsOf(tid string) liftedIDs {
	p := tid + "_lift_"
	return liftedIDs{
		precombine: p + "precombine", gbk: p + "gbk", merge: p + "merge", extract: p + "extract",
		lifted: p + "lifted", grouped: p + "grouped", merged: p + "merged",
		iterAcc: p + "iter_acc", kvAcc: p + "kv_acc", kvIterAcc: p + "kv_iter_acc",
	}
}

func (ids liftedIDs) transforms() []string {
	return []string{ids.precombine, ids.gbk, ids.merge, ids.extract}
}

// Unique-name suffixes of the lifted transforms, in liftedIDs.transforms order.
var liftedNames = []string{"Precombine", "GroupByKey", "MergeAccumulators", "ExtractOutputs"}

// liftCombines lifts every liftable combine_per_key composite of p in place
// (see liftedIDs for the shapes), in the order of their ids, and returns the
// ids of the lifted composites, sorted, including composites an earlier
// call already lifted: it is idempotent. A composite that is not liftable
// keeps its unlifted expansion.
func liftCombines(p *pipepb.Pipeline) []string {
	comps := p.GetComponents()
	var out []string
	for _, tid := range slices.Sorted(maps.Keys(comps.GetTransforms())) {
		t := comps.GetTransforms()[tid]
		if t.GetSpec().GetUrn() != URNCombinePerKey {
			continue
		}
		ids := liftedIDsOf(tid)
		if slices.Equal(t.GetSubtransforms(), ids.transforms()) {
			out = append(out, tid) // lifted by an earlier call
			continue
		}
		if ok, _ := liftable(tid, t, comps); !ok {
			continue
		}
		lift(tid, t, comps)
		out = append(out, tid)
	}
	return out
}

// liftable says whether combine_per_key composite tid may be lifted, and if
// not, why. It may when all of these hold:
//
//   - the input windowing's trigger may fire on accumulators
//     (liftableTrigger): a trigger that counts elements would count
//     accumulators instead;
//   - its output time is the end of the window (the Go SDK's only choice,
//     graphx): the SDK's precombine stamps an accumulator with the
//     timestamp of the last value it added (exec.LiftedCombine), so an
//     earliest- or latest-in-pane GroupByKey would see other timestamps
//     than the values';
//   - the spec is a well-formed CombinePayload whose accumulator coder
//     exists, the input's coder is a KV, there is one input and one
//     output, and the composite (or its expansion) names the SDK
//     environment that runs the parts;
//   - no id or unique name the lift adds is taken.
//
// Merging (session) windows lift, as in Prism (handlecombine.go) and the
// Python portable runner (translations.lift_combiners): the precombine
// accumulates per unmerged window, the GroupByKey merges the windows, and
// MergeAccumulators merges the accumulators of a merged window.
func liftable(tid string, t *pipepb.PTransform, comps *pipepb.Components) (bool, string) {
	if len(t.GetInputs()) != 1 || len(t.GetOutputs()) != 1 {
		return false, fmt.Sprintf("%d inputs and %d outputs, want 1 and 1", len(t.GetInputs()), len(t.GetOutputs()))
	}
	in := comps.GetPcollections()[sortedValues(t.GetInputs())[0]]
	out := comps.GetPcollections()[sortedValues(t.GetOutputs())[0]]
	if in == nil || out == nil {
		return false, "input or output PCollection not found"
	}
	ws := comps.GetWindowingStrategies()[in.GetWindowingStrategyId()]
	if ws == nil {
		return false, "input windowing strategy not found"
	}
	if !liftableTrigger(ws.GetTrigger()) {
		return false, fmt.Sprintf("trigger %v may fire on element counts", ws.GetTrigger())
	}
	if ot := ws.GetOutputTime(); ot != pipepb.OutputTime_END_OF_WINDOW && ot != pipepb.OutputTime_UNSPECIFIED {
		return false, fmt.Sprintf("output time %v (the precombine keeps the latest timestamp)", ot)
	}
	cp := &pipepb.CombinePayload{}
	if err := unmarshal(t.GetSpec().GetPayload(), cp); err != nil {
		return false, fmt.Sprintf("CombinePayload: %v", err)
	}
	if cp.GetCombineFn() == nil {
		return false, "CombinePayload without a combine fn"
	}
	if _, ok := comps.GetCoders()[cp.GetAccumulatorCoderId()]; !ok {
		return false, fmt.Sprintf("accumulator coder %q not found", cp.GetAccumulatorCoderId())
	}
	kv := comps.GetCoders()[in.GetCoderId()]
	if kv.GetSpec().GetUrn() != urnCoderKV || len(kv.GetComponentCoderIds()) != 2 {
		return false, fmt.Sprintf("input coder %q is not a KV", in.GetCoderId())
	}
	if liftEnvironment(t, comps) == "" {
		return false, "no SDK environment on the composite or its expansion"
	}
	ids := liftedIDsOf(tid)
	for _, id := range ids.transforms() {
		if _, taken := comps.GetTransforms()[id]; taken {
			return false, fmt.Sprintf("transform id %q is taken", id)
		}
	}
	for _, id := range []string{ids.lifted, ids.grouped, ids.merged} {
		if _, taken := comps.GetPcollections()[id]; taken {
			return false, fmt.Sprintf("PCollection id %q is taken", id)
		}
	}
	for _, id := range []string{ids.iterAcc, ids.kvAcc, ids.kvIterAcc} {
		if _, taken := comps.GetCoders()[id]; taken {
			return false, fmt.Sprintf("coder id %q is taken", id)
		}
	}
	names := map[string]bool{}
	for _, o := range comps.GetTransforms() {
		names[o.GetUniqueName()] = true
	}
	for _, n := range liftedNames {
		if name := t.GetUniqueName() + "/" + n; names[name] {
			return false, fmt.Sprintf("unique name %q is taken", name)
		}
	}
	return true, ""
}

// liftableTrigger says whether a trigger may fire on accumulators instead
// of values: whether no part of it looks at element counts. It is the
// intersection of the rules of the Python portable runner
// (is_compatible_with_combiner_lifting: default, never, processing time,
// AfterEndOfWindow and AfterAny and Repeat of such) and Prism (anything
// without ElementCount or Always); a nil trigger is the default one.
func liftableTrigger(tr *pipepb.Trigger) bool {
	if tr == nil {
		return true
	}
	switch x := tr.GetTrigger().(type) {
	case *pipepb.Trigger_Default_, *pipepb.Trigger_Never_, *pipepb.Trigger_AfterProcessingTime_, *pipepb.Trigger_AfterSynchronizedProcessingTime_:
		return true
	case *pipepb.Trigger_AfterEndOfWindow_:
		return liftableTrigger(x.AfterEndOfWindow.GetEarlyFirings()) && liftableTrigger(x.AfterEndOfWindow.GetLateFirings())
	case *pipepb.Trigger_AfterAny_:
		for _, st := range x.AfterAny.GetSubtriggers() {
			if !liftableTrigger(st) {
				return false
			}
		}
		return true
	case *pipepb.Trigger_Repeat_:
		return liftableTrigger(x.Repeat.GetSubtrigger())
	}
	return false
}

// liftEnvironment is the environment of the lifted SDK parts: the
// composite's, else the first one found in its expansion (in the order of
// its subtransforms, depth first).
func liftEnvironment(t *pipepb.PTransform, comps *pipepb.Components) string {
	if e := t.GetEnvironmentId(); e != "" {
		return e
	}
	for _, sub := range t.GetSubtransforms() {
		if st := comps.GetTransforms()[sub]; st != nil {
			if e := liftEnvironment(st, comps); e != "" {
				return e
			}
		}
	}
	return ""
}

// lift rewrites composite tid of comps into its lifted form. Must be called
// only when liftable(tid, t, comps) holds.
func lift(tid string, t *pipepb.PTransform, comps *pipepb.Components) {
	ids := liftedIDsOf(tid)
	inID := sortedValues(t.GetInputs())[0]
	outID := sortedValues(t.GetOutputs())[0]
	in, out := comps.GetPcollections()[inID], comps.GetPcollections()[outID]
	cp := &pipepb.CombinePayload{}
	_ = unmarshal(t.GetSpec().GetPayload(), cp) // checked by liftable
	acc := cp.GetAccumulatorCoderId()
	key := comps.GetCoders()[in.GetCoderId()].GetComponentCoderIds()[0]
	env := liftEnvironment(t, comps)

	// The old expansion goes, with the PCollections only it used.
	removed := map[string]bool{}
	var drop func(id string)
	drop = func(id string) {
		if removed[id] {
			return
		}
		removed[id] = true
		for _, sub := range comps.GetTransforms()[id].GetSubtransforms() {
			drop(sub)
		}
	}
	for _, sub := range t.GetSubtransforms() {
		drop(sub)
	}
	made := map[string]bool{}
	for id := range removed {
		for _, pc := range comps.GetTransforms()[id].GetOutputs() {
			made[pc] = true
		}
		delete(comps.Transforms, id)
	}
	delete(made, outID)
	for _, o := range comps.GetTransforms() {
		for _, pc := range o.GetInputs() {
			delete(made, pc)
		}
		for _, pc := range o.GetOutputs() {
			delete(made, pc)
		}
	}
	for pc := range made {
		delete(comps.Pcollections, pc)
	}

	coder := func(urn string, components ...string) *pipepb.Coder {
		return &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn}, ComponentCoderIds: components}
	}
	comps.Coders[ids.iterAcc] = coder(urnCoderIterable, acc)
	comps.Coders[ids.kvAcc] = coder(urnCoderKV, key, acc)
	comps.Coders[ids.kvIterAcc] = coder(urnCoderKV, key, ids.iterAcc)
	pcoll := func(id, coderID string, like *pipepb.PCollection) {
		comps.Pcollections[id] = &pipepb.PCollection{
			UniqueName:          id,
			CoderId:             coderID,
			IsBounded:           like.GetIsBounded(),
			WindowingStrategyId: like.GetWindowingStrategyId(),
		}
	}
	pcoll(ids.lifted, ids.kvAcc, in)
	pcoll(ids.grouped, ids.kvIterAcc, out)
	pcoll(ids.merged, ids.kvAcc, out)
	part := func(id, name, urn, from, to, env string) {
		pt := &pipepb.PTransform{
			UniqueName:    t.GetUniqueName() + "/" + name,
			Spec:          &pipepb.FunctionSpec{Urn: urn},
			Inputs:        map[string]string{"i0": from},
			Outputs:       map[string]string{"i0": to},
			EnvironmentId: env,
		}
		if urn != URNGroupByKey {
			pt.Spec.Payload = t.GetSpec().GetPayload()
		}
		comps.Transforms[id] = pt
	}
	part(ids.precombine, liftedNames[0], URNCombinePerKeyPrecombine, inID, ids.lifted, env)
	part(ids.gbk, liftedNames[1], URNGroupByKey, ids.lifted, ids.grouped, "")
	part(ids.merge, liftedNames[2], URNCombinePerKeyMerge, ids.grouped, ids.merged, env)
	part(ids.extract, liftedNames[3], URNCombinePerKeyExtract, ids.merged, outID, env)
	nt := proto.Clone(t).(*pipepb.PTransform)
	nt.Subtransforms = ids.transforms()
	comps.Transforms[tid] = nt
}

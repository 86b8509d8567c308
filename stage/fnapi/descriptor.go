package fnapi

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Transform URNs this package builds or inspects.
const (
	// URNDataSource is the runner-provided transform that reads a stage's
	// input from the Data API (beam:runner:source:v1).
	URNDataSource = "beam:runner:source:v1"
	// URNDataSink is the runner-provided transform that writes one of a
	// stage's outputs to the Data API (beam:runner:sink:v1).
	URNDataSink = "beam:runner:sink:v1"

	urnParDo   = "beam:transform:pardo:v1"
	urnFlatten = "beam:transform:flatten:v1"
)

// StageSpec names one fused stage of a pipeline: a connected chain of leaf
// transforms executed by the SDK in one bundle, fed by one PCollection.
type StageSpec struct {
	// ID becomes the ProcessBundleDescriptor id. Required; unique per Server.
	ID string
	// Transforms are the ids of the leaf transforms in the stage, in any
	// order. Every one must run in the SDK (have an environment), except
	// Flatten.
	Transforms []string
	// Input is the id of the one PCollection the stage reads from the runner.
	// It must be consumed by a transform of the stage and produced by none.
	Input string
	// Outputs are the ids of the PCollections the stage hands back to the
	// runner, each produced by a transform of the stage. A PCollection made
	// in the stage and consumed outside it must be listed here.
	Outputs []string
}

// Stage is a ProcessBundleDescriptor built by BuildStage, with the transform
// ids the runner uses to feed and drain its bundles.
type Stage struct {
	// Descriptor is ready for Server.RegisterStage.
	Descriptor *fnpb.ProcessBundleDescriptor
	// Source is the data source transform id: the key of the stage's input
	// in ProcessBundle's inputs.
	Source string
	// Sinks maps each output PCollection id to its data sink transform id:
	// the key of that output in Result.Outputs.
	Sinks map[string]string
	// WireCoders maps the input and each output PCollection id to the id (in
	// Descriptor.Coders) of the windowed-value coder of its elements on the
	// Data API. Elements sent and received are encoded with these.
	WireCoders map[string]string
	// Timers are the timer families of the stage's ParDos, sorted by
	// transform and family (see TimerFamily). Empty for most stages.
	Timers []TimerFamily
}

// BuildStage builds the ProcessBundleDescriptor of one fused stage of a
// pipeline. comps are the pipeline's components (graphx.Marshal output);
// they are not modified. endpoint is the Fn API endpoint ("host:port") the
// data source, data sinks and state requests use: Server.Endpoint().
//
// The descriptor holds the stage's transforms, a beam:runner:source:v1
// transform producing spec.Input and one beam:runner:sink:v1 transform per
// spec.Outputs entry. On the wire each PCollection P is encoded with
//
//	windowed_value(wireSafe(coder(P)), windowCoder(P))
//
// where wireSafe length-prefixes every coder the runner cannot parse (see
// coderSet.wireSafe), so that the runner can always cut a stream of outputs
// into elements. The same rule applied to the same PCollection gives the same
// bytes, so one stage's output bytes are the next stage's input bytes.
// spec.Input's PCollection in the descriptor carries wireSafe(coder(P)) as its
// coder, so that keys the SDK encodes for state match the wire; so does
// every side input's PCollection, so that the element bytes the producer
// stage wrote are what the SDK decodes from the State API (see SideInput).
// A ParDo's timer families get the coder timer(wireSafe(K), W) and the
// descriptor the timer API endpoint (the data endpoint): timer keys are the
// wire's key bytes (see TimerFamily).
//
// A splittable ParDo (one with a restriction coder) is expanded into its
// pair-with-restriction, split-and-size and process steps in the same
// descriptor, and each restriction is processed whole (see sdf.go).
//
// Errors name the offending transform or PCollection: an unknown id, a
// composite or runner-executed transform, side inputs other than iterable
// and multimap or made in the stage itself, splittable
// DoFns with an unbounded input or output that the planner has not split
// into their steps (they may self-checkpoint: checkSplittable), transforms
// of different environments, an input
// that is not spec.Input nor made in the stage, a PCollection that escapes the
// stage without being an output, and window coders other than global and
// interval.
func BuildStage(comps *pipepb.Components, spec StageSpec, endpoint string) (*Stage, error) {
	if spec.ID == "" {
		return nil, fmt.Errorf("fnapi: stage spec without an id")
	}
	fail := func(format string, args ...any) (*Stage, error) {
		return nil, fmt.Errorf("fnapi: stage %q: %s", spec.ID, fmt.Sprintf(format, args...))
	}
	if endpoint == "" {
		return fail("empty endpoint")
	}
	if len(spec.Transforms) == 0 {
		return fail("no transforms")
	}
	if _, ok := comps.GetPcollections()[spec.Input]; !ok {
		return fail("input pcollection %q not found", spec.Input)
	}

	inStage := map[string]bool{}
	produced := map[string]string{} // pcollection -> producing stage transform
	env := ""
	transforms := map[string]*pipepb.PTransform{}
	sides := map[string]map[string]*pipepb.SideInput{} // transform -> local -> side input
	timed := map[string]*pipepb.ParDoPayload{}         // transform -> payload, for ParDos with timers
	for _, tid := range spec.Transforms {
		t, ok := comps.GetTransforms()[tid]
		if !ok {
			return fail("transform %q not found", tid)
		}
		if inStage[tid] {
			return fail("transform %q listed twice", tid)
		}
		inStage[tid] = true
		urn := t.GetSpec().GetUrn()
		if len(t.GetSubtransforms()) > 0 {
			return fail("transform %q (%s) is a composite; list its leaf transforms", tid, t.GetUniqueName())
		}
		if t.GetEnvironmentId() == "" && urn != urnFlatten {
			return fail("transform %q (%s, %s) is not executed by the SDK", tid, t.GetUniqueName(), urn)
		}
		if e := t.GetEnvironmentId(); e != "" {
			if env != "" && env != e {
				return fail("transform %q has environment %q, others have %q", tid, e, env)
			}
			env = e
		}
		if urn == urnParDo {
			pardo := &pipepb.ParDoPayload{}
			if err := proto.Unmarshal(t.GetSpec().GetPayload(), pardo); err != nil {
				return fail("transform %q: bad ParDoPayload: %v", tid, err)
			}
			if err := checkSideInputs(tid, t, pardo); err != nil {
				return fail("%v", err)
			}
			if len(pardo.GetSideInputs()) > 0 {
				sides[tid] = pardo.GetSideInputs()
			}
			if len(pardo.GetTimerFamilySpecs()) > 0 {
				timed[tid] = pardo
			}
			if pardo.GetRestrictionCoderId() != "" {
				if err := checkSplittable(comps, tid, t, pardo); err != nil {
					return fail("%v", err)
				}
			}
		}
		for local, pid := range t.GetOutputs() {
			if _, ok := comps.GetPcollections()[pid]; !ok {
				return fail("transform %q output %q: pcollection %q not found", tid, local, pid)
			}
			produced[pid] = tid
		}
		transforms[tid] = t
	}
	if _, ok := produced[spec.Input]; ok {
		return fail("input pcollection %q is produced inside the stage by %q", spec.Input, produced[spec.Input])
	}
	consumed := false
	for _, tid := range spec.Transforms {
		for local, pid := range comps.GetTransforms()[tid].GetInputs() {
			if _, side := sides[tid][local]; side {
				// Served by the State API from the runner's side input store.
				if p, ok := produced[pid]; ok {
					return fail("transform %q side input %q reads pcollection %q, which is made in the stage by %q: side inputs must come from another stage", tid, local, pid, p)
				}
				continue
			}
			if pid == spec.Input {
				consumed = true
				continue
			}
			if _, ok := produced[pid]; !ok {
				return fail("transform %q input %q reads pcollection %q, which is neither the stage input nor made in the stage", tid, local, pid)
			}
		}
	}
	if !consumed {
		return fail("input pcollection %q is not consumed by any transform of the stage", spec.Input)
	}
	isOutput := map[string]bool{}
	for _, pid := range spec.Outputs {
		if _, ok := produced[pid]; !ok {
			return fail("output pcollection %q is not produced by a transform of the stage", pid)
		}
		if isOutput[pid] {
			return fail("output pcollection %q listed twice", pid)
		}
		isOutput[pid] = true
	}
	// A PCollection made here and read by a leaf outside the stage would be
	// lost without a sink.
	for otid, t := range comps.GetTransforms() {
		if inStage[otid] || len(t.GetSubtransforms()) > 0 {
			continue
		}
		for _, pid := range t.GetInputs() {
			if _, ok := produced[pid]; ok && !isOutput[pid] {
				return fail("pcollection %q made in the stage is read by transform %q outside it but is not a stage output", pid, otid)
			}
		}
	}

	cs := &coderSet{base: comps.GetCoders(), added: map[string]*pipepb.Coder{}}
	pcols := map[string]*pipepb.PCollection{}
	for _, t := range transforms {
		for _, pid := range t.GetInputs() {
			pcols[pid] = comps.GetPcollections()[pid]
		}
		for _, pid := range t.GetOutputs() {
			pcols[pid] = comps.GetPcollections()[pid]
		}
	}
	wireCoder := func(pid string) (elm, wv string, err error) {
		col := comps.GetPcollections()[pid]
		ws, ok := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
		if !ok {
			return "", "", fmt.Errorf("pcollection %q: windowing strategy %q not found", pid, col.GetWindowingStrategyId())
		}
		wc, ok := cs.get(ws.GetWindowCoderId())
		if !ok {
			return "", "", fmt.Errorf("pcollection %q: window coder %q not found", pid, ws.GetWindowCoderId())
		}
		if u := wc.GetSpec().GetUrn(); u != urnCoderGlobalWindow && u != urnCoderIntervalWindow {
			return "", "", fmt.Errorf("pcollection %q: window coder %q (%s) not supported yet (global and interval windows only)", pid, ws.GetWindowCoderId(), u)
		}
		elm, err = cs.wireSafe(col.GetCoderId(), 0)
		if err != nil {
			return "", "", fmt.Errorf("pcollection %q: %w", pid, err)
		}
		wv = cs.freshID("wire_" + pid)
		cs.added[wv] = &pipepb.Coder{
			Spec:              &pipepb.FunctionSpec{Urn: urnCoderWindowedValue},
			ComponentCoderIds: []string{elm, ws.GetWindowCoderId()},
		}
		return elm, wv, nil
	}
	port := func(coderID string) ([]byte, error) {
		return proto.Marshal(&fnpb.RemoteGrpcPort{
			ApiServiceDescriptor: &pipepb.ApiServiceDescriptor{Url: endpoint},
			CoderId:              coderID,
		})
	}
	freshTransform := func(want string) string {
		id := want
		for i := 1; ; i++ {
			if _, ok := comps.GetTransforms()[id]; !ok {
				if _, ok := transforms[id]; !ok {
					return id
				}
			}
			id = fmt.Sprintf("%s%d", want, i)
		}
	}

	st := &Stage{Sinks: map[string]string{}, WireCoders: map[string]string{}}
	if err := sideInputCoders(comps, cs, pcols, sides); err != nil {
		return fail("%v", err)
	}

	for _, tid := range slices.Sorted(maps.Keys(timed)) {
		if err := wireSafeTimerCoders(cs, tid, timed[tid]); err != nil {
			return fail("%v", err)
		}
		payload, err := proto.Marshal(timed[tid])
		if err != nil {
			return fail("transform %q: %v", tid, err)
		}
		t := proto.Clone(transforms[tid]).(*pipepb.PTransform)
		t.Spec.Payload = payload
		transforms[tid] = t
	}

	inElm, inWV, err := wireCoder(spec.Input)
	if err != nil {
		return fail("input: %v", err)
	}
	inCol := proto.Clone(pcols[spec.Input]).(*pipepb.PCollection)
	inCol.CoderId = inElm
	pcols[spec.Input] = inCol
	st.WireCoders[spec.Input] = inWV
	payload, err := port(inWV)
	if err != nil {
		return fail("source port: %v", err)
	}
	st.Source = freshTransform(spec.ID + "_source")
	transforms[st.Source] = &pipepb.PTransform{
		UniqueName: st.Source,
		Spec:       &pipepb.FunctionSpec{Urn: URNDataSource, Payload: payload},
		Outputs:    map[string]string{"out": spec.Input},
	}

	// Splittable DoFns become their three steps (sdf.go), after the input's
	// coder became wire-safe so that their element coder matches it.
	sb := &sdfBuild{cs: cs, pcols: pcols, transforms: transforms, freshTransform: freshTransform,
		freshPCollection: func(want string) string {
			id := want
			for i := 1; ; i++ {
				_, inPipeline := comps.GetPcollections()[id]
				if _, inDesc := pcols[id]; !inPipeline && !inDesc {
					return id
				}
				id = fmt.Sprintf("%s%d", want, i)
			}
		}}
	if err := sb.expandSplittables(); err != nil {
		return fail("%v", err)
	}

	outs := append([]string(nil), spec.Outputs...)
	sort.Strings(outs) // deterministic sink ids
	for _, pid := range outs {
		_, wv, err := wireCoder(pid)
		if err != nil {
			return fail("output: %v", err)
		}
		st.WireCoders[pid] = wv
		payload, err := port(wv)
		if err != nil {
			return fail("sink port: %v", err)
		}
		sink := freshTransform(pid + "_sink")
		transforms[sink] = &pipepb.PTransform{
			UniqueName: sink,
			Spec:       &pipepb.FunctionSpec{Urn: URNDataSink, Payload: payload},
			Inputs:     map[string]string{"in": pid},
		}
		st.Sinks[pid] = sink
	}

	coders := make(map[string]*pipepb.Coder, len(cs.base)+len(cs.added))
	for id, c := range cs.base {
		coders[id] = c
	}
	for id, c := range cs.added {
		coders[id] = c
	}
	st.Descriptor = &fnpb.ProcessBundleDescriptor{
		Id:                        spec.ID,
		Transforms:                transforms,
		Pcollections:              pcols,
		WindowingStrategies:       comps.GetWindowingStrategies(),
		Coders:                    coders,
		Environments:              comps.GetEnvironments(),
		StateApiServiceDescriptor: &pipepb.ApiServiceDescriptor{Url: endpoint},
	}
	if len(timed) > 0 {
		st.Descriptor.TimerApiServiceDescriptor = &pipepb.ApiServiceDescriptor{Url: endpoint}
	}
	if st.Timers, err = timerFamilies(st.Descriptor); err != nil {
		return fail("%v", err)
	}
	return st, nil
}

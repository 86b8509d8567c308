package plan

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Build plans the pipeline. Errors wrap ErrUnsupported (naming the transform
// and its URN) or ErrMalformed; they are returned before anything is created.
//
// Build lifts p's liftable combines in place first (liftCombines): it adds
// the lifted transforms, PCollections and coders to p's components and
// replaces each such composite's expansion, so that the stages' transform
// ids are in p. p means the same pipeline after; a second Build of it
// plans the same.
func Build(p *pipepb.Pipeline, opts Options) (*Plan, error) {
	if err := validateOptions(opts); err != nil {
		return nil, err
	}
	comps := p.GetComponents()
	if comps == nil {
		return nil, fmt.Errorf("%w: no components", ErrMalformed)
	}
	liftCombines(p)
	if err := splitUnboundedSDFs(p); err != nil {
		return nil, err
	}
	leaves, err := leafTransforms(p)
	if err != nil {
		return nil, err
	}
	// producer[pcoll] = leaf id; consumers[pcoll] = leaf ids (with repeats
	// for a Flatten reading the same PCollection twice).
	producer := map[string]string{}
	consumers := map[string][]string{}
	// natives[id] is the NativeSource or NativeSink DoFn of ParDo id.
	natives := map[string]any{}
	for _, id := range leaves {
		t := comps.GetTransforms()[id]
		if n := NativeDoFn(t); n != nil {
			natives[id] = n // a ParDo the runner executes itself
		} else if err := checkSupported(id, t, opts); err != nil {
			return nil, err
		}
		for _, pc := range sortedValues(t.GetOutputs()) {
			producer[pc] = id
		}
		for _, pc := range mainInputs(t) {
			consumers[pc] = append(consumers[pc], id)
		}
	}
	order, err := topoSort(leaves, comps, producer)
	if err != nil {
		return nil, err
	}

	plan := &Plan{ApplicationID: opts.ApplicationID}
	stageOf := map[string]*Stage{} // head or fused leaf id -> stage
	// deps[s] are the stages s reads from (main and side inputs): the stage
	// graph, kept acyclic as it grows.
	deps := map[*Stage]map[*Stage]bool{}
	addDep := func(s, on *Stage) {
		if deps[s] == nil {
			deps[s] = map[*Stage]bool{}
		}
		deps[s][on] = true
	}
	// keepsWindows[pc]: pc's elements are in the windows they had at the
	// head of pc's stage (only ParDos, which keep windows, lie between).
	keepsWindows := map[string]bool{}
	newStage := func(kind HeadKind, id string, t *pipepb.PTransform, headOutput string) *Stage {
		s := &Stage{
			Head:           kind,
			HeadTransform:  id,
			HeadUniqueName: t.GetUniqueName(),
			Partitions:     opts.Partitions,
			HeadOutput:     headOutput,
		}
		if kind.OnePartition() {
			s.Partitions = 1
		}
		s.Name = fmt.Sprintf("s%d-%s", len(plan.Stages), slug(t.GetUniqueName()))
		s.InputTopic = opts.ApplicationID + "-" + s.Name
		if src, ok := natives[id].(NativeSource); ok {
			s.Partitions = 0
			s.InputTopic = src.KafkaSourceTopic()
		}
		plan.Stages = append(plan.Stages, s)
		keepsWindows[headOutput] = true
		return s
	}
	// One walk in topological order: a head starts a stage; an SDK leaf
	// joins the stage of the producer of its main input, unless it is a
	// ParDo with side inputs that cannot run there (fuseSideInputs), which
	// then starts a HeadSideInputs stage. Producers are placed first.
	var sinks []KafkaSink
	for _, id := range order {
		t := comps.GetTransforms()[id]
		urn := t.GetSpec().GetUrn()
		switch n := natives[id].(type) {
		case NativeSource:
			if !opts.supports(HeadKafkaSource) {
				return nil, fmt.Errorf("%w: Kafka read %q (id %s) needs a stage of its own (%s), which this runner does not execute", ErrUnsupported, t.GetUniqueName(), id, HeadKafkaSource)
			}
			outs := sortedValues(t.GetOutputs())
			if len(outs) != 1 {
				return nil, fmt.Errorf("%w: Kafka read %q (%s) has %d outputs, want 1", ErrMalformed, t.GetUniqueName(), id, len(outs))
			}
			stageOf[id] = newStage(HeadKafkaSource, id, t, outs[0])
			continue
		case NativeSink:
			ins := mainInputs(t)
			if len(ins) != 1 || len(t.GetOutputs()) != 0 {
				return nil, fmt.Errorf("%w: Kafka write %q (%s) has %d inputs and %d outputs, want 1 and 0", ErrMalformed, t.GetUniqueName(), id, len(ins), len(t.GetOutputs()))
			}
			sinks = append(sinks, KafkaSink{PCollection: ins[0], Topic: n.KafkaSinkTopic(), Transform: id})
			continue
		}
		if urn == URNImpulse && onlyNativeSources(t, consumers, natives) {
			continue // the Kafka reads it feeds read their topics instead
		}
		if kind, isHead := headKind(urn); isHead {
			outs := sortedValues(t.GetOutputs())
			if len(outs) != 1 {
				return nil, fmt.Errorf("%w: %s transform %q (%s) has %d outputs, want 1", ErrMalformed, kind, t.GetUniqueName(), id, len(outs))
			}
			s := newStage(kind, id, t, outs[0])
			stageOf[id] = s
			for _, pc := range allInputs(t) {
				addDep(s, stageOf[producer[pc]])
			}
			continue
		}
		ins := mainInputs(t)
		if len(ins) != 1 {
			return nil, fmt.Errorf("%w: transform %q (%s) has %d main inputs, want 1", ErrMalformed, t.GetUniqueName(), id, len(ins))
		}
		up, ok := producer[ins[0]]
		if !ok {
			return nil, fmt.Errorf("%w: no transform produces PCollection %s, the input of %q", ErrMalformed, ins[0], t.GetUniqueName())
		}
		s := stageOf[up]
		sides, err := sideInputsOf(id, t)
		if err != nil {
			return nil, err
		}
		if isStateful(t) {
			s = newStage(HeadStateful, id, t, ins[0])
			addDep(s, stageOf[up])
		} else if isSplittableProcess(t) {
			if !opts.supports(HeadSplittable) {
				return nil, fmt.Errorf("%w: transform %q (id %s) is an unbounded splittable DoFn (it may checkpoint), which this runner does not execute yet", ErrUnsupported, t.GetUniqueName(), id)
			}
			s = newStage(HeadSplittable, id, t, ins[0])
			addDep(s, stageOf[up])
		} else if len(sides) > 0 && !fuseSideInputs(s, ins[0], sides, comps, producer, stageOf, deps, keepsWindows) {
			if !opts.supports(HeadSideInputs) {
				return nil, fmt.Errorf("%w: transform %q (id %s) reads side inputs and needs a stage of its own (%s), which this runner does not execute yet", ErrUnsupported, t.GetUniqueName(), id, HeadSideInputs)
			}
			s = newStage(HeadSideInputs, id, t, ins[0])
			addDep(s, stageOf[up])
		}
		stageOf[id] = s
		s.Transforms = append(s.Transforms, id)
		s.TransformNames = append(s.TransformNames, t.GetUniqueName())
		s.URNs = append(s.URNs, urn)
		if urn == URNParDo && keepsWindows[ins[0]] {
			for _, pc := range t.GetOutputs() {
				keepsWindows[pc] = true
			}
		}
		for _, si := range sides {
			ys := stageOf[producer[si.PCollection]]
			addDep(s, ys)
			si.Upstream = ys.Name
			si.Topic = fmt.Sprintf("%s-%s-side%d", opts.ApplicationID, s.Name, len(s.SideInputs))
			s.SideInputs = append(s.SideInputs, si)
		}
	}
	// Edges: a PCollection whose consumer is a head leaves its producer's stage.
	outputs := map[*Stage]map[string]map[string]int{} // stage -> pcoll -> topic -> copies
	addOutput := func(ps *Stage, pc, topic string) {
		if outputs[ps] == nil {
			outputs[ps] = map[string]map[string]int{}
		}
		if outputs[ps][pc] == nil {
			outputs[ps][pc] = map[string]int{}
		}
		outputs[ps][pc][topic]++
	}
	for pc, cs := range consumers {
		for _, c := range cs {
			consumer := stageOf[c]
			if consumer == nil || consumer.HeadTransform != c || consumer.Head.UserTopic() {
				continue // fused: stays inside the producer's stage
			}
			ps := stageOf[producer[pc]]
			if ps == nil {
				return nil, fmt.Errorf("%w: no transform produces PCollection %s, an input of %q", ErrMalformed, pc, consumer.HeadUniqueName)
			}
			addOutput(ps, pc, consumer.InputTopic)
			if !contains(consumer.Upstreams, ps.Name) {
				consumer.Upstreams = append(consumer.Upstreams, ps.Name)
				sort.Strings(consumer.Upstreams)
			}
		}
	}
	// Side-input edges: the producer writes the PCollection to the topic.
	for _, s := range plan.Stages {
		for _, si := range s.SideInputs {
			addOutput(plan.Stage(si.Upstream), si.PCollection, si.Topic)
		}
	}
	for _, k := range sinks {
		ps := stageOf[producer[k.PCollection]]
		if ps == nil {
			return nil, fmt.Errorf("%w: no stage produces PCollection %s, the input of the Kafka write to %s", ErrMalformed, k.PCollection, k.Topic)
		}
		ps.KafkaSinks = append(ps.KafkaSinks, k)
	}
	for _, s := range plan.Stages {
		sort.Slice(s.KafkaSinks, func(i, j int) bool {
			if s.KafkaSinks[i].PCollection != s.KafkaSinks[j].PCollection {
				return s.KafkaSinks[i].PCollection < s.KafkaSinks[j].PCollection
			}
			return s.KafkaSinks[i].Topic < s.KafkaSinks[j].Topic
		})
		for _, pc := range slices.Sorted(maps.Keys(outputs[s])) {
			o := Output{PCollection: pc}
			for _, topic := range slices.Sorted(maps.Keys(outputs[s][pc])) {
				o.Topics = append(o.Topics, topic)
				o.Copies = append(o.Copies, outputs[s][pc][topic])
			}
			s.Outputs = append(s.Outputs, o)
		}
	}
	return plan, nil
}

// sideInputsOf returns t's side inputs, sorted by local name, without Topic
// and Upstream. Only ParDos have side inputs.
func sideInputsOf(id string, t *pipepb.PTransform) ([]SideInput, error) {
	if t.GetSpec().GetUrn() != URNParDo {
		return nil, nil
	}
	pd := &pipepb.ParDoPayload{}
	if err := unmarshal(t.GetSpec().GetPayload(), pd); err != nil {
		return nil, fmt.Errorf("%w: transform %q (%s): ParDoPayload: %v", ErrMalformed, t.GetUniqueName(), id, err)
	}
	var out []SideInput
	for _, local := range slices.Sorted(maps.Keys(pd.GetSideInputs())) {
		pc, ok := t.GetInputs()[local]
		if !ok {
			return nil, fmt.Errorf("%w: transform %q (%s): side input %q is not one of its inputs", ErrMalformed, t.GetUniqueName(), id, local)
		}
		out = append(out, SideInput{
			Transform:     id,
			TransformName: t.GetUniqueName(),
			LocalName:     local,
			PCollection:   pc,
			AccessPattern: pd.GetSideInputs()[local].GetAccessPattern().GetUrn(),
		})
	}
	return out, nil
}

// fuseSideInputs says whether a ParDo with side inputs sides, reading main
// input pc, may be fused into stage s (the stage of pc's producer). It may
// when all of these hold, and otherwise starts a HeadSideInputs stage:
//
//   - s's head is a passthrough (HeadKind.Passthrough): the task holds back a
//     main record by not consuming it, which a stateful head (GroupByKey,
//     whose elements fire from state) cannot do;
//   - no side input's producer stage is s or depends on s: the task would
//     wait for a side input that waits for the task (a stage graph cycle;
//     e.g. a side input made in the same stage, as in the SDK's
//     ValidateWindowedSideInputs);
//   - if a side input is not in the global window, pc's elements are in the
//     windows they had at the head (keepsWindows): the runner decides
//     readiness from the head's elements' windows, mapped to the side
//     input's windows. A global side input's window is always the global
//     window, whatever the main window.
//
// Must be called with deps holding every edge of the stages placed so far;
// the caller adds the new side edges.
func fuseSideInputs(s *Stage, pc string, sides []SideInput, comps *pipepb.Components, producer map[string]string, stageOf map[string]*Stage, deps map[*Stage]map[*Stage]bool, keepsWindows map[string]bool) bool {
	if !s.Head.Passthrough() {
		return false
	}
	for _, si := range sides {
		ys := stageOf[producer[si.PCollection]]
		if ys == nil || reaches(deps, ys, s) {
			return false
		}
		col := comps.GetPcollections()[si.PCollection]
		ws := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
		if ws.GetWindowFn().GetUrn() != urnGlobalWindowFn && !keepsWindows[pc] {
			return false
		}
	}
	return true
}

// reaches says whether stage from depends on stage to, directly or through
// other stages, or is it.
func reaches(deps map[*Stage]map[*Stage]bool, from, to *Stage) bool {
	seen := map[*Stage]bool{}
	var walk func(s *Stage) bool
	walk = func(s *Stage) bool {
		if s == to {
			return true
		}
		if seen[s] {
			return false
		}
		seen[s] = true
		for d := range deps[s] {
			if walk(d) {
				return true
			}
		}
		return false
	}
	return walk(from)
}

func validateOptions(o Options) error {
	if o.ApplicationID == "" {
		return errors.New("plan: application id is empty")
	}
	for _, r := range o.ApplicationID {
		if !topicChar(r) {
			return fmt.Errorf("plan: application id %q: %q is not allowed in a Kafka topic name (use A-Z a-z 0-9 . _ -)", o.ApplicationID, r)
		}
	}
	if o.Partitions <= 0 {
		return fmt.Errorf("plan: partitions for internal topics must be positive, got %d", o.Partitions)
	}
	return nil
}

func topicChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// slug makes a unique name usable in a topic name: other characters become
// '_', and it is cut to 40 characters.
func slug(name string) string {
	var b strings.Builder
	for _, r := range name {
		if !topicChar(r) {
			r = '_'
		}
		b.WriteRune(r)
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// onlyNativeSources says whether every consumer of Impulse t's output is a
// NativeSource ParDo (and there is one).
func onlyNativeSources(t *pipepb.PTransform, consumers map[string][]string, natives map[string]any) bool {
	n := 0
	for _, pc := range t.GetOutputs() {
		for _, c := range consumers[pc] {
			if _, ok := natives[c].(NativeSource); !ok {
				return false
			}
			n++
		}
	}
	return n > 0
}

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

// URNs of the transforms the planner knows, from beam_runner_api.proto
// (StandardPTransforms) and the Go SDK's graphx.
const (
	URNImpulse               = "beam:transform:impulse:v1"
	URNParDo                 = "beam:transform:pardo:v1"
	URNFlatten               = "beam:transform:flatten:v1"
	URNGroupByKey            = "beam:transform:group_by_key:v1"
	URNCoGroupByKey          = "beam:transform:co_group_by_key:v1"
	URNReshuffle             = "beam:transform:reshuffle:v1"
	URNRedistributeArbitrary = "beam:transform:redistribute_arbitrarily:v1"
	URNRedistributeByKey     = "beam:transform:redistribute_by_key:v1"
	URNWindowInto            = "beam:transform:window_into:v1"
	URNMapWindows            = "beam:transform:map_windows:v1"
	URNCombinePerKey         = "beam:transform:combine_per_key:v1"
	URNTestStream            = "beam:transform:teststream:v1"

	// Side input access patterns (beam_runner_api.proto, StandardSideInputTypes).
	URNSideInputIterable = "beam:side_input:iterable:v1"
	URNSideInputMultimap = "beam:side_input:multimap:v1"

	// Window mapping fns the Go SDK writes on its side inputs (graphx):
	// the main input window's max timestamp is assigned to a window of the
	// side input's WindowFn (the earliest, for sliding windows).
	URNWindowMappingGlobal  = "beam:go:windowmapping:global:v1"
	URNWindowMappingFixed   = "beam:go:windowmapping:fixed:v1"
	URNWindowMappingSliding = "beam:go:windowmapping:sliding:v1"

	urnGlobalWindowFn = "beam:window_fn:global_windows:v1"
)

// sdkURNs are leaf transforms the Go SDK harness executes inside a fused stage.
var sdkURNs = map[string]bool{
	URNParDo:      true,
	URNWindowInto: true,
	URNMapWindows: true,

	URNCombinePerKeyPrecombine: true,
	URNCombinePerKeyMerge:      true,
	URNCombinePerKeyExtract:    true,

	URNSDFPairWithRestriction:  true,
	URNSDFSplitAndSize:         true,
	URNSDFProcessSizedElements: true,
}

// Errors. ErrUnsupported wraps every "cannot execute this transform" error;
// the message names the transform and its URN.
var (
	ErrUnsupported = errors.New("plan: transform not supported by the kafkastreams runner")
	ErrMalformed   = errors.New("plan: malformed pipeline")
)

// HeadKind is what the runner does at the head of a stage, before the fused
// SDK transforms.
type HeadKind string

// Head kinds.
const (
	// HeadImpulse: the stage's input topic has one partition holding one
	// record, written when the plan is first recorded; the head turns it into
	// the impulse element (empty bytes, global window, mtime.MinTimestamp) and
	// then reports the end of time.
	HeadImpulse HeadKind = "impulse"
	// HeadGroupByKey: runner-side GroupByKey over keyed records.
	HeadGroupByKey HeadKind = "group_by_key"
	// HeadReshuffle: the topic hop is the reshuffle; elements pass unchanged.
	HeadReshuffle HeadKind = "reshuffle"
	// HeadFlatten: every input of the Flatten writes to the stage's topic;
	// elements pass unchanged.
	HeadFlatten HeadKind = "flatten"
	// HeadSideInputs: a fusion break before a ParDo with side inputs that
	// cannot run in its main input's stage (see Build); the ParDo's main
	// input crosses the stage's topic unchanged and the ParDo is the first
	// fused transform (HeadTransform is the ParDo; HeadOutput its main input).
	HeadSideInputs HeadKind = "side_inputs"
	// HeadStateful: a ParDo with user state or timers (state specs or
	// timer family specs in its ParDoPayload) starts a stage whose input
	// topic is keyed like a GroupByKey's (the ParDo's main input is KV;
	// equal keys meet on one task): Beam's state and timers are per key and
	// window, so one task must own every element of a key. The ParDo's
	// main input crosses the topic unchanged; the ParDo is the first fused
	// transform (HeadTransform is the ParDo; HeadOutput its main input), and
	// the stage's head keeps the state and timers (stage/userstate).
	HeadStateful HeadKind = "stateful"
	// HeadTestStream: like HeadImpulse, a one-partition input topic written
	// with the plan, here one record per segment of the TestStream's events
	// (stage/teststream); the head replays each segment's elements and
	// reports the watermark the stream declares right after them (a
	// watermark point, step.Work.Point), and the end of time after the
	// last.
	HeadTestStream HeadKind = "teststream"
	// HeadKafkaSource: a ParDo whose DoFn is a NativeSource (a
	// runner/kafkaio.Read) heads a stage whose input topic is the user's
	// topic, read directly: one task per partition of it, offsets
	// committed in the stage's transactions (KIP-447), the records turned
	// into elements with the source's watermark strategy
	// (stage/kafkasource). Partitions is 0 in the plan: the topic's count,
	// which may grow while the job runs, is the broker's.
	HeadKafkaSource HeadKind = "kafka_source"
	// HeadSplittable: the process step of a splittable ParDo that may
	// checkpoint (an unbounded one: periodic.Impulse, a self-checkpointing
	// read) heads a stage; its pair-with-restriction and split steps fuse
	// upstream (splitUnboundedSDFs) and the stage's input topic carries the
	// sized restrictions, so the process step is fed by the data source and
	// the harness hands checkpoints back as residuals. The head
	// (stage/splittable) keeps each task's residuals in its state store,
	// committed with the transaction, resumes them when their delay has
	// passed, and holds the output watermark at their watermark estimates.
	// HeadTransform is the process step; HeadOutput its input.
	HeadSplittable HeadKind = "splittable"
)

// Keyed reports whether a stage with this head reads a keyed topic: its
// upstreams write each element with its encoded Beam key as the record key,
// on the partition step.KeyPartition names, so equal keys meet on one task
// (GroupByKey, stateful ParDo).
func (k HeadKind) Keyed() bool { return k == HeadGroupByKey || k == HeadStateful }

// Source reports whether a stage with this head reads records the plan
// transaction wrote (not Envelopes from upstream stages) and has no
// upstream stage: its input is complete once read (Impulse, TestStream).
func (k HeadKind) Source() bool {
	return k == HeadImpulse || k == HeadTestStream || k == HeadKafkaSource
}

// passthroughHeads hand the records of a task to the bundle one element per
// record, with no runner-side state: a task can stop at any record and read
// it again later. Only these heads can precede a ParDo with side inputs in
// a stage, because the task holds back main-input records whose side input
// is not ready (see SideInput).
var passthroughHeads = map[HeadKind]bool{HeadImpulse: true, HeadReshuffle: true, HeadFlatten: true, HeadSideInputs: true}

// Options are the plan's inputs besides the pipeline.
type Options struct {
	// ApplicationID prefixes every topic name. Required; Kafka topic-name
	// characters only ([A-Za-z0-9._-]).
	ApplicationID string
	// Partitions is the partition count of internal topics (the input
	// topics of Impulse and TestStream stages always have 1). Must be
	// positive.
	Partitions int32
	// Supported, if non-nil, narrows the head kinds this build of the runner
	// executes (the runner's: runner.Supported, its registered kinds); a
	// pipeline needing another is refused with ErrUnsupported, naming the
	// transform, before any topic exists. Nil: every kind.
	Supported map[HeadKind]bool
}

// Plan is the executable shape of one pipeline for one application.
type Plan struct {
	ApplicationID string `json:"applicationId"`
	// Stages in topological order of their main inputs: a stage's Upstreams
	// come before it. A side input's producer (SideInput.Upstream) may come
	// after the stage reading it; the stage graph with side-input edges is
	// still acyclic (Build guarantees it).
	Stages []*Stage `json:"stages"`
}

// Stage is one ExecutableStage: its input topic, its head, the SDK transforms
// fused after the head, and the topics it writes.
type Stage struct {
	// Name is unique in the plan and deterministic: "s<index>-<slug of the
	// head transform's unique name>". Consumer group: "<application_id>.<Name>".
	Name string   `json:"name"`
	Head HeadKind `json:"head"`
	// HeadTransform is the id of the head transform in the pipeline proto.
	HeadTransform string `json:"headTransform"`
	// HeadUniqueName is its unique (user-facing) name.
	HeadUniqueName string `json:"headUniqueName"`
	// InputTopic is read by the stage's tasks, one task per partition.
	InputTopic string `json:"inputTopic"`
	// Partitions of InputTopic.
	Partitions int32 `json:"partitions"`
	// HeadOutput is the PCollection the head produces: the input of the fused
	// SDK transforms.
	HeadOutput string `json:"headOutput"`
	// Transforms are the fused SDK leaf transforms, by id, in topological order.
	Transforms []string `json:"transforms"`
	// TransformNames are their unique names (same order), for people and Diff.
	TransformNames []string `json:"transformNames"`
	// URNs of Transforms (same order).
	URNs []string `json:"urns"`
	// Upstreams are the stages writing to InputTopic, sorted.
	Upstreams []string `json:"upstreams"`
	// Outputs are the PCollections leaving the stage, each with the input
	// topics of the stages consuming it and the side-input topics of the
	// stages reading it as a side input, sorted by PCollection id.
	Outputs []Output `json:"outputs"`
	// SideInputs are the side inputs of the stage's fused ParDos, sorted by
	// (transform unique name, local name). Empty for most stages.
	SideInputs []SideInput `json:"sideInputs,omitempty"`
	// KafkaSinks are the users' topics the stage writes plain records to
	// (NativeSink), sorted by (PCollection, topic). They are not Outputs:
	// no report goes there, and the stage is a sink of the plan if it has
	// no Outputs.
	KafkaSinks []KafkaSink `json:"kafkaSinks,omitempty"`
}

// KafkaSink is one runner/kafkaio.Write: the elements of PCollection,
// written to the user's Topic by the stage producing them, in its
// transactions.
type KafkaSink struct {
	PCollection string `json:"pcollection"`
	Topic       string `json:"topic"`
	// Transform is the id of the Write's ParDo (not executed: the stage
	// does its work).
	Transform string `json:"transform"`
}

// SideInput is one side input of a ParDo fused in a stage: an edge from the
// stage producing the PCollection (Upstream) to a one-partition topic that
// every task of the reading stage consumes whole.
//
// The producer writes the PCollection's elements (wire-encoded, one Envelope
// each, like any output) and its watermark reports to Topic inside its
// transactions. A reader sees only committed records (read_committed) in
// the one partition's order, so a report it reads covers every element
// before it: when the reports say the producer's watermark is past a
// window's max timestamp, that window of the side input is complete (Beam:
// a side input window is ready once the side input's watermark passes its
// end). One partition, not P, because every task reads it whole anyway and
// one ordered log needs one watermark per producer task, not one per
// (producer task, partition).
//
// Side inputs do not hold the reading stage's input watermark through its
// Upstreams: a task instead stops reading its main partition at the first
// element whose side input window is not ready (stage.Config.SideInputs),
// so neither that element nor any report after it is consumed until it is.
type SideInput struct {
	// Transform is the id of the ParDo reading the side input, and
	// TransformName its unique name.
	Transform     string `json:"transform"`
	TransformName string `json:"transformName"`
	// LocalName is the side input's local input name in the ParDo ("i1",
	// …): the side_input_id of the harness's state requests.
	LocalName string `json:"localName"`
	// PCollection is the side input's PCollection id.
	PCollection string `json:"pcollection"`
	// AccessPattern is URNSideInputIterable or URNSideInputMultimap.
	AccessPattern string `json:"accessPattern"`
	// Topic is "<application_id>-<stage>-side<N>", N the index in
	// Stage.SideInputs; one partition.
	Topic string `json:"topic"`
	// Upstream is the stage producing PCollection.
	Upstream string `json:"upstream"`
}

// Output is one PCollection a stage writes, and where.
type Output struct {
	PCollection string `json:"pcollection"`
	// Topics are consumer stages' input topics, sorted.
	Topics []string `json:"topics"`
	// Copies[i] is how many times each element is written to Topics[i]: 2
	// when a Flatten takes the same PCollection twice (FlattenDup).
	Copies []int `json:"copies"`
}

// Stage returns the stage named name, or nil.
func (p *Plan) Stage(name string) *Stage {
	for _, s := range p.Stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Consumer returns the stage whose input topic is topic, or nil (a
// side-input topic, or not a topic of the plan).
func (p *Plan) Consumer(topic string) *Stage {
	for _, s := range p.Stages {
		if s.InputTopic == topic {
			return s
		}
	}
	return nil
}

// Topics returns every internal topic with its partition count: the input
// topics and the side-input topics (one partition each). Users' topics
// (a HeadKafkaSource's input, KafkaSinks) are not internal.
func (p *Plan) Topics() map[string]int32 {
	out := map[string]int32{}
	for _, s := range p.Stages {
		if s.Head != HeadKafkaSource {
			out[s.InputTopic] = s.Partitions
		}
		for _, si := range s.SideInputs {
			out[si.Topic] = 1
		}
	}
	return out
}

// Sinks returns the stages that write no topic: the job is done when all of
// them have reported the end of time.
func (p *Plan) Sinks() []*Stage {
	var out []*Stage
	for _, s := range p.Stages {
		if len(s.Outputs) == 0 {
			out = append(out, s)
		}
	}
	return out
}

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
		if kind == HeadImpulse || kind == HeadTestStream {
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
			if opts.Supported != nil && !opts.Supported[HeadKafkaSource] {
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
			if opts.Supported != nil && !opts.Supported[HeadSplittable] {
				return nil, fmt.Errorf("%w: transform %q (id %s) is an unbounded splittable DoFn (it may checkpoint), which this runner does not execute yet", ErrUnsupported, t.GetUniqueName(), id)
			}
			s = newStage(HeadSplittable, id, t, ins[0])
			addDep(s, stageOf[up])
		} else if len(sides) > 0 && !fuseSideInputs(s, ins[0], sides, comps, producer, stageOf, deps, keepsWindows) {
			if opts.Supported != nil && !opts.Supported[HeadSideInputs] {
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
			if consumer == nil || consumer.HeadTransform != c || consumer.Head == HeadKafkaSource {
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
//   - s's head is a passthrough (passthroughHeads): the task holds back a
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
	if !passthroughHeads[s.Head] {
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

func headKind(urn string) (HeadKind, bool) {
	switch urn {
	case URNImpulse:
		return HeadImpulse, true
	case URNGroupByKey:
		return HeadGroupByKey, true
	case URNReshuffle, URNRedistributeArbitrary, URNRedistributeByKey:
		return HeadReshuffle, true
	case URNFlatten:
		return HeadFlatten, true
	case URNTestStream:
		return HeadTestStream, true
	}
	return "", false
}

// runnerComposites are composites the runner executes whole, ignoring their
// expansion.
var runnerComposites = map[string]bool{URNReshuffle: true, URNRedistributeArbitrary: true, URNRedistributeByKey: true}

// leafTransforms returns the transforms to execute, in the order a depth-first
// walk of the root transforms finds them: leaves, and composites the runner
// executes whole.
func leafTransforms(p *pipepb.Pipeline) ([]string, error) {
	ts := p.GetComponents().GetTransforms()
	var out []string
	seen := map[string]bool{}
	var walk func(id string) error
	walk = func(id string) error {
		if seen[id] {
			return nil
		}
		seen[id] = true
		t, ok := ts[id]
		if !ok {
			return fmt.Errorf("%w: transform %s is referenced but not defined", ErrMalformed, id)
		}
		if len(t.GetSubtransforms()) == 0 || runnerComposites[t.GetSpec().GetUrn()] {
			out = append(out, id)
			return nil
		}
		for _, sub := range t.GetSubtransforms() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	for _, id := range p.GetRootTransformIds() {
		if err := walk(id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func checkSupported(id string, t *pipepb.PTransform, opts Options) error {
	urn := t.GetSpec().GetUrn()
	name := fmt.Sprintf("transform %q (id %s, URN %s)", t.GetUniqueName(), id, urn)
	if kind, ok := headKind(urn); ok {
		if opts.Supported != nil && !opts.Supported[kind] {
			return fmt.Errorf("%w: %s: %s is not implemented in this runner yet", ErrUnsupported, name, kind)
		}
		return nil
	}
	if !sdkURNs[urn] {
		if urn == "" {
			return fmt.Errorf("%w: %s has no URN", ErrUnsupported, name)
		}
		return fmt.Errorf("%w: %s", ErrUnsupported, name)
	}
	if urn == URNParDo {
		pd := &pipepb.ParDoPayload{}
		if err := unmarshal(t.GetSpec().GetPayload(), pd); err != nil {
			return fmt.Errorf("%w: %s: ParDoPayload: %v", ErrMalformed, name, err)
		}
		for _, local := range slices.Sorted(maps.Keys(pd.GetSideInputs())) {
			si := pd.GetSideInputs()[local]
			switch ap := si.GetAccessPattern().GetUrn(); ap {
			case URNSideInputIterable, URNSideInputMultimap:
			default:
				return fmt.Errorf("%w: %s: side input %q: access pattern %q is not implemented (iterable and multimap only)", ErrUnsupported, name, local, ap)
			}
			switch wm := si.GetWindowMappingFn().GetUrn(); wm {
			case URNWindowMappingGlobal, URNWindowMappingFixed, URNWindowMappingSliding:
			default:
				return fmt.Errorf("%w: %s: side input %q: window mapping fn %q is not implemented (the Go SDK's global, fixed and sliding mappings only)", ErrUnsupported, name, local, wm)
			}
		}
		if len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0 {
			if opts.Supported != nil && !opts.Supported[HeadStateful] {
				return fmt.Errorf("%w: %s: stateful DoFns (state or timers) are not implemented in this runner yet", ErrUnsupported, name)
			}
		}
	}
	return nil
}

// isStateful says whether t is a ParDo with user state or timers: it heads
// a HeadStateful stage.
func isStateful(t *pipepb.PTransform) bool {
	if t.GetSpec().GetUrn() != URNParDo {
		return false
	}
	pd := &pipepb.ParDoPayload{}
	if unmarshal(t.GetSpec().GetPayload(), pd) != nil {
		return false
	}
	return len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0
}

// mainInputs returns the PCollections of t's inputs that are not side inputs,
// sorted by local name; a Flatten may list one PCollection twice.
func mainInputs(t *pipepb.PTransform) []string {
	side := map[string]bool{}
	if t.GetSpec().GetUrn() == URNParDo {
		pd := &pipepb.ParDoPayload{}
		if unmarshal(t.GetSpec().GetPayload(), pd) == nil {
			for local := range pd.GetSideInputs() {
				side[local] = true
			}
		}
	}
	var out []string
	for _, local := range slices.Sorted(maps.Keys(t.GetInputs())) {
		if !side[local] {
			out = append(out, t.GetInputs()[local])
		}
	}
	return out
}

// topoSort orders leaves so every producer precedes its consumers; ties go
// to the smaller unique name. graphx.Marshal lists root transforms in a
// different order from run to run, so the walk order cannot break ties: the
// unique names are the same in every instance.
func topoSort(leaves []string, comps *pipepb.Components, producer map[string]string) ([]string, error) {
	name := func(id string) string { return comps.GetTransforms()[id].GetUniqueName() }
	indeg := map[string]int{}
	next := map[string][]string{}
	for _, id := range leaves {
		for _, pc := range allInputs(comps.GetTransforms()[id]) {
			up, ok := producer[pc]
			if !ok {
				return nil, fmt.Errorf("%w: no transform produces PCollection %s, an input of %q", ErrMalformed, pc, comps.GetTransforms()[id].GetUniqueName())
			}
			indeg[id]++
			next[up] = append(next[up], id)
		}
	}
	var ready, out []string
	for _, id := range leaves {
		if indeg[id] == 0 {
			ready = append(ready, id)
		}
	}
	for len(ready) > 0 {
		sort.Slice(ready, func(i, j int) bool { return name(ready[i]) < name(ready[j]) })
		id := ready[0]
		ready = ready[1:]
		out = append(out, id)
		for _, n := range next[id] {
			if indeg[n]--; indeg[n] == 0 {
				ready = append(ready, n)
			}
		}
	}
	if len(out) != len(leaves) {
		return nil, fmt.Errorf("%w: the transforms form a cycle", ErrMalformed)
	}
	return out, nil
}

func allInputs(t *pipepb.PTransform) []string {
	var out []string
	for _, local := range slices.Sorted(maps.Keys(t.GetInputs())) {
		out = append(out, t.GetInputs()[local])
	}
	return out
}

func sortedValues(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
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

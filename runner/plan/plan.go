package plan

import "errors"

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

// supports says whether o lets Build make a stage with head k (Supported
// is nil or has k).
func (o Options) supports(k HeadKind) bool { return o.Supported == nil || o.Supported[k] }

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
// (the input of a stage whose head reads one, HeadKind.UserTopic;
// KafkaSinks) are not internal.
func (p *Plan) Topics() map[string]int32 {
	out := map[string]int32{}
	for _, s := range p.Stages {
		if !s.Head.UserTopic() {
			out[s.InputTopic] = s.Partitions
		}
		for _, si := range s.SideInputs {
			out[si.Topic] = 1
		}
	}
	return out
}

// PurgedInput reports whether the records of s's input topic may be
// deleted once s's consumer group has committed past them (the runner's
// purge, stage.Config.PurgeInterval; Kafka Streams purges its repartition
// topics so). Every reader of an internal topic of the plan, found: a
// stage's input topic is read by that stage's consumer group alone (the
// topic is named after the stage); a side input topic by every instance
// of the reading stage, whole, from its start, never committing
// (stage/sideinput), so it is never purged (not an input topic); the
// report, plan, metrics and control topics are no data topics. So s's
// input is purged when it is an internal topic (not a user's,
// HeadKind.UserTopic) and s does something with its records: it has
// fused transforms, outputs or Kafka sinks. A stage that has none (a
// Reshuffle or GroupByKey whose output no transform reads) keeps its
// topic whole: the topic is then the only trace of that branch of the
// pipeline, read from outside the application as its output
// (cmd/commitactivity's KafkaOutput Reshuffle, the tests' last stages),
// and its retention is infinite like every data topic's.
func (s *Stage) PurgedInput() bool {
	if s.Head.UserTopic() {
		return false
	}
	return len(s.Transforms) > 0 || len(s.Outputs) > 0 || len(s.KafkaSinks) > 0
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

package runner

// Beam's cross-language Kafka transforms, expanded here, in Go.
//
// The Go SDK's github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio
// builds its Read and Write as external transforms (URNs
// beam:transform:org.apache.beam:kafka_read_without_metadata:v1 and
// …:kafka_write:v1) and asks an expansion service, normally Java's, to
// expand them while the pipeline is constructed (beam.CrossLanguage calls
// xlangx.Expand at once). The xlangx package lets a process answer that
// request itself: RegisterHandler binds a namespace to a HandlerFunc, and
// RegisterOverrideForUrn sends every request for a URN to it whatever
// expansion address the pipeline passed (unless the address is
// xlangx.Require(addr), "hardoverride:…", which the SDK honours before any
// override). This file registers both URNs to the handler "kafkastreams"
// from init, so importing this package is enough: no Java, no expansion
// service, no network.
//
// The handler decodes the transform's ExternalConfigurationPayload (a
// schema row; fields matched by name, case and underscores ignored, so the
// Go SDK's ConsumerConfig and Java's consumer_config both match), maps it
// onto runner/kafkaio options, builds kafkaio.Read or kafkaio.Write on a
// scratch pipeline with the Go SDK, marshals it with graphx, and answers
// with that composite and its components, every id suffixed so that it
// cannot collide with the user's pipeline. graphx.Marshal merges them into
// the pipeline in place of the external transform, so the plan sees the
// native Read's and Write's DoFns (plan.NativeSource, plan.NativeSink),
// exactly as for a pipeline written against runner/kafkaio. The scratch
// pipeline is the SDK's own encoding of those DoFns; building the protos by
// hand would duplicate graphx, and an in-process gRPC expansion service
// would add a port and an address for the same answer.
//
// What the configuration may hold is checked when the transform is built:
// anything this runner cannot honour is an error naming the option (the Go
// SDK panics with it, as it does for an expansion service's error), never
// silently dropped.

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/xlangx"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// ExpansionAddr is the expansion address of this runner's local expansion
// of Beam's cross-language Kafka transforms (an xlangx handler namespace).
// A pipeline may pass it to the xlang kafkaio.Read and kafkaio.Write, but
// it need not: both URNs are overridden to it in this process, so any
// address (empty, which would start Java's expansion service, or
// "localhost:8097", which would be dialled) expands here instead. Only
// xlangx.Require(addr) still reaches a real expansion service.
const ExpansionAddr = "kafkastreams"

// URNs of Beam's cross-language Kafka transforms expanded locally.
const (
	urnKafkaRead  = "beam:transform:org.apache.beam:kafka_read_without_metadata:v1"
	urnKafkaWrite = "beam:transform:org.apache.beam:kafka_write:v1"
)

// The Java (de)serializers whose records are KV<[]byte, []byte>.
const (
	byteArrayDeserializer = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
	byteArraySerializer   = "org.apache.kafka.common.serialization.ByteArraySerializer"
)

func init() {
	xlangx.RegisterHandler(ExpansionAddr, expandKafka)
	xlangx.RegisterOverrideForUrn(urnKafkaRead, ExpansionAddr)
	xlangx.RegisterOverrideForUrn(urnKafkaWrite, ExpansionAddr)
	register.Function2x0(xlangWriteInput)
	register.Emitter2[[]byte, []byte]()
}

// expandKafka is the xlangx.HandlerFunc of ExpansionAddr.
func expandKafka(_ context.Context, p *xlangx.HandlerParams) (*jobpb.ExpansionResponse, error) {
	switch urn := p.Req.GetTransform().GetSpec().GetUrn(); urn {
	case urnKafkaRead:
		return expandKafkaRead(p)
	case urnKafkaWrite:
		return expandKafkaWrite(p)
	default:
		return nil, fmt.Errorf("kafkastreams: expansion address %q expands only Beam's cross-language Kafka read and write (%s, %s), not %s", ExpansionAddr, urnKafkaRead, urnKafkaWrite, urn)
	}
}

// xlangRead is what a kafka_read_without_metadata configuration says, in
// runner/kafkaio terms.
type xlangRead struct {
	topics []string
	opts   []kafkaio.Option
}

// consumerPassThrough are the Java consumer properties with a librdkafka
// property of the same meaning (the value is librdkafka's name), passed to
// the source stage's consumer: tuning only. Security settings are not
// here: every client of the runner needs them, so they go in
// --kafka_property.
var consumerPassThrough = map[string]string{
	"client.id":                 "client.id",
	"client.rack":               "client.rack",
	"fetch.min.bytes":           "fetch.min.bytes",
	"fetch.max.bytes":           "fetch.max.bytes",
	"fetch.max.wait.ms":         "fetch.wait.max.ms",
	"max.partition.fetch.bytes": "max.partition.fetch.bytes",
	"session.timeout.ms":        "session.timeout.ms",
	"heartbeat.interval.ms":     "heartbeat.interval.ms",
	"max.poll.interval.ms":      "max.poll.interval.ms",
}

// parseXlangRead maps a kafka_read_without_metadata payload onto
// kafkaio.Read options, or names what this runner cannot do.
//
// Defaults are Java KafkaIO's, since the configuration is a Java consumer's:
// without auto.offset.reset a partition with no committed offset starts at
// its end (KafkaIO sets "latest"), and without isolation.level the read is
// read_uncommitted (the Kafka consumer's default; KafkaIO keeps it).
func parseXlangRead(payload []byte) (xlangRead, error) {
	fields, err := decodeXlangPayload(payload)
	if err != nil {
		return xlangRead{}, err
	}
	var r xlangRead
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("kafkastreams: Beam's cross-language Kafka read: %s: %s", field, fmt.Sprintf(format, args...))
	}
	// ConsumerPollingTimeout tunes Java's poll loop and means nothing here;
	// RedistributeNumKeys and AllowDuplicates only matter with Redistribute.
	if u := fields.unknownFields("ConsumerConfig", "Topics", "KeyDeserializer", "ValueDeserializer", "StartReadTime", "StopReadTime", "MaxNumRecords", "MaxReadTime", "CommitOffsetInFinalize", "ConsumerPollingTimeout", "TimestampPolicy", "Redistribute", "RedistributeNumKeys", "AllowDuplicates"); len(u) > 0 {
		return r, bad(strings.Join(u, ", "), "not known to this runner's expansion")
	}
	r.topics = fields.strings("Topics")
	if len(r.topics) == 0 {
		return r, bad(fields.name("Topics"), "no topic")
	}
	for _, f := range []string{"KeyDeserializer", "ValueDeserializer"} {
		if v := fields.string(f); v != "" && v != byteArrayDeserializer {
			return r, bad(fields.name(f), "%q is not supported: this runner reads keys and values as bytes (%s only); decode them in a ParDo", v, byteArrayDeserializer)
		}
	}
	if fields.set("StopReadTime") {
		return r, bad(fields.name("StopReadTime"), "not supported: this runner's Kafka source never stops at a time (kafkaio.Bounded() stops at the end offsets seen at start)")
	}
	startAt := fields.set("StartReadTime")
	if startAt {
		v := fields.value("StartReadTime")
		if !v.CanInt() || v.Int() < 0 {
			return r, bad(fields.name("StartReadTime"), "%v: want milliseconds since the Unix epoch", v)
		}
		r.opts = append(r.opts, kafkaio.WithStartAt(time.UnixMilli(v.Int())))
	}
	for _, f := range []string{"MaxNumRecords", "MaxReadTime"} {
		if fields.set(f) {
			return r, bad(fields.name(f), "not supported: this runner reads Kafka topics unbounded (a bounded read runs on Prism with runner/kafkaio.Bounded())")
		}
	}
	if fields.bool("CommitOffsetInFinalize") {
		return r, bad(fields.name("CommitOffsetInFinalize"), "not supported: this runner commits the source's offsets itself, in its own Kafka transactions, under the consumer group <application_id>.<stage>, not under the read's group.id")
	}
	if fields.bool("Redistribute") {
		return r, bad(fields.name("Redistribute"), "not supported: a Kafka source stage has one task per partition")
	}
	switch tp := fields.string("TimestampPolicy"); tp {
	case "CreateTime", "LogAppendTime":
		// Each record's event time is its Kafka timestamp, the watermark the
		// largest read minus 0 (Java's withCreateTime(Duration.ZERO)).
		r.opts = append(r.opts, kafkaio.WithBoundedOutOfOrderness(0))
	case "":
		return r, bad(fields.name("TimestampPolicy"), "missing: want CreateTime or LogAppendTime")
	case "ProcessingTime":
		return r, bad(fields.name("TimestampPolicy"), "ProcessingTime (the Go SDK's default) is not supported: this runner gives each record its Kafka timestamp as event time; pass kafkaio.TimestampPolicy(kafkaio.CreateTime) or LogAppendTime")
	default:
		return r, bad(fields.name("TimestampPolicy"), "%q: want CreateTime or LogAppendTime", tp)
	}
	cfg := fields.stringMap("ConsumerConfig")
	start, isolation := kafkaio.Latest, "read_uncommitted"
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		v := cfg[k]
		field := fields.name("ConsumerConfig") + "[" + k + "]"
		switch k {
		case "bootstrap.servers":
			r.opts = append(r.opts, kafkaio.WithBootstrapServers(v))
		case "auto.offset.reset":
			if v != kafkaio.Earliest && v != kafkaio.Latest {
				return r, bad(field, "%q: want earliest or latest", v)
			}
			start = v
		case "isolation.level":
			if v != "read_committed" && v != "read_uncommitted" {
				return r, bad(field, "%q: want read_committed or read_uncommitted", v)
			}
			isolation = v
		case "enable.auto.commit":
			if v != "false" {
				return r, bad(field, "%q is not supported: this runner commits the source's offsets in its own Kafka transactions (only false)", v)
			}
		case "key.deserializer", "value.deserializer":
			if v != byteArrayDeserializer {
				return r, bad(field, "%q is not supported (%s only)", v, byteArrayDeserializer)
			}
		case "group.id":
			return r, bad(field, "not supported: this runner keeps the source's offsets under its own consumer group, <application_id>.<stage>, committed in its transactions")
		default:
			name, ok := consumerPassThrough[k]
			if !ok {
				return r, bad(field, "not supported by this runner's Kafka source (supported: bootstrap.servers, auto.offset.reset, isolation.level, enable.auto.commit=false, key/value.deserializer=ByteArrayDeserializer, %s); client and security settings go in the runner's --kafka_property, which every client uses", strings.Join(slices.Sorted(maps.Keys(consumerPassThrough)), ", "))
			}
			r.opts = append(r.opts, kafkaio.WithProperty(name, v))
		}
	}
	if !startAt { // StartReadTime wins over auto.offset.reset, as in Java's KafkaIO
		r.opts = append(r.opts, kafkaio.WithStart(start))
	}
	if isolation == "read_uncommitted" {
		r.opts = append(r.opts, kafkaio.WithReadUncommitted())
	}
	return r, nil
}

// xlangWrite is what a kafka_write configuration says, in runner/kafkaio
// terms.
type xlangWrite struct {
	topic string
	opts  []kafkaio.Option
}

// parseXlangWrite maps a kafka_write payload onto kafkaio.Write options, or
// names what this runner cannot do.
func parseXlangWrite(payload []byte) (xlangWrite, error) {
	fields, err := decodeXlangPayload(payload)
	if err != nil {
		return xlangWrite{}, err
	}
	var w xlangWrite
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("kafkastreams: Beam's cross-language Kafka write: %s: %s", field, fmt.Sprintf(format, args...))
	}
	if u := fields.unknownFields("ProducerConfig", "Topic", "KeySerializer", "ValueSerializer"); len(u) > 0 {
		return w, bad(strings.Join(u, ", "), "not known to this runner's expansion")
	}
	w.topic = fields.string("Topic")
	if strings.TrimSpace(w.topic) == "" {
		return w, bad(fields.name("Topic"), "empty topic name")
	}
	for _, f := range []string{"KeySerializer", "ValueSerializer"} {
		if v := fields.string(f); v != "" && v != byteArraySerializer {
			return w, bad(fields.name(f), "%q is not supported: this runner writes keys and values as bytes (%s only); encode them in a ParDo", v, byteArraySerializer)
		}
	}
	cfg := fields.stringMap("ProducerConfig")
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		v := cfg[k]
		field := fields.name("ProducerConfig") + "[" + k + "]"
		switch k {
		case "bootstrap.servers":
			w.opts = append(w.opts, kafkaio.WithBootstrapServers(v))
		case "key.serializer", "value.serializer":
			if v != byteArraySerializer {
				return w, bad(field, "%q is not supported (%s only)", v, byteArraySerializer)
			}
		case "acks":
			if v != "all" && v != "-1" {
				return w, bad(field, "%q is not supported: the records are written in Kafka transactions (acks=all)", v)
			}
		case "enable.idempotence":
			if v != "true" {
				return w, bad(field, "%q is not supported: the records are written in Kafka transactions (idempotent)", v)
			}
		default:
			return w, bad(field, "not supported: this runner writes the records with the transactional producer of the stage that computes them, configured by the runner (supported here: bootstrap.servers, key/value.serializer=ByteArraySerializer, acks=all, enable.idempotence=true); client and security settings go in --kafka_property")
		}
	}
	return w, nil
}

// expandKafkaRead expands a kafka_read_without_metadata into kafkaio.Read.
func expandKafkaRead(p *xlangx.HandlerParams) (*jobpb.ExpansionResponse, error) {
	r, err := parseXlangRead(p.Req.GetTransform().GetSpec().GetPayload())
	if err != nil {
		return nil, err
	}
	if n := len(p.Req.GetTransform().GetInputs()); n != 0 {
		return nil, fmt.Errorf("kafkastreams: Beam's cross-language Kafka read has %d inputs, want none", n)
	}
	pb, err := scratchPipeline(func(s beam.Scope) { kafkaio.ReadTopics(s, r.topics, r.opts...) })
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: Beam's cross-language Kafka read of %q: %w", r.topics, err)
	}
	return expansionOf(pb, "kafkaio.Read(", "", nil)
}

// expandKafkaWrite expands a kafka_write into kafkaio.Write.
func expandKafkaWrite(p *xlangx.HandlerParams) (*jobpb.ExpansionResponse, error) {
	w, err := parseXlangWrite(p.Req.GetTransform().GetSpec().GetPayload())
	if err != nil {
		return nil, err
	}
	ins := p.Inputs()
	if len(ins) != 1 || len(p.Req.GetTransform().GetInputs()) != 1 {
		return nil, fmt.Errorf("kafkastreams: Beam's cross-language Kafka write to %q has %d inputs, want 1", w.topic, len(ins))
	}
	if c := ins[0].Coder; c == nil || c.Kind != coder.KV || len(c.Components) != 2 || c.Components[0].Kind != coder.Bytes || c.Components[1].Kind != coder.Bytes {
		return nil, fmt.Errorf("kafkastreams: Beam's cross-language Kafka write to %q: its input is a PCollection of %v; with ByteArraySerializer keys and values it must be KV<[]byte, []byte>", w.topic, c)
	}
	var placeholder string
	pb, err := scratchPipeline(func(s beam.Scope) {
		kafkaio.Write(s, w.topic, beam.ParDo(s, xlangWriteInput, beam.Impulse(s)), w.opts...)
	})
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: Beam's cross-language Kafka write to %q: %w", w.topic, err)
	}
	for _, t := range pb.GetComponents().GetTransforms() {
		if strings.Contains(t.GetUniqueName(), "xlangWriteInput") {
			for _, pc := range t.GetOutputs() {
				placeholder = pc
			}
		}
	}
	if placeholder == "" {
		return nil, fmt.Errorf("kafkastreams: Beam's cross-language Kafka write to %q: the scratch pipeline has no input PCollection", w.topic)
	}
	return expansionOf(pb, "kafkaio.Write(", placeholder, p.Req.GetTransform().GetInputs())
}

// xlangWriteInput stands for the user's PCollection in the scratch pipeline
// of a write: its transform is dropped from the expansion, never run.
func xlangWriteInput(_ []byte, _ func([]byte, []byte)) {}

// scratchPipeline builds a pipeline with build (which may panic, as Beam
// transforms do on bad arguments) and marshals it with no environment, so
// that its transforms name the Go SDK's default environment, "go", which
// graphx.Marshal keeps the user's pipeline's.
func scratchPipeline(build func(beam.Scope)) (pb *pipepb.Pipeline, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p, s := beam.NewPipelineWithRoot()
	build(s)
	edges, _, err := p.Build()
	if err != nil {
		return nil, err
	}
	return graphx.Marshal(edges, &graphx.Options{})
}

var xlangExpansions struct {
	sync.Mutex
	n     int            // expansions so far: the id suffix
	names map[string]int // composite names given so far, with their count
}

// expansionOf answers with the root composite of pb whose unique name
// starts with prefix, and its components. Every id gets the suffix
// "@kafkastreams<n>", n counting this process's expansions (so the same
// program builds the same ids in every instance, unlike a random
// namespace); the composite keeps its name ("kafkaio.Read(topic)"), with
// the Go SDK's "'k" when an earlier expansion of this process took it.
// placeholder, if not empty, is the PCollection of pb that stands for the
// user's (a write's input), and ins are the external transform's inputs
// (one): its PCollection replaces placeholder.
func expansionOf(pb *pipepb.Pipeline, prefix, placeholder string, ins map[string]string) (*jobpb.ExpansionResponse, error) {
	comps := pb.GetComponents()
	var root string
	for _, id := range pb.GetRootTransformIds() {
		if strings.HasPrefix(comps.GetTransforms()[id].GetUniqueName(), prefix) {
			root = id
		}
	}
	if root == "" {
		return nil, fmt.Errorf("kafkastreams: no %s…) composite in the scratch pipeline", prefix)
	}
	var inID string
	for _, v := range ins {
		inID = v
	}

	xlangExpansions.Lock()
	xlangExpansions.n++
	suffix := fmt.Sprintf("@kafkastreams%d", xlangExpansions.n)
	oldName := comps.GetTransforms()[root].GetUniqueName()
	newName := oldName
	if xlangExpansions.names == nil {
		xlangExpansions.names = map[string]int{}
	}
	if k := xlangExpansions.names[oldName]; k > 0 {
		newName = fmt.Sprintf("%s'%d", oldName, k)
	}
	xlangExpansions.names[oldName]++
	xlangExpansions.Unlock()

	id := func(s string) string {
		if s == "" {
			return ""
		}
		return s + suffix
	}
	pcol := func(pc string) string {
		if placeholder != "" && pc == placeholder {
			return inID
		}
		return id(pc)
	}
	out := &pipepb.Components{
		Transforms:          map[string]*pipepb.PTransform{},
		Pcollections:        map[string]*pipepb.PCollection{},
		WindowingStrategies: map[string]*pipepb.WindowingStrategy{},
		Coders:              map[string]*pipepb.Coder{},
	}
	var addCoder func(cid string) error
	addCoder = func(cid string) error {
		if _, ok := out.Coders[id(cid)]; ok || cid == "" {
			return nil
		}
		c, ok := comps.GetCoders()[cid]
		if !ok {
			return fmt.Errorf("kafkastreams: scratch pipeline: coder %s is missing", cid)
		}
		c = proto.Clone(c).(*pipepb.Coder)
		for i, cc := range c.GetComponentCoderIds() {
			if err := addCoder(cc); err != nil {
				return err
			}
			c.ComponentCoderIds[i] = id(cc)
		}
		out.Coders[id(cid)] = c
		return nil
	}
	addPCollection := func(pc string) error {
		if placeholder != "" && pc == placeholder {
			return nil
		}
		if _, ok := out.Pcollections[id(pc)]; ok {
			return nil
		}
		c, ok := comps.GetPcollections()[pc]
		if !ok {
			return fmt.Errorf("kafkastreams: scratch pipeline: PCollection %s is missing", pc)
		}
		c = proto.Clone(c).(*pipepb.PCollection)
		c.UniqueName = id(pc)
		if err := addCoder(c.GetCoderId()); err != nil {
			return err
		}
		c.CoderId = id(c.GetCoderId())
		wsID := c.GetWindowingStrategyId()
		if _, ok := out.WindowingStrategies[id(wsID)]; !ok {
			ws, ok := comps.GetWindowingStrategies()[wsID]
			if !ok {
				return fmt.Errorf("kafkastreams: scratch pipeline: windowing strategy %s is missing", wsID)
			}
			ws = proto.Clone(ws).(*pipepb.WindowingStrategy)
			if err := addCoder(ws.GetWindowCoderId()); err != nil {
				return err
			}
			ws.WindowCoderId = id(ws.GetWindowCoderId())
			out.WindowingStrategies[id(wsID)] = ws
		}
		c.WindowingStrategyId = id(wsID)
		out.Pcollections[id(pc)] = c
		return nil
	}
	var rootT *pipepb.PTransform
	var walk func(tid string) error
	walk = func(tid string) error {
		t, ok := comps.GetTransforms()[tid]
		if !ok {
			return fmt.Errorf("kafkastreams: scratch pipeline: transform %s is missing", tid)
		}
		t = proto.Clone(t).(*pipepb.PTransform)
		if t.GetSpec().GetUrn() == plan.URNParDo {
			pd := &pipepb.ParDoPayload{}
			if err := proto.Unmarshal(t.GetSpec().GetPayload(), pd); err != nil {
				return fmt.Errorf("kafkastreams: scratch pipeline: %s: %w", t.GetUniqueName(), err)
			}
			// The payload names no PCollection that would need the
			// suffix: the native DoFns have no side inputs, state or
			// timers. It names one coder: the restriction coder of the
			// unbounded Read's splittable DoFn (what other runners run).
			if len(pd.GetSideInputs()) > 0 || len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0 {
				return fmt.Errorf("kafkastreams: scratch pipeline: %s has side inputs, state or timers", t.GetUniqueName())
			}
			if rc := pd.GetRestrictionCoderId(); rc != "" {
				if err := addCoder(rc); err != nil {
					return err
				}
				pd.RestrictionCoderId = id(rc)
				b, err := proto.Marshal(pd)
				if err != nil {
					return fmt.Errorf("kafkastreams: scratch pipeline: %s: %w", t.GetUniqueName(), err)
				}
				t.Spec.Payload = b
			}
		}
		t.UniqueName = newName + strings.TrimPrefix(t.GetUniqueName(), oldName)
		for _, m := range []map[string]string{t.GetInputs(), t.GetOutputs()} {
			for local, pc := range m {
				if err := addPCollection(pc); err != nil {
					return err
				}
				m[local] = pcol(pc)
			}
		}
		for i, sub := range t.GetSubtransforms() {
			if err := walk(sub); err != nil {
				return err
			}
			t.Subtransforms[i] = id(sub)
		}
		if tid == root {
			rootT = t
			return nil
		}
		out.Transforms[id(tid)] = t
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	if len(ins) > 0 {
		rootT.Inputs = map[string]string{}
		for k, v := range ins {
			rootT.Inputs[k] = v
		}
	}
	// Every PCollection the expansion reads must be its own or the user's.
	for _, t := range out.Transforms {
		for _, pc := range t.GetInputs() {
			if _, ok := out.Pcollections[pc]; !ok && pc != inID {
				return nil, fmt.Errorf("kafkastreams: scratch pipeline: %s reads %s, produced outside the expansion", t.GetUniqueName(), pc)
			}
		}
	}
	return &jobpb.ExpansionResponse{Components: out, Transform: rootT, Requirements: pb.GetRequirements()}, nil
}

// xlangFields are the fields of an ExternalConfigurationPayload's row, by
// normalised name (lower case, no underscores).
type xlangFields struct {
	vals  map[string]reflect.Value
	names map[string]string // normalised -> as the payload names it
}

func normField(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// decodeXlangPayload decodes an ExternalConfigurationPayload with the
// schema it carries (xlangx.DecodeStructPayload).
func decodeXlangPayload(payload []byte) (xlangFields, error) {
	f := xlangFields{vals: map[string]reflect.Value{}, names: map[string]string{}}
	v, err := xlangx.DecodeStructPayload(payload)
	if err != nil {
		return f, fmt.Errorf("kafkastreams: the cross-language Kafka transform's configuration does not decode: %w", err)
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return f, fmt.Errorf("kafkastreams: the cross-language Kafka transform's configuration is a %T, want a row", v)
	}
	for i := 0; i < rv.NumField(); i++ {
		n := rv.Type().Field(i).Name
		f.vals[normField(n)] = rv.Field(i)
		f.names[normField(n)] = n
	}
	return f, nil
}

// name is field as the payload names it (the Go SDK's ConsumerConfig,
// Python's consumer_config), or field itself if absent.
func (f xlangFields) name(field string) string {
	if n, ok := f.names[normField(field)]; ok {
		return n
	}
	return field
}

// value is field, its pointers followed; invalid if absent or nil.
func (f xlangFields) value(field string) reflect.Value {
	v := f.vals[normField(field)]
	for v.IsValid() && (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

// set says whether field is present and not null.
func (f xlangFields) set(field string) bool { return f.value(field).IsValid() }

func (f xlangFields) string(field string) string {
	if v := f.value(field); v.IsValid() && v.Kind() == reflect.String {
		return v.String()
	}
	return ""
}

func (f xlangFields) bool(field string) bool {
	v := f.value(field)
	return v.IsValid() && v.Kind() == reflect.Bool && v.Bool()
}

func (f xlangFields) strings(field string) []string {
	v := f.value(field)
	if !v.IsValid() || (v.Kind() != reflect.Slice && v.Kind() != reflect.Array) {
		return nil
	}
	out := make([]string, 0, v.Len())
	for i := 0; i < v.Len(); i++ {
		e := v.Index(i)
		for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
			e = e.Elem()
		}
		out = append(out, fmt.Sprint(e.Interface()))
	}
	return out
}

func (f xlangFields) stringMap(field string) map[string]string {
	v := f.value(field)
	out := map[string]string{}
	if !v.IsValid() || v.Kind() != reflect.Map {
		return out
	}
	it := v.MapRange()
	for it.Next() {
		out[fmt.Sprint(it.Key().Interface())] = fmt.Sprint(it.Value().Interface())
	}
	return out
}

// unknownFields lists the fields of f set to a non-zero value that are not
// in known, sorted: options this runner does not know and must not ignore.
func (f xlangFields) unknownFields(known ...string) []string {
	k := map[string]bool{}
	for _, n := range known {
		k[normField(n)] = true
	}
	var out []string
	for n, v := range f.vals {
		if !k[n] && v.IsValid() && !v.IsZero() {
			out = append(out, f.names[n])
		}
	}
	sort.Strings(out)
	return out
}

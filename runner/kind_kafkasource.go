package runner

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/kafkasource"
	"github.com/kafkastreams/kafkastreams/stage/kafkasource/sourcehead"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// The Kafka source kind (plan.HeadKafkaSource): a kafkaio.Read heads a
// stage whose input topic is the user's, read directly (stage/kafkasource):
// one task per partition of it, the count the broker's, which may grow
// while the job runs; the records become elements with the source's
// watermark strategy.
func init() { registerKind(plan.HeadKafkaSource, kafkaSourceKind{}) }

// kafkaSourceKind is plan.HeadKafkaSource's kind.
type kafkaSourceKind struct{}

// check reads the source's kafkaio.Config and refuses a config or
// watermark strategy that does not validate, a source on another cluster
// than the runner's, and noWatermarks with an event-time operator
// downstream (checkNoWatermarks). It warns when the source's idleness is
// off.
func (kafkaSourceKind) check(e *checkEnv, s *plan.Stage) (stageHead, error) {
	c, ok := kafkaio.SourceConfig(plan.NativeDoFn(e.comps.GetTransforms()[s.HeadTransform]))
	if !ok {
		return nil, fmt.Errorf("kafkastreams: stage %s: %q is not a kafkaio.Read", s.Name, s.HeadUniqueName)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("kafkastreams: %s: %w", s.HeadUniqueName, err)
	}
	st := strategyOf(c, e.o.DefaultIdleness)
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("kafkastreams: %s: %w", s.HeadUniqueName, err)
	}
	if bootstrap := e.o.BootstrapServers; c.BootstrapServers != "" && c.BootstrapServers != bootstrap {
		return nil, fmt.Errorf("kafkastreams: %s: bootstrap servers %q (WithBootstrapServers, or the servers of Beam's cross-language kafkaio.Read): a source on another cluster than the runner's --bootstrap_servers (%s) is not supported (the stage's offsets commit in the runner's transactions)", s.HeadUniqueName, c.BootstrapServers, bootstrap)
	}
	if c.Watermark.Kind == kafkaio.NoWatermarks {
		if err := checkNoWatermarks(e.comps, e.pl, s); err != nil {
			return nil, err
		}
	}
	if st.Idleness == 0 && c.Watermark.Kind != kafkaio.LimitedDelay { // a limited delay has no idleness: its quiet partitions follow the wall clock
		e.log.Warn("kafkastreams: a Kafka source has idleness off: a partition that goes quiet holds the watermark of everything downstream until it gets a record again (set kafkaio.WithIdleness, or --default_idleness)", "stage", s.Name, "topic", c.Topics[0])
	}
	return &kafkaSourceStage{s: s, c: c}, nil
}

// kafkaSourceStage is a checked Kafka source stage and its config.
type kafkaSourceStage struct {
	s *plan.Stage
	c kafkaio.Config
}

// needs are the source's topic and its dead-letter topic, if any: users'
// topics, which must exist.
func (ks *kafkaSourceStage) needs() stageNeeds {
	users := map[string]string{ks.s.InputTopic: fmt.Sprintf("the Kafka read %q (stage %s)", ks.s.HeadUniqueName, ks.s.Name)}
	if t := ks.c.DeadLetterTopic; t != "" {
		users[t] = fmt.Sprintf("the dead-letter topic of the Kafka read %q", ks.s.HeadUniqueName)
	}
	return stageNeeds{users: users, properties: ks.c.Properties}
}

// build builds the head (newKafkaSourceHead: a bounded read asks the
// broker for its end offsets now), the source's consumer settings and
// its share of kafkastreams_source_bad_records_total.
func (ks *kafkaSourceStage) build(ctx context.Context, e *buildEnv) (builtHead, error) {
	s, c := ks.s, ks.c
	badRecords := e.sharedCollector("kafkastreams_source_bad_records_total", func() prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kafkastreams_source_bad_records_total",
			Help: "Records of a Kafka source whose event time the timestamp function could not give (kafkaio.WithTimestampFn): skipped, and written to the dead-letter topic if there is one.",
		}, []string{"stage", "topic", "partition"})
	}).(*prometheus.CounterVec)
	bad := badRecords.MustCurryWith(prometheus.Labels{"stage": s.Name, "topic": s.InputTopic})
	var gmin func(map[int32]bool) (mtime.Time, bool)
	if g := c.Watermark.AlignmentGroup; g != "" {
		gmin = groupMin(e.tracker, s.Name, alignmentGroup(e.heads, g))
	}
	h, err := newKafkaSourceHead(ctx, e.comps, s, c, e.o.DefaultIdleness, e.o.BootstrapServers, e.o.KafkaProperties, e.log, func(p int32, n int) {
		bad.WithLabelValues(fmt.Sprint(p)).Add(float64(n))
	}, gmin)
	if err != nil {
		return builtHead{}, err
	}
	b := builtHead{head: h, partitions: e.users[s.InputTopic], growing: true, consumer: map[string]string{
		// The loop finds new partitions of the topic within
		// stage.PartitionCheck and its reports carry the new count; the
		// group assigns them once a member's consumer sees them (its
		// metadata refresh, librdkafka's default 5 min; the loop asks
		// through an admin client of its own).
		"topic.metadata.refresh.interval.ms": "10000",
	}}
	for k, v := range c.Properties {
		b.consumer[k] = v
	}
	switch c.Start {
	case kafkaio.Latest:
		b.consumer["auto.offset.reset"] = "latest"
	case kafkaio.AtTimestamp:
		b.startAt = time.UnixMilli(c.StartAtMs)
	}
	if c.ReadUncommitted {
		b.consumer["isolation.level"] = "read_uncommitted"
	}
	// Partition EOFs tell the head a partition has no backlog (only then
	// may it idle) and where a bounded read ends.
	b.consumer["enable.partition.eof"] = "true"
	return b, nil
}

// strategyOf is the watermark strategy of source c, with the runner's
// default idleness (ms; 0: off) where c sets none (but for LimitedDelay,
// which has none: Beam Java's CustomTimestampPolicyWithLimitedDelay, whose
// delay is MaxOutOfOrderness).
func strategyOf(c kafkaio.Config, defaultIdleness time.Duration) kafkasource.Strategy {
	st := kafkasource.Strategy{Kind: kafkasource.BoundedOutOfOrderness, MaxOutOfOrderness: time.Duration(c.Watermark.MaxOutOfOrdernessMs) * time.Millisecond}
	switch c.Watermark.Kind {
	case kafkaio.MonotonousTimestamps:
		st.Kind = kafkasource.Monotonous
	case kafkaio.NoWatermarks:
		st.Kind = kafkasource.NoWatermarks
	case kafkaio.LimitedDelay:
		st.Kind = kafkasource.LimitedDelay
	}
	switch {
	case st.Kind == kafkasource.LimitedDelay:
		// No idleness (Config.Validate refuses one set): a quiet
		// partition follows the wall clock less the delay instead.
	case c.Watermark.IdlenessMs > 0:
		st.Idleness = time.Duration(c.Watermark.IdlenessMs) * time.Millisecond
	case c.Watermark.IdlenessMs == 0:
		st.Idleness = defaultIdleness
	}
	if c.Watermark.AlignmentGroup != "" {
		st.AlignmentGroup = c.Watermark.AlignmentGroup
		st.MaxDrift = time.Duration(c.Watermark.MaxDriftMs) * time.Millisecond
	}
	return st
}

// checkNoWatermarks refuses source src, which has noWatermarks, when an
// event-time operator is downstream of it (seed 002, "the noWatermarks()
// trap": its partitions would sit in the minimum at the start of time
// while they deliver, and nothing would ever fire): a GroupByKey (or
// Combine) in non-global windows or with allowed lateness, or a stateful
// ParDo with event-time timers. The error names the source and the
// operator.
func checkNoWatermarks(comps *pipepb.Components, pl *plan.Plan, src *plan.Stage) error {
	consumers := map[string][]*plan.Stage{}
	for _, s := range pl.Stages {
		for _, o := range s.Outputs {
			for _, t := range o.Topics {
				if c := pl.Consumer(t); c != nil {
					consumers[s.Name] = append(consumers[s.Name], c)
				}
			}
		}
	}
	seen := map[string]bool{}
	todo := append([]*plan.Stage(nil), consumers[src.Name]...)
	for len(todo) > 0 {
		s := todo[0]
		todo = todo[1:]
		if seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		var why string
		if w, ok := kinds[s.Head].(eventTimeWaiter); ok {
			why = w.waitsOnEventTime(comps, s)
		}
		if why != "" {
			return fmt.Errorf("kafkastreams: %s uses kafkaio.WithNoWatermarks(), but %s %q is downstream of it (stage %s): its watermark would stay at the start of time and nothing there would ever fire; use kafkaio.WithMonotonousTimestamps() or WithBoundedOutOfOrderness (seed 002: the noWatermarks() trap)",
				src.HeadUniqueName, why, s.HeadUniqueName, s.Name)
		}
		todo = append(todo, consumers[s.Name]...)
	}
	return nil
}

// eventTimeWaiter is a head kind some of whose stages wait for the
// watermark (a windowed GroupByKey, event-time timers): a source that
// makes no watermark (kafkaio.WithNoWatermarks) upstream of them is
// refused (seed 002: the noWatermarks() trap).
type eventTimeWaiter interface {
	// waitsOnEventTime says what in stage s (of this kind) waits for the
	// watermark, as the error names it ("the windowed GroupByKey"), or ""
	// if nothing does.
	waitsOnEventTime(comps *pipepb.Components, s *plan.Stage) string
}

// newKafkaSourceHead builds the head of Kafka source stage s: elements
// KV<[]byte, []byte> (kafkaio.Read) or kafkaio.KafkaRecord
// (kafkaio.ReadRecords) in the global window at the record's timestamp,
// encoded with the coder of the stage's head output.
func newKafkaSourceHead(ctx context.Context, comps *pipepb.Components, s *plan.Stage, c kafkaio.Config, defaultIdleness time.Duration, bootstrap string, props map[string]string, log *slog.Logger, bad func(p int32, n int), groupMin func(map[int32]bool) (mtime.Time, bool)) (*sourcehead.Head, error) {
	col := comps.GetPcollections()[s.HeadOutput]
	cu := graphx.NewCoderUnmarshaller(comps.GetCoders())
	ec, err := cu.Coder(col.GetCoderId())
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: stage %s: coder of %s: %w", s.Name, s.HeadOutput, err)
	}
	// records: a kafkaio.ReadRecords, whose elements are whole records
	// (kafkaio.KafkaRecord, its own coder); else a Read's KV<[]byte, []byte>.
	records := ec.Kind != coder.KV
	if records && (ec.T == nil || ec.T.Type() != reflect.TypeOf(kafkaio.KafkaRecord{})) {
		return nil, fmt.Errorf("kafkastreams: stage %s: %s's elements are %v: want KV<[]byte, []byte> (kafkaio.Read) or kafkaio.KafkaRecord (kafkaio.ReadRecords)", s.Name, s.HeadOutput, ec)
	}
	st := strategyOf(c, defaultIdleness)
	var ends map[int32]int64
	if c.Bounded {
		if ends, err = boundedEnds(ctx, bootstrap, props, s.InputTopic); err != nil {
			return nil, fmt.Errorf("kafkastreams: %s: end offsets of a bounded read: %w", s.HeadUniqueName, err)
		}
		log.Info("kafkastreams: bounded Kafka read: it stops at these end offsets", "stage", s.Name, "topic", s.InputTopic, "ends", ends)
	}
	h, err := sourcehead.NewHead(sourcehead.HeadConfig{
		Ends:            ends,
		Timestamp:       timestampOf(c),
		DeadLetterTopic: c.DeadLetterTopic,
		BadRecords:      bad,
		GroupMin:        groupMin,
		Stage:           s.Name,
		Topic:           s.InputTopic,
		Strategy:        st,
		Logger:          log,
		Encode:          newSourceEncoder(ec, records, s.InputTopic).encode,
	})
	if err != nil {
		return nil, err
	}
	log.Info("kafkastreams: Kafka source stage", "stage", s.Name, "topic", s.InputTopic, "read", s.HeadUniqueName, "watermark", c.Watermark.Kind, "max_out_of_orderness_ms", c.Watermark.MaxOutOfOrdernessMs, "idleness", st.Idleness, "config", c.String())
	return h, nil
}

// sourceEncoder encodes a Kafka source stage's elements
// (sourcehead.HeadConfig.Encode): KV<key, value> (kafkaio.Read) or the
// whole record (records: kafkaio.ReadRecords, topic its topic) in the
// global window, with enc, the head output's windowed value encoder, or
// on the bytesKV path.
//
// Each element is appended to a shared chunk of sourceChunkBytes and
// returned as a slice of it: one allocation per chunk instead of a buffer
// and its growth per record (encoding took 17% of a windowed sum's
// source stage loop's CPU, most of it allocating: 6 allocations and
// 626 ns per record against 1 and 152 ns, BenchmarkSourceEncoder). A
// returned slice is never written again: a chunk is only appended to,
// and one too full is left to the elements in it (the garbage collector
// frees it with them). Not safe for concurrent use: the step calls a
// head's Element, and so encode, from its stage loop's goroutine
// (step.Head).
type sourceEncoder struct {
	enc     exec.ElementEncoder
	records bool
	topic   string
	fv      exec.FullValue
	chunk   chunkWriter
	// bytesKV, for a KV of two bytes coders (kafkaio.Read's), encodes
	// the windowed value's header with win and the key and value with
	// coder.EncodeBytes, as enc would, without a FullValue (whose
	// interface fields cost two allocations per record).
	bytesKV bool
	win     exec.WindowEncoder
}

// newSourceEncoder is the sourceEncoder of elements of coder ec (not
// windowed) in the global window; records, topic as sourceEncoder's.
func newSourceEncoder(ec *coder.Coder, records bool, topic string) *sourceEncoder {
	wc := coder.NewGlobalWindow()
	e := &sourceEncoder{enc: exec.MakeElementEncoder(coder.NewW(ec, wc)), records: records, topic: topic}
	if !records && ec.Kind == coder.KV && len(ec.Components) == 2 && ec.Components[0].Kind == coder.Bytes && ec.Components[1].Kind == coder.Bytes {
		e.bytesKV, e.win = true, exec.MakeWindowEncoder(wc)
	}
	return e
}

// sourceChunkBytes is the size of sourceEncoder's chunks; a chunk with less
// than sourceChunkSpare left is replaced before an element is encoded. An
// element larger than what is left grows the chunk as append does, into a
// new array holding copies of the chunk's earlier elements; that array is
// left to the element (encode drops a chunk grown past sourceChunkBytes),
// or it would grow with every large record and keep a copy of each.
const (
	sourceChunkBytes = 64 << 10
	sourceChunkSpare = 1 << 10
)

// chunkWriter is an io.Writer appending to b.
type chunkWriter struct{ b []byte }

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// encode is HeadConfig.Encode: record r at event time ts.
func (e *sourceEncoder) encode(r step.In, ts mtime.Time) ([]byte, error) {
	if cap(e.chunk.b)-len(e.chunk.b) < sourceChunkSpare {
		e.chunk.b = make([]byte, 0, sourceChunkBytes)
	}
	start := len(e.chunk.b)
	err := e.write(r, ts)
	b := e.chunk.b
	switch {
	case cap(b) > sourceChunkBytes:
		e.chunk.b = nil // grown by a large element: left to it
	case err != nil:
		e.chunk.b = b[:start]
	}
	if err != nil {
		return nil, err
	}
	// Capped at its end: an append to the element cannot reach the chunk.
	return b[start:len(b):len(b)], nil
}

// write appends the element of record r at event time ts to the chunk.
func (e *sourceEncoder) write(r step.In, ts mtime.Time) error {
	if e.bytesKV {
		if err := exec.EncodeWindowedValueHeader(e.win, window.SingleGlobalWindow, ts, typex.NoFiringPane(), &e.chunk); err != nil {
			return err
		}
		if err := coder.EncodeBytes(r.Key, &e.chunk); err != nil {
			return err
		}
		return coder.EncodeBytes(r.Value, &e.chunk)
	}
	e.fv = exec.FullValue{Elm: r.Key, Elm2: r.Value, Timestamp: ts, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}
	if e.records {
		e.fv.Elm, e.fv.Elm2 = kafkaRecordOf(e.topic, r), nil
	}
	err := e.enc.Encode(&e.fv, &e.chunk)
	e.fv = exec.FullValue{} // keeps no record alive
	return err
}

// boundedEnds are the log end offsets of every partition of topic now: where
// a bounded read stops (each instance asks when it starts).
func boundedEnds(ctx context.Context, bootstrap string, props map[string]string, topic string) (map[int32]int64, error) {
	cm := kafkaclient.Base(bootstrap, props)
	cm["group.id"] = "kafkastreams-bounded-ends"
	c, err := kafkaclient.NewConsumer(cm)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	md, err := c.GetMetadata(&topic, false, 30000)
	if err != nil {
		return nil, err
	}
	var ps []int32
	for _, p := range md.Topics[topic].Partitions {
		ps = append(ps, p.ID)
	}
	return kafkaclient.LogEnds(ctx, c, topic, ps)
}

// timestampOf adapts c's TimestampFn to the source head (nil without one).
func timestampOf(c kafkaio.Config) func(step.In) (time.Time, error) {
	fn := c.Timestamp()
	if fn == nil {
		return nil
	}
	return func(r step.In) (time.Time, error) {
		rec := kafkaio.Record{Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, kafkaio.Header{Key: h.Key, Value: h.Value})
		}
		return fn(rec)
	}
}

// groupMin returns the minimum over the reported, non-idle partitions
// with a record (a watermark past the start of time, before the end) of
// the source stages of one alignment group, from the application's report
// topic as tracker t has read it (every instance's partitions), but for the
// partitions of stage self the caller has locally.
func groupMin(t *service.Tracker, self string, stages []string) func(local map[int32]bool) (mtime.Time, bool) {
	return func(local map[int32]bool) (mtime.Time, bool) {
		min, ok := mtime.MaxTimestamp, false
		for _, name := range stages {
			v, err := t.Stage(name)
			if err != nil {
				continue
			}
			for _, p := range v.Snapshot.Partitions {
				if !p.Reported || p.Idle || p.Watermark <= mtime.MinTimestamp || p.Watermark >= mtime.MaxTimestamp || name == self && local[p.Partition] {
					continue
				}
				if p.Watermark < min {
					min, ok = p.Watermark, true
				}
			}
		}
		return min, ok
	}
}

// alignmentGroup are the source stages of alignment group g among heads,
// sorted.
func alignmentGroup(heads map[string]stageHead, g string) []string {
	var out []string
	for name, sh := range heads {
		if ks, ok := sh.(*kafkaSourceStage); ok && ks.c.Watermark.AlignmentGroup == g {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// kafkaRecordOf is record r of topic as a kafkaio.ReadRecords element: its
// null or empty key and value and its headers as they were read.
func kafkaRecordOf(topic string, r step.In) kafkaio.KafkaRecord {
	kr := kafkaio.KafkaRecord{Topic: topic, Partition: r.Task, Offset: r.Offset, LogAppendTime: r.LogAppendTime, Key: r.Key, Value: r.Value}
	if r.Timestamp >= 0 { // -1: the record has none (step.In)
		kr.Timestamp = time.UnixMilli(r.Timestamp)
	}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kafkaio.Header{Key: h.Key, Value: h.Value})
	}
	return kr
}

// Package kafkaio reads and writes Kafka topics in Beam Go pipelines.
//
//	recs := kafkaio.Read(s, "orders",
//		kafkaio.WithBoundedOutOfOrderness(30*time.Second),
//		kafkaio.WithIdleness(time.Minute))      // PCollection<KV<[]byte, []byte>>
//	…
//	kafkaio.Write(s, "totals", kvs)           // KV<[]byte, []byte> → plain records
//
// ReadTopics and ReadPattern read several topics: one Read per topic,
// flattened. ReadRecords and WriteRecords carry whole records
// (KafkaRecord: a null key or value kept apart from an empty one, headers,
// where the record was read), which KV<[]byte, []byte> cannot: Beam's
// bytes coder reads nil as empty.
//
// On the kafkastreams runner a Read is a source stage that consumes the
// topic itself (no copy into an internal topic): one task per partition,
// its offsets committed in the stage's Kafka transactions (KIP-447), each
// record's event time its Kafka timestamp (CreateTime or LogAppendTime, as
// the topic says), and a watermark per partition from the source's
// strategy (seed 002: bounded out-of-orderness, monotonous timestamps, or
// none; idleness with its clock seeded when the partition is assigned: an
// idle partition is left out of the minimum, and a source whose every
// partition is idle holds its watermark; or Beam Java's limited delay,
// whose quiet partitions follow the wall clock less the delay). A
// Write is done by the stage that produces its input: plain records (no
// envelope), in that stage's transaction, so a read_committed consumer sees
// each once; the record timestamp is the element's event time and the
// partition the Java client's default for the key (murmur2), so keys land
// where a Java producer or Kafka Streams would put them.
//
// On other runners (Prism, the direct runner) the same transforms run as
// ordinary Beam Go DoFns, so a pipeline with kafkaio runs on both runners:
//
//   - A Read with Bounded() is a DoFn over the Impulse's element that reads
//     every partition up to the end offsets it sees when it starts
//     (readFn, dofn.go): its output is a bounded PCollection, and the
//     outputs of both runners can be compared.
//   - An unbounded Read is a splittable DoFn over the same element
//     (unboundedReadFn, sdf.go): SplitRestriction lists the topic's
//     partitions, one Restriction each (offsets from the start position to
//     NoEnd); ProcessElement polls its partition, claims each record's
//     offset, emits it at its event time and self-checkpoints
//     (sdf.ResumeProcessingIn) at least every second, so the job runs until
//     it is cancelled. Each partition has a watermark estimator with the
//     source's strategy, computed by the same pure core as on kafkastreams
//     (stage/kafkasource.Partition.WatermarkAt), so a strategy gives the
//     same windows on both runners. Idleness cannot be the same: Prism
//     takes the minimum over the restrictions, and cannot leave an idle
//     partition out of it, nor hold a source whose every partition is
//     idle while letting one idle partition out; so an unbounded Read with
//     idleness (WithIdleness(d > 0), or none set: the kafkastreams
//     runner's --default_idleness) is refused when the job starts, naming
//     the options that are the same on both: WithLimitedDelay (a quiet
//     partition follows the wall clock less the delay) or WithIdleness(-1)
//     (a quiet partition holds). NoWatermarks is not refused (its
//     watermark stays at the start of time either way). Watermark
//     alignment is not done; a partition added while the job runs is not
//     read. Tested on Prism only (a runner must resume self-checkpointing
//     DoFns).
//   - Both apply TimestampFn as the source stage does: a record it fails on
//     is skipped, counted (the Beam counter kafkaio/bad_records), logged
//     once per DoFn instance and written to DeadLetterTopic, at least once.
//   - A Write produces with an idempotent producer (at least once across
//     bundle retries); only the kafkastreams runner writes exactly once.
//
// The kafkastreams plan recognises both Read DoFns and the Write DoFns as
// plan.NativeSource and plan.NativeSink: none of their methods runs there.
//
// Imports: a user's binary links this package, on any runner, so it imports
// runner/plan (the native interfaces), stage/kafkaclient (client
// configurations, reading to the log end, the Java partitioner) and the
// pure stage/kafkasource (watermark strategies), never package stage and
// its loop (stage/archtest checks it).
package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// Watermark strategy kinds (seed 002), as Config.Watermark.Kind says them.
const (
	// BoundedOutOfOrderness: the partition's watermark is the largest event
	// time it has read minus the bound: a record more than the bound behind
	// the newest is late. The default, with a bound of 0.
	BoundedOutOfOrderness = "bounded_out_of_orderness"
	// MonotonousTimestamps: the largest event time read minus 1 ms (Kafka
	// Streams' partition time): for topics whose timestamps only grow.
	MonotonousTimestamps = "monotonous"
	// NoWatermarks: the partition's watermark stays at the start of time.
	// Refused at plan time when an event-time operator (a GroupByKey or
	// Combine in non-global windows, allowed lateness, event-time timers)
	// is downstream: nothing there would ever fire.
	NoWatermarks = "none"
	// LimitedDelay: Beam Java KafkaIO's CustomTimestampPolicyWithLimitedDelay
	// (WithLimitedDelay, delay d = MaxOutOfOrdernessMs): the watermark is
	// min(largest event time read, now) − d, and a partition read to its
	// end whose largest event time is more than d behind the wall clock
	// follows the wall clock: now − d. A quiet source's windows close d
	// after their end without a new record; a record read more than d after
	// its event time may be late. It does not idle out (no idleness), and
	// gives the same watermark on every runner.
	LimitedDelay = "limited_delay"
)

// Start positions for a partition without a committed offset (Kafka's
// auto.offset.reset).
const (
	// Earliest reads from the partition's first offset (the default).
	Earliest = "earliest"
	// Latest reads only records written after the job starts.
	Latest = "latest"
	// AtTimestamp reads from the first record whose Kafka timestamp is at
	// or after Config.StartAtMs (Kafka's offsetsForTimes, ListOffsets by
	// timestamp); a partition with no such record starts at its end.
	AtTimestamp = "timestamp"
)

// Config is a Read's or Write's configuration, as its options set it. It
// is carried in the pipeline (JSON), so it must not hold secrets a user
// would not put in a pipeline: pass credentials with the runner's
// --kafka_property, which every client of the runner uses.
type Config struct {
	// Topics are the topics read or written: exactly one. ReadTopics and
	// ReadPattern read several topics with one Read per topic (one source
	// stage each) flattened into one PCollection.
	Topics []string `json:"topics"`
	// BootstrapServers overrides the runner's --bootstrap_servers (Kafka's
	// bootstrap.servers); empty: the runner's.
	BootstrapServers string `json:"bootstrapServers,omitempty"`
	// Properties are extra client properties (librdkafka names, e.g.
	// security.protocol, fetch.min.bytes). One the runner sets itself
	// (group.id, isolation.level, enable.auto.commit, …:
	// kafkaclient.OwnedProperty) is refused by Validate, naming what to
	// use instead (WithReadUncommitted, WithStart, …). Never logged.
	Properties map[string]string `json:"properties,omitempty"`
	// Start is where a partition without a committed offset starts:
	// Earliest (default), Latest or AtTimestamp. A restarted job resumes at
	// its committed offsets whatever Start says.
	Start string `json:"start,omitempty"`
	// StartAtMs is AtTimestamp's time, in milliseconds since the Unix epoch
	// (a Kafka timestamp, >= 0); unused otherwise.
	StartAtMs int64 `json:"startAtMs,omitempty"`
	// ReadUncommitted reads records of open and aborted transactions too
	// (isolation.level=read_uncommitted). Default false: read_committed.
	ReadUncommitted bool `json:"readUncommitted,omitempty"`
	// Bounded stops every partition at the end offset it has when the job
	// starts: the read ends, and its watermark reaches the end of time.
	Bounded bool `json:"bounded,omitempty"`
	// Watermark is the source's watermark strategy.
	Watermark Watermark `json:"watermark"`
	// TimestampFn, if set, gives each record's event time instead of its
	// Kafka timestamp: a registered TimestampFunc. A record it fails on (an
	// error or a panic) is counted per partition on /metrics, logged once
	// with its topic, partition and offset, and written to DeadLetterTopic
	// if there is one; it is not an element.
	TimestampFn *beam.EncodedFunc `json:"timestampFn,omitempty"`
	// DeadLetterTopic receives, as they were, the records whose event time
	// TimestampFn could not give (in the source stage's transaction). The
	// topic must exist. Empty: none.
	DeadLetterTopic string `json:"deadLetterTopic,omitempty"`
	// Key and Value are a Read's deserializers (WithKeyDeserializer,
	// WithKeyDecoder, …; nil: ByteArrayDeserializer) or a Write's
	// encoders (WithKeyEncoder, …; nil: by the element's type). Set, the
	// Read or Write is a composite of the whole-record DoFns (typed.go),
	// whose own Config has them nil.
	Key   *Serde `json:"key,omitempty"`
	Value *Serde `json:"value,omitempty"`
}

// Record is a Kafka record as a TimestampFunc sees it.
type Record struct {
	Key, Value []byte
	Headers    []Header
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// TimestampFunc is the type of WithTimestampFn's function: the record's
// event time, or an error.
type TimestampFunc = func(Record) (time.Time, error)

// WithTimestampFn takes each record's event time from fn (registered with
// register.Function1x2) instead of the Kafka timestamp.
func WithTimestampFn(fn TimestampFunc) Option {
	return func(c *Config) { c.TimestampFn = &beam.EncodedFunc{Fn: reflectx.MakeFunc(fn)} }
}

// WithDeadLetterTopic writes the records whose event time the
// WithTimestampFn function could not give to topic.
func WithDeadLetterTopic(topic string) Option {
	return func(c *Config) { c.DeadLetterTopic = topic }
}

// Timestamp returns c's TimestampFn as a function, or nil.
func (c Config) Timestamp() TimestampFunc {
	if c.TimestampFn == nil || c.TimestampFn.Fn == nil {
		return nil
	}
	f := c.TimestampFn.Fn
	if f.Type() != reflect.TypeOf((TimestampFunc)(nil)) {
		return nil
	}
	return func(r Record) (time.Time, error) {
		out := f.Call([]any{r})
		err, _ := out[1].(error)
		return out[0].(time.Time), err
	}
}

// Watermark is a source's watermark strategy (seed 002).
type Watermark struct {
	// Kind is BoundedOutOfOrderness (default), MonotonousTimestamps,
	// NoWatermarks or LimitedDelay.
	Kind string `json:"kind,omitempty"`
	// MaxOutOfOrdernessMs is the bound of BoundedOutOfOrderness, or the
	// delay of LimitedDelay, in milliseconds (>= 0).
	MaxOutOfOrdernessMs int64 `json:"maxOutOfOrdernessMs,omitempty"`
	// IdlenessMs: a partition without a record for this long (counted from
	// its assignment, so a partition that never gets a record idles out
	// too) is idle, once its consumer has read it to its end: left out of
	// the minimum until its next record. A partition with records still
	// to read (a backlog waiting behind other partitions, a slow stage) is
	// never idle. When every partition of the source is idle its
	// watermark holds. 0: the runner's --default_idleness; negative: off
	// (the partition holds the watermark while it is quiet). Must be 0
	// with LimitedDelay (its quiet partitions follow the wall clock
	// instead). On other runners (Prism) an unbounded Read with idleness
	// (set or by default) of a kind other than NoWatermarks is refused
	// when the job starts: see the package doc.
	IdlenessMs int64 `json:"idlenessMs,omitempty"`
	// AlignmentGroup names the watermark alignment group (FLIP-217, seed
	// 002): a partition whose watermark is more than MaxDriftMs ahead of
	// the group's minimum (over every source of the group, every
	// instance) is paused until the group catches up. Empty: none. Done on
	// the kafkastreams runner only.
	AlignmentGroup string `json:"alignmentGroup,omitempty"`
	MaxDriftMs     int64  `json:"maxDriftMs,omitempty"`
}

// Option configures a Read or a Write.
type Option func(*Config)

// WithBootstrapServers reads or writes the cluster at servers (Kafka's
// bootstrap.servers) instead of the runner's --bootstrap_servers.
func WithBootstrapServers(servers string) Option {
	return func(c *Config) { c.BootstrapServers = servers }
}

// WithProperty sets a client property (librdkafka's name, e.g.
// "security.protocol"). Values are never logged.
func WithProperty(key, value string) Option {
	return func(c *Config) {
		if c.Properties == nil {
			c.Properties = map[string]string{}
		}
		c.Properties[key] = value
	}
}

// WithStart sets where a partition without a committed offset starts:
// Earliest (default) or Latest.
func WithStart(start string) Option { return func(c *Config) { c.Start = start } }

// WithStartAt starts each partition without a committed offset at its first
// record whose Kafka timestamp is at or after t (Kafka's offsetsForTimes; a
// partition with no such record starts at its end). t is taken to the
// millisecond; before the Unix epoch is refused.
func WithStartAt(t time.Time) Option {
	return func(c *Config) {
		c.Start = AtTimestamp
		c.StartAtMs = t.UnixMilli()
		if c.StartAtMs < 0 {
			c.StartAtMs = -1 // refused by Validate
		}
	}
}

// WithReadUncommitted reads records of open and aborted transactions too.
func WithReadUncommitted() Option { return func(c *Config) { c.ReadUncommitted = true } }

// Bounded makes the Read stop at the end offsets the partitions have when
// the job starts (for tests, backfills and comparisons with other runners).
func Bounded() Option { return func(c *Config) { c.Bounded = true } }

// WithBoundedOutOfOrderness: the watermark trails the largest event time
// read by d (>= 0; Flink's forBoundedOutOfOrderness).
func WithBoundedOutOfOrderness(d time.Duration) Option {
	return func(c *Config) {
		c.Watermark.Kind = BoundedOutOfOrderness
		c.Watermark.MaxOutOfOrdernessMs = d.Milliseconds()
		if d < 0 {
			c.Watermark.MaxOutOfOrdernessMs = -1 // refused by Validate
		}
	}
}

// WithMonotonousTimestamps: the watermark is the largest event time read
// minus 1 ms.
func WithMonotonousTimestamps() Option {
	return func(c *Config) { c.Watermark.Kind = MonotonousTimestamps }
}

// WithLimitedDelay is Beam Java KafkaIO's
// CustomTimestampPolicyWithLimitedDelay with maxDelay d (>= 0): the
// watermark is min(largest event time read, now) − d, and once a
// partition has been read to its end and its largest event time is more
// than d behind the wall clock, it follows the wall clock, now − d, without
// a record. So the windows of a source that went quiet close d after their
// end (Kafka Streams' "suppress never emits without new records"); a record
// read more than d after its event time (producer delay, fetch latency, a
// backlog's head) may be late. No idleness: combined with WithIdleness or
// WithWatermarkAlignment it is refused. The same watermark on the
// kafkastreams runner and on Prism (reported at least every second of
// movement on kafkastreams, at every checkpoint on Prism).
func WithLimitedDelay(d time.Duration) Option {
	return func(c *Config) {
		c.Watermark.Kind = LimitedDelay
		c.Watermark.MaxOutOfOrdernessMs = d.Milliseconds()
		if d < 0 {
			c.Watermark.MaxOutOfOrdernessMs = -1 // refused by Validate
		} else if d%time.Millisecond != 0 {
			c.Watermark.MaxOutOfOrdernessMs++ // never less than d
		}
	}
}

// WithNoWatermarks: the watermark stays at the start of time (only for
// pipelines without event-time operators; refused otherwise).
func WithNoWatermarks() Option { return func(c *Config) { c.Watermark.Kind = NoWatermarks } }

// WithWatermarkAlignment puts the source in alignment group group: its
// partitions pause while their watermark is more than maxDrift (> 0) ahead
// of the group's minimum (Flink's withWatermarkAlignment). An aligned
// source needs idleness (a silent laggard would hold its group for good):
// it is refused with idleness off.
func WithWatermarkAlignment(group string, maxDrift time.Duration) Option {
	return func(c *Config) {
		c.Watermark.AlignmentGroup = group
		c.Watermark.MaxDriftMs = maxDrift.Milliseconds()
		if maxDrift <= 0 {
			c.Watermark.MaxDriftMs = -1 // refused by Validate
		}
	}
}

// WithIdleness marks a partition idle after d without a record (> 0) once
// it has been read to its end (a partition with a backlog is not idle), or
// never (d < 0: off). Without it the runner's --default_idleness applies.
func WithIdleness(d time.Duration) Option {
	return func(c *Config) {
		switch {
		case d > 0:
			c.Watermark.IdlenessMs = max(d.Milliseconds(), 1)
		case d < 0:
			c.Watermark.IdlenessMs = -1
		default:
			c.Watermark.IdlenessMs = -2 // refused by Validate: zero is ambiguous
		}
	}
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("kafkaio: bad configuration")

// Validate checks the configuration, naming what is wrong.
func (c Config) Validate() error {
	if len(c.Topics) != 1 {
		return fmt.Errorf("%w: %d topics: one topic per Read or Write", ErrConfig, len(c.Topics))
	}
	for _, t := range c.Topics {
		if strings.TrimSpace(t) == "" {
			return fmt.Errorf("%w: empty topic name", ErrConfig)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Properties)) {
		if why, owned := kafkaclient.OwnedProperty(k); owned {
			return fmt.Errorf("%w: WithProperty(%q, …): the runner sets it itself: %s", ErrConfig, k, why)
		}
	}
	switch c.Start {
	case "", Earliest, Latest:
	case AtTimestamp:
		if c.StartAtMs < 0 {
			return fmt.Errorf("%w: WithStartAt: a time before the Unix epoch (Kafka timestamps are milliseconds since 1970)", ErrConfig)
		}
	default:
		return fmt.Errorf("%w: start %q: want %q or %q (or WithStartAt)", ErrConfig, c.Start, Earliest, Latest)
	}
	switch c.Watermark.Kind {
	case "", BoundedOutOfOrderness, MonotonousTimestamps, NoWatermarks, LimitedDelay:
	default:
		return fmt.Errorf("%w: watermark kind %q", ErrConfig, c.Watermark.Kind)
	}
	if c.Watermark.MaxOutOfOrdernessMs < 0 {
		if c.Watermark.Kind == LimitedDelay {
			return fmt.Errorf("%w: WithLimitedDelay: negative delay", ErrConfig)
		}
		return fmt.Errorf("%w: WithBoundedOutOfOrderness: negative bound", ErrConfig)
	}
	if c.Watermark.Kind == LimitedDelay && c.Watermark.IdlenessMs != 0 {
		return fmt.Errorf("%w: WithLimitedDelay with WithIdleness: a limited-delay partition does not idle out (read to its end and quiet, its watermark follows the wall clock less the delay); drop WithIdleness", ErrConfig)
	}
	if c.Watermark.Kind == LimitedDelay && c.Watermark.AlignmentGroup != "" {
		return fmt.Errorf("%w: WithLimitedDelay with WithWatermarkAlignment(%q): not supported", ErrConfig, c.Watermark.AlignmentGroup)
	}
	if c.TimestampFn != nil && c.Timestamp() == nil {
		return fmt.Errorf("%w: WithTimestampFn: the function is not a kafkaio.TimestampFunc", ErrConfig)
	}
	if c.DeadLetterTopic != "" && c.TimestampFn == nil {
		return fmt.Errorf("%w: WithDeadLetterTopic(%q) without WithTimestampFn: only records whose event time the function cannot give go there", ErrConfig, c.DeadLetterTopic)
	}
	if c.Watermark.AlignmentGroup != "" && c.Watermark.MaxDriftMs <= 0 {
		return fmt.Errorf("%w: WithWatermarkAlignment(%q): the drift must be positive", ErrConfig, c.Watermark.AlignmentGroup)
	}
	if c.Watermark.IdlenessMs == -2 {
		return fmt.Errorf("%w: WithIdleness(0): give a positive duration, or a negative one to turn idleness off", ErrConfig)
	}
	return nil
}

// String describes the configuration without property values.
func (c Config) String() string {
	keys := make([]string, 0, len(c.Properties))
	for k := range c.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	start := c.Start
	if start == AtTimestamp {
		start = time.UnixMilli(c.StartAtMs).UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("topics=%v bootstrap=%q properties=%v start=%q bounded=%v watermark=%+v", c.Topics, c.BootstrapServers, keys, start, c.Bounded, c.Watermark)
}

func newConfig(topics []string, opts []Option) Config {
	c := Config{Topics: topics}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Read reads topic as a PCollection<KV<[]byte,
// []byte>> of the records' keys and values, each at its Kafka timestamp,
// in the global window: an unbounded PCollection, a bounded one with
// Bounded(). With WithKeyDeserializer, WithValueDeserializer,
// WithKeyDecoder or WithValueDecoder it is a PCollection<KV<K, V>> of the
// types they make (typed.go: a record one of them cannot decode goes
// through the runner's error policy). Bad options panic at construction,
// naming what is wrong (as Beam's transforms do).
func Read(s beam.Scope, topic string, opts ...Option) beam.PCollection {
	return ReadTopics(s, []string{topic}, opts...)
}

// ReadTopics reads every topic of topics (at least one, no repeats) into one
// PCollection<KV<[]byte, []byte>>, each with the same options. It is one
// Read per topic, flattened: on the kafkastreams runner one source stage per
// topic, with one consumer group and offsets each. The watermark downstream
// is the minimum over every partition of every topic that is not idle (seed
// 000 and 002, as for the partitions of one topic): an idle partition is
// left out, and so is a topic whose every partition is idle (a topic that
// never gets a record holds nothing once its idleness has passed); when
// every partition of every topic is idle the watermark holds where it is.
func ReadTopics(s beam.Scope, topics []string, opts ...Option) beam.PCollection {
	if len(topics) == 0 {
		panic(fmt.Errorf("%w: ReadTopics of no topic", ErrConfig))
	}
	seen := map[string]bool{}
	for _, t := range topics {
		if seen[t] {
			panic(fmt.Errorf("%w: ReadTopics: topic %q twice", ErrConfig, t))
		}
		seen[t] = true
	}
	s = s.Scope("kafkaio.Read(" + strings.Join(topics, ",") + ")")
	if len(topics) == 1 {
		return readOne(s, topics[0], opts)
	}
	cols := make([]beam.PCollection, len(topics))
	for i, t := range topics {
		cols[i] = readOne(s.Scope(t), t, opts)
	}
	return beam.Flatten(s, cols...)
}

// ReadPattern reads every topic whose whole name matches the regular
// expression pattern (Go's regexp syntax, anchored at both ends as Java's
// Pattern.matches; topics whose name starts with "__", Kafka's internal
// ones, are left out), as ReadTopics does. The topics are listed once,
// when the pipeline is built, from the cluster the options or the runner's
// --bootstrap_servers name: a topic created later is read only after the
// job is rebuilt (partitions added to a matched topic are picked up while
// it runs on the kafkastreams runner, within a second; on other runners
// they are not read, as for Read). A bad pattern, an unreachable cluster or no matching topic
// panics at construction, naming the pattern and the servers.
func ReadPattern(s beam.Scope, pattern string, opts ...Option) beam.PCollection {
	c := newConfig([]string{pattern}, opts)
	topics, err := matchTopics(c, pattern)
	if err != nil {
		panic(err)
	}
	return ReadTopics(s, topics, opts...)
}

func readOne(s beam.Scope, topic string, opts []Option) beam.PCollection {
	c := newConfig([]string{topic}, opts)
	if err := c.Validate(); err != nil {
		panic(err)
	}
	if !c.Key.plain() || !c.Value.plain() {
		return readTyped(s, c)
	}
	c.Key, c.Value = nil, nil
	if c.Bounded {
		return beam.ParDo(s, &readFn{Config: c}, beam.Impulse(s))
	}
	return beam.ParDo(s, &unboundedReadFn{Config: c}, beam.Impulse(s))
}

// Write writes col, a PCollection<KV<K, V>> (or of V: values without
// keys, each written with a null key), to topic as plain records. Keys and
// values of type []byte are written as they are; of type string, their
// UTF-8 bytes (Java's StringSerializer; "" is empty, not null); of any
// other type, with the encoder WithKeyEncoder or WithValueEncoder gives
// (its nil result is null). Another type without an encoder panics at
// construction, naming it.
func Write(s beam.Scope, topic string, col beam.PCollection, opts ...Option) {
	c := newConfig([]string{topic}, opts)
	if err := c.Validate(); err != nil {
		panic(err)
	}
	s = s.Scope("kafkaio.Write(" + topic + ")")
	t := col.Type()
	kv := typex.IsKV(t)
	switch {
	case !kv && t.Type() == bytesType && c.Key == nil && c.Value == nil:
		beam.ParDo0(s, &writeValuesFn{Config: c}, col)
	case kv && t.Components()[0].Type() == bytesType && t.Components()[1].Type() == bytesType && c.Key == nil && c.Value == nil:
		beam.ParDo0(s, &writeFn{Config: c}, col)
	default:
		writeTyped(s, c, col, kv)
	}
}

func init() {
	register.DoFn4x1[context.Context, beam.EventTime, []byte, func(beam.EventTime, []byte, []byte), error](&readFn{})
	register.Emitter3[beam.EventTime, []byte, []byte]()
	register.DoFn3x1[beam.EventTime, []byte, []byte, error](&writeFn{})
	register.DoFn2x1[beam.EventTime, []byte, error](&writeValuesFn{})
	register.DoFn4x1[context.Context, beam.EventTime, []byte, func(beam.EventTime, KafkaRecord), error](&readRecordsFn{})
	register.Emitter2[beam.EventTime, KafkaRecord]()
	register.DoFn2x1[beam.EventTime, KafkaRecord, error](&writeRecordsFn{})
}

// SourceConfig returns the Config of a Read's DoFn (plan.NativeDoFn of its
// ParDo); ok is false for any other DoFn.
func SourceConfig(fn any) (c Config, ok bool) {
	switch r := fn.(type) {
	case *readFn:
		return r.Config, true
	case *unboundedReadFn:
		return r.Config, true
	case *readRecordsFn:
		return r.Config, true
	case *unboundedReadRecordsFn:
		return r.Config, true
	}
	return Config{}, false
}

// SinkConfig returns the Config of a Write's DoFn (plan.NativeDoFn of its
// ParDo); ok is false for any other DoFn.
func SinkConfig(fn any) (c Config, ok bool) {
	switch w := fn.(type) {
	case *writeFn:
		return w.Config, true
	case *writeValuesFn:
		return w.Config, true
	case *writeRecordsFn:
		return w.Config, true
	}
	return Config{}, false
}

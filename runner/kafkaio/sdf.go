package kafkaio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/kafkasource"
)

// An unbounded Read on runners other than kafkastreams (Prism, the direct
// runner) is unboundedReadFn, a Beam Go splittable DoFn (SDF) over the
// Impulse's one element, that self-checkpoints:
//
//	Impulse ──▶ unboundedReadFn: Restriction{AllPartitions}
//	              SplitRestriction ─▶ one Restriction per partition, [start, ∞)
//	              ProcessElement   ─▶ poll, claim, emit; sdf.ResumeProcessingIn(resumeDelay)
//
// On the kafkastreams runner the same DoFn is recognised by the plan
// (plan.NativeSource), its Impulse dropped, and a source stage reads the
// topic; none of the methods below runs there.

// AllPartitions is the Partition of a Read's initial Restriction: every
// partition of the topic, before SplitRestriction lists them.
const AllPartitions int32 = -1

// NoEnd is the End of an unbounded Restriction: the partition is read for
// as long as the job runs (offsetrange's infinity).
const NoEnd int64 = math.MaxInt64

// Timing of an unbounded read's ProcessElement on runners other than
// kafkastreams.
const (
	// pollWait is how long one consumer poll waits for a record, in
	// librdkafka's unit (ms).
	pollWait = 100
	// callBudget bounds one ProcessElement call: it checkpoints after this
	// long even while records keep coming, since the runner learns the
	// restriction's watermark only at a checkpoint.
	callBudget = time.Second
	// resumeDelay is the delay of every checkpoint (sdf.ResumeProcessingIn),
	// whether records came or not: Prism parks the residuals of one bundle
	// by their resume time, so one delay for all keeps the partitions'
	// residuals in one bundle, whose minimum output watermark Prism takes
	// (see unboundedReadFn).
	resumeDelay = 200 * time.Millisecond
)

// Restriction is the restriction of an unbounded Read's splittable DoFn on
// runners other than kafkastreams: offsets [Start, End) of partition
// Partition of the Read's topic. The initial restriction has Partition
// AllPartitions (SplitRestriction lists the partitions then); a split one
// has End NoEnd. Offsets are Kafka offsets: a claimed position is a
// record's offset, and positions without a record (transaction markers,
// compacted records) are skipped. Users do not build it; it is exported
// for Beam's coder registry.
type Restriction struct {
	Partition  int32
	Start, End int64
}

// WatermarkState is what an unbounded Read's watermark estimator carries
// from one checkpoint of its partition to the next (on runners other than
// kafkastreams). Times are ms: event times as mtime.Time, wall-clock
// instants since the Unix epoch. Users do not build it; it is exported for
// Beam's coder registry.
type WatermarkState struct {
	// Seen is false until the partition's first record; MaxEventTime is
	// the highest event time read (valid if Seen).
	Seen         bool
	MaxEventTime int64
	// ActivityMs is the wall-clock instant idleness is measured from: the
	// later of the restrictions' creation and the latest record.
	ActivityMs int64
	// Watermark is the last watermark the estimator gave (it never goes
	// back).
	Watermark int64
}

func encodeRestriction(r Restriction) ([]byte, error) {
	var b bytes.Buffer
	err := binary.Write(&b, binary.BigEndian, r)
	return b.Bytes(), err
}

func decodeRestriction(p []byte) (Restriction, error) {
	var r Restriction
	err := binary.Read(bytes.NewReader(p), binary.BigEndian, &r)
	return r, err
}

func encodeWatermarkState(s WatermarkState) ([]byte, error) {
	var b bytes.Buffer
	err := binary.Write(&b, binary.BigEndian, s)
	return b.Bytes(), err
}

func decodeWatermarkState(p []byte) (WatermarkState, error) {
	var s WatermarkState
	err := binary.Read(bytes.NewReader(p), binary.BigEndian, &s)
	return s, err
}

// partitionTracker is the restriction tracker of one partition's
// Restriction: offsetrange's tracker for the offsets. Of an unbounded
// restriction it makes checkpoints only (TrySplit(0): the primary is what
// was claimed, the residual the rest): a split at a fraction of [claimed,
// ∞) would be an offset no record has.
type partitionTracker struct {
	partition int32
	offsets   *offsetrange.Tracker
}

func newPartitionTracker(r Restriction) *partitionTracker {
	return &partitionTracker{partition: r.Partition, offsets: offsetrange.NewTracker(offsetrange.Restriction{Start: r.Start, End: r.End})}
}

// TryClaim claims offset pos (an int64): false at or past End, or on an
// error (GetError).
func (t *partitionTracker) TryClaim(pos any) bool { return t.offsets.TryClaim(pos) }

// GetError is the error that stopped the tracker, if any.
func (t *partitionTracker) GetError() error { return t.offsets.GetError() }

// TrySplit splits at fraction of the rest (offsetrange's rule); an
// unbounded restriction splits at 0 only (a checkpoint).
func (t *partitionTracker) TrySplit(fraction float64) (primary, residual any, err error) {
	if fraction > 0 && !t.IsBounded() {
		return t.GetRestriction(), nil, nil
	}
	p, r, err := t.offsets.TrySplit(fraction)
	if err != nil {
		return nil, nil, err
	}
	primary = t.wrap(p.(offsetrange.Restriction))
	if r != nil {
		residual = t.wrap(r.(offsetrange.Restriction))
	}
	return primary, residual, nil
}

func (t *partitionTracker) wrap(r offsetrange.Restriction) Restriction {
	return Restriction{Partition: t.partition, Start: r.Start, End: r.End}
}

// GetProgress is offsetrange's: offsets claimed and to claim.
func (t *partitionTracker) GetProgress() (done, remaining float64) { return t.offsets.GetProgress() }

// IsDone: every offset below End is claimed (or End was tried).
func (t *partitionTracker) IsDone() bool { return t.offsets.IsDone() }

// GetRestriction is the current Restriction.
func (t *partitionTracker) GetRestriction() any {
	return t.wrap(t.offsets.GetRestriction().(offsetrange.Restriction))
}

// IsBounded: End is not NoEnd.
func (t *partitionTracker) IsBounded() bool {
	return t.offsets.GetRestriction().(offsetrange.Restriction).End != NoEnd
}

// watermarkEstimator is the watermark of one partition's restriction, as
// the Config's strategy (seed 002, or Beam Java's limited delay) gives it,
// with the formula the kafkastreams runner uses
// (kafkasource.Partition.WatermarkAt):
//
//	W' = MAX(W, WatermarkAt(now, caught up))
//
//	no record yet:          mtime.MinTimestamp (LimitedDelay, caught up: now − delay)
//	BoundedOutOfOrderness:  max event time − the bound
//	MonotonousTimestamps:   max event time − 1 ms
//	NoWatermarks:           mtime.MinTimestamp
//	LimitedDelay:           min(max event time, now) − delay; caught up and
//	                        max event time < now − delay: now − delay
//
// where caught up is a partition EOF at or past the partition's next
// offset (the kafkastreams head's caughtUp). Idleness is not here: an
// unbounded Read with idleness is refused on these runners (prismCheck),
// since the minimum over restrictions cannot leave an idle partition out
// as the kafkastreams runner does. It does no I/O and reads no clock: the
// caller passes now.
type watermarkEstimator struct {
	part *kafkasource.Partition
	wm   mtime.Time
	// err is a strategy kafkasource refused, or one these runners refuse
	// (newWatermarkEstimator).
	err error
}

// CurrentWatermark implements sdf.WatermarkEstimator: the runner reads it
// at each checkpoint.
func (e *watermarkEstimator) CurrentWatermark() time.Time { return e.wm.ToTime() }

// observe records a record of event time ts read at wall-clock now (the
// partition is not caught up: the record's EOF is still to come).
func (e *watermarkEstimator) observe(ts mtime.Time, now time.Time) {
	e.part.Observe(ts, now)
	e.wm = max(e.wm, e.part.WatermarkAt(now, false))
}

// advance moves the watermark to wall-clock now; caughtUp says the
// partition has been read to its end.
func (e *watermarkEstimator) advance(now time.Time, caughtUp bool) {
	e.wm = max(e.wm, e.part.WatermarkAt(now, caughtUp))
}

func (e *watermarkEstimator) state() WatermarkState {
	s := WatermarkState{Watermark: int64(e.wm), ActivityMs: e.part.LastActivity().UnixMilli()}
	if ts, ok := e.part.MaxEventTime(); ok {
		s.Seen, s.MaxEventTime = true, int64(ts)
	}
	return s
}

// ErrIdlenessNotSame is wrapped by the error of an unbounded Read with
// idleness on a runner other than kafkastreams (prismCheck).
var ErrIdlenessNotSame = errors.New("kafkaio: idleness cannot give the kafkastreams runner's windows on this runner")

// prismCheck refuses, on runners other than kafkastreams, a strategy whose
// watermark would differ from the kafkastreams runner's: an unbounded Read
// with idleness (WithIdleness(d > 0), or none set: the kafkastreams
// runner's --default_idleness, 5 minutes by default) and watermarks. There
// an idle partition is left out of its source's minimum and a source
// whose every partition is idle holds its watermark (seed 002); here the
// runner takes the minimum over the restrictions' estimates, and an
// estimate cannot be "left out": holding would pin the others behind an
// empty partition, following the wall clock (this runner's former rule)
// fires windows that kafkastreams holds. The error names the two options
// that are the same on both. A Bounded Read ends, and NoWatermarks stays
// at the start of time, on both, whatever the idleness.
func (c Config) prismCheck() error {
	if c.Bounded || c.Watermark.Kind == NoWatermarks || c.Watermark.Kind == LimitedDelay || c.Watermark.IdlenessMs < 0 {
		return nil
	}
	idle := "no WithIdleness: the kafkastreams runner's --default_idleness, 5 minutes by default"
	if c.Watermark.IdlenessMs > 0 {
		idle = fmt.Sprintf("WithIdleness(%v)", time.Duration(c.Watermark.IdlenessMs)*time.Millisecond)
	}
	return fmt.Errorf("kafkaio.Read(%s): %w (%s): on the kafkastreams runner an idle partition is left out of the watermark's minimum and a source whose every partition is idle holds its watermark; Prism takes the minimum over the partitions' estimates and can do neither. Use kafkaio.WithLimitedDelay(d) for windows that close d after their end when the topic goes quiet, or kafkaio.WithIdleness(-1) for a watermark that holds while a partition is quiet: each gives the same windows on both runners",
		c.Topics[0], ErrIdlenessNotSame, idle)
}

// prismStrategy is c's watermark strategy on runners other than
// kafkastreams: no idleness (prismCheck refuses it; NoWatermarks' does not
// matter), and no alignment (no group spans the runner's restrictions).
func (c Config) prismStrategy() kafkasource.Strategy {
	st := kafkasource.Strategy{Kind: kafkasource.BoundedOutOfOrderness, MaxOutOfOrderness: time.Duration(c.Watermark.MaxOutOfOrdernessMs) * time.Millisecond}
	switch c.Watermark.Kind {
	case MonotonousTimestamps:
		st.Kind = kafkasource.Monotonous
	case NoWatermarks:
		st.Kind = kafkasource.NoWatermarks
		st.MaxOutOfOrderness = 0
	case LimitedDelay:
		st.Kind = kafkasource.LimitedDelay
	}
	return st
}

// newWatermarkEstimator rebuilds the estimator of strategy c from s. A
// strategy these runners refuse (prismCheck), or kafkasource refuses
// (which Config.Validate lets through), gives an estimator whose err says
// why, at the start of time; ProcessElement returns that error.
func newWatermarkEstimator(c Config, s WatermarkState) *watermarkEstimator {
	st := c.prismStrategy()
	activity := time.UnixMilli(s.ActivityMs)
	p, err := kafkasource.NewPartition(st, activity)
	if err == nil {
		err = c.prismCheck()
	} else {
		err = fmt.Errorf("kafkaio.Read(%s): %w", c.Topics[0], err)
	}
	if err != nil {
		p, _ = kafkasource.NewPartition(kafkasource.Strategy{Kind: kafkasource.NoWatermarks}, activity)
		return &watermarkEstimator{part: p, wm: mtime.MinTimestamp, err: err}
	}
	if s.Seen {
		p.Observe(mtime.Time(s.MaxEventTime), activity)
	}
	return &watermarkEstimator{part: p, wm: mtime.Time(s.Watermark)}
}

// unboundedReadFn is an unbounded Read (no Bounded option). On the
// kafkastreams runner the plan recognises it (plan.NativeSource) and a
// source stage reads the topic. On other runners it is a splittable DoFn
// over the Impulse's element:
//
//   - SplitRestriction lists the topic's partitions (metadata) and makes
//     one Restriction per partition, [start, NoEnd): start 0 for Earliest
//     (an offset below the log start is moved to it: auto.offset.reset
//     earliest), the partition's log end offset at that moment for Latest.
//     A partition added later is not read (the kafkastreams runner reads
//     it).
//   - ProcessElement polls its partition (read_committed unless
//     ReadUncommitted; a consumer per partition, kept by the DoFn instance
//     between calls and never in a consumer group), claims each record's
//     offset and emits KV<key, value> at its event time (the Kafka
//     timestamp, or TimestampFn's; a record TimestampFn fails on is
//     skipped, counted in the Beam counter kafkaio/bad_records, logged once
//     per DoFn instance, and written to DeadLetterTopic if there is one, at
//     least once). After a poll without a record, or callBudget, it
//     checkpoints with sdf.ResumeProcessingIn(resumeDelay). It never stops
//     by itself: cancel the job.
//   - The watermark is watermarkEstimator's, per partition: the runner
//     takes the minimum over the restrictions. A strategy with idleness is
//     refused (prismCheck: SplitRestriction and ProcessElement return its
//     error); WithLimitedDelay lets a partition read to its end and quiet
//     follow the wall clock less the delay, as on kafkastreams. Watermark
//     alignment is not done.
//
// Prism takes a stage's watermark estimate from the residuals of its
// latest bundle: if it splits the partitions' restrictions into different
// bundles, a partition may briefly be judged by the others' watermark, and
// its records may be late. Every checkpoint has the same delay so that
// residuals stay together.
//
// Delivery on other runners is at least once: a bundle that fails is
// read again from its restriction's start; offsets are not committed.
type unboundedReadFn struct {
	Config Config `json:"config"`

	consumers map[int32]*partitionConsumer
	bad       badRecords
}

var _ plan.NativeSource = (*unboundedReadFn)(nil)

// KafkaSourceTopic implements plan.NativeSource.
func (f *unboundedReadFn) KafkaSourceTopic() string { return f.Config.Topics[0] }

// partitionConsumer is a consumer assigned one partition, kept between
// ProcessElement calls of the same DoFn instance.
type partitionConsumer struct {
	c *kafka.Consumer
	// next is the offset the consumer's next record has (its assignment,
	// then the offset after its latest record).
	next int64
	// eof is the offset of its latest partition EOF event, -1 before one:
	// the partition is read to its end while eof >= next.
	eof int64
}

// CreateInitialRestriction is every partition (AllPartitions).
func (f *unboundedReadFn) CreateInitialRestriction(_ []byte) Restriction {
	return Restriction{Partition: AllPartitions, Start: 0, End: NoEnd}
}

// SplitRestriction lists the topic's partitions: one restriction each,
// from the start position to NoEnd. A split restriction is not split again.
func (f *unboundedReadFn) SplitRestriction(_ []byte, r Restriction) ([]Restriction, error) {
	if r.Partition != AllPartitions {
		return []Restriction{r}, nil
	}
	c := f.Config
	if err := c.prismCheck(); err != nil {
		return nil, err
	}
	topic := c.Topics[0]
	cm := c.clientConfig()
	cm["group.id"] = "kafkaio-read-" + topic
	cons, err := kafkaclient.NewConsumer(cm)
	if err != nil {
		return nil, fmt.Errorf("kafkaio.Read(%s): %w", topic, err)
	}
	defer func() { _ = cons.Close() }()
	parts, err := partitionsOf(cons, topic)
	if err != nil {
		return nil, err
	}
	var out []Restriction
	for _, p := range parts {
		start := int64(0)
		switch c.Start {
		case Latest:
			_, high, err := cons.QueryWatermarkOffsets(topic, p, 30000)
			if err != nil {
				return nil, fmt.Errorf("kafkaio.Read(%s): end offset of partition %d: %w", topic, p, err)
			}
			start = high
		case AtTimestamp:
			if start, err = offsetForTime(cons, topic, p, c.StartAtMs); err != nil {
				return nil, err
			}
		}
		out = append(out, Restriction{Partition: p, Start: start, End: NoEnd})
	}
	return out, nil
}

// partitionsOf lists topic's partitions.
func partitionsOf(c *kafka.Consumer, topic string) ([]int32, error) {
	md, err := c.GetMetadata(&topic, false, 30000)
	if err != nil {
		return nil, fmt.Errorf("kafkaio.Read(%s): metadata: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
		return nil, fmt.Errorf("kafkaio.Read(%s): topic not found: %v", topic, tm.Error)
	}
	var ps []int32
	for _, p := range tm.Partitions {
		ps = append(ps, p.ID)
	}
	return ps, nil
}

// RestrictionSize is 1 for every restriction: an unbounded partition has
// no size to compare.
func (f *unboundedReadFn) RestrictionSize(_ []byte, _ Restriction) float64 { return 1 }

// CreateTracker tracks one partition's restriction.
func (f *unboundedReadFn) CreateTracker(r Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(newPartitionTracker(r))
}

// InitialWatermarkEstimatorState: no record yet, the idleness clock
// started now.
func (f *unboundedReadFn) InitialWatermarkEstimatorState(_ beam.EventTime, _ Restriction, _ []byte) WatermarkState {
	return WatermarkState{ActivityMs: time.Now().UnixMilli(), Watermark: int64(mtime.MinTimestamp)}
}

// CreateWatermarkEstimator rebuilds a partition's estimator from its
// state.
func (f *unboundedReadFn) CreateWatermarkEstimator(s WatermarkState) *watermarkEstimator {
	return newWatermarkEstimator(f.Config, s)
}

// WatermarkEstimatorState is what the estimator carries to the residual.
func (f *unboundedReadFn) WatermarkEstimatorState(e *watermarkEstimator) WatermarkState {
	return e.state()
}

// consumer returns the instance's consumer of partition p, positioned at
// offset start.
func (f *unboundedReadFn) consumer(p int32, start int64) (*partitionConsumer, error) {
	c := f.Config
	topic := c.Topics[0]
	pc := f.consumers[p]
	if pc == nil {
		cm := c.clientConfig()
		cm["group.id"] = "kafkaio-read-" + topic
		cm["enable.auto.commit"] = false
		cm["enable.partition.eof"] = true
		cm["auto.offset.reset"] = "earliest"
		cm["isolation.level"] = "read_committed"
		if c.ReadUncommitted {
			cm["isolation.level"] = "read_uncommitted"
		}
		cons, err := kafkaclient.NewConsumer(cm)
		if err != nil {
			return nil, fmt.Errorf("kafkaio.Read(%s): partition %d: %w", topic, p, err)
		}
		pc = &partitionConsumer{c: cons, next: -1}
		if f.consumers == nil {
			f.consumers = map[int32]*partitionConsumer{}
		}
		f.consumers[p] = pc
	}
	if pc.next != start {
		if err := pc.c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(start)}}); err != nil {
			return nil, fmt.Errorf("kafkaio.Read(%s): assign partition %d at %d: %w", topic, p, start, err)
		}
		pc.next, pc.eof = start, -1
	}
	return pc, nil
}

// ProcessElement reads its restriction's partition for up to callBudget
// and checkpoints (see unboundedReadFn).
func (f *unboundedReadFn) ProcessElement(ctx context.Context, we *watermarkEstimator, rt *sdf.LockRTracker, _ []byte, emit func(beam.EventTime, []byte, []byte)) (sdf.ProcessContinuation, error) {
	return f.read(ctx, we, rt, func(ts mtime.Time, m *kafka.Message) { emit(beam.EventTime(ts), m.Key, m.Value) })
}

// unboundedReadRecordsFn is an unbounded ReadRecords: unboundedReadFn's
// restrictions, watermark estimators and reads, each record emitted whole
// (KafkaRecord).
type unboundedReadRecordsFn struct {
	unboundedReadFn
}

// ProcessElement reads as unboundedReadFn's does.
func (f *unboundedReadRecordsFn) ProcessElement(ctx context.Context, we *watermarkEstimator, rt *sdf.LockRTracker, _ []byte, emit func(beam.EventTime, KafkaRecord)) (sdf.ProcessContinuation, error) {
	return f.read(ctx, we, rt, func(ts mtime.Time, m *kafka.Message) { emit(beam.EventTime(ts), kafkaRecordOfMessage(m)) })
}

// read is ProcessElement's work: it calls emit for every record to emit,
// with its event time.
func (f *unboundedReadFn) read(ctx context.Context, we *watermarkEstimator, rt *sdf.LockRTracker, emit func(mtime.Time, *kafka.Message)) (sdf.ProcessContinuation, error) {
	c := f.Config
	topic := c.Topics[0]
	r := rt.GetRestriction().(Restriction)
	if we.err != nil {
		return sdf.StopProcessing(), we.err
	}
	if r.Partition == AllPartitions {
		return sdf.StopProcessing(), fmt.Errorf("kafkaio.Read(%s): a restriction of every partition reached ProcessElement: SplitRestriction did not run", topic)
	}
	pc, err := f.consumer(r.Partition, r.Start)
	if err != nil {
		return sdf.StopProcessing(), err
	}
	stamp := c.Timestamp()
	deadline := time.Now().Add(callBudget)
poll:
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return sdf.StopProcessing(), err
		}
		switch e := pc.c.Poll(pollWait).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				return sdf.StopProcessing(), fmt.Errorf("kafkaio.Read(%s): partition %d: %w", topic, r.Partition, e.TopicPartition.Error)
			}
			off := int64(e.TopicPartition.Offset)
			if !rt.TryClaim(off) {
				if err := rt.GetError(); err != nil {
					return sdf.StopProcessing(), fmt.Errorf("kafkaio.Read(%s): partition %d offset %d: %w", topic, r.Partition, off, err)
				}
				return sdf.StopProcessing(), nil // past a bounded restriction's end
			}
			pc.next = off + 1
			ts, err := eventTime(stamp, e)
			if err != nil {
				if err := f.bad.add(ctx, c, e, err); err != nil {
					return sdf.StopProcessing(), err
				}
				continue
			}
			we.observe(ts, time.Now())
			emit(ts, e)
		case kafka.PartitionEOF:
			pc.eof = int64(e.Offset)
			if pc.eof >= pc.next {
				break poll
			}
		case kafka.Error:
			if e.IsFatal() {
				return sdf.StopProcessing(), fmt.Errorf("kafkaio.Read(%s): partition %d: %w", topic, r.Partition, e)
			}
		case nil:
			break poll // nothing within pollWait
		}
	}
	if err := f.bad.flush(); err != nil {
		return sdf.StopProcessing(), err
	}
	we.advance(time.Now(), pc.eof >= pc.next)
	return sdf.ResumeProcessingIn(resumeDelay), nil
}

// Teardown closes the instance's consumers and dead-letter producer.
func (f *unboundedReadFn) Teardown() {
	for _, pc := range f.consumers {
		_ = pc.c.Close()
	}
	f.consumers = nil
	f.bad.close()
}

func init() {
	beam.RegisterType(reflect.TypeOf((*Restriction)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*WatermarkState)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*watermarkEstimator)(nil)))
	beam.RegisterCoder(reflect.TypeOf((*Restriction)(nil)).Elem(), encodeRestriction, decodeRestriction)
	beam.RegisterCoder(reflect.TypeOf((*WatermarkState)(nil)).Elem(), encodeWatermarkState, decodeWatermarkState)
	register.DoFn5x2[context.Context, *watermarkEstimator, *sdf.LockRTracker, []byte, func(beam.EventTime, []byte, []byte), sdf.ProcessContinuation, error](&unboundedReadFn{})
	register.DoFn5x2[context.Context, *watermarkEstimator, *sdf.LockRTracker, []byte, func(beam.EventTime, KafkaRecord), sdf.ProcessContinuation, error](&unboundedReadRecordsFn{})
}

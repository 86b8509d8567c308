package kafkasource

import (
	"errors"
	"fmt"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Sentinel errors. Each returned error wraps exactly one of them (test with
// errors.Is) together with the offending field or value. None is retryable:
// they describe a pipeline's configuration, which fails the same way every
// time.
var (
	// ErrUnknownKind: Strategy.Kind is not one of the Kind constants.
	ErrUnknownKind = errors.New("kafkasource: unknown watermark strategy kind")
	// ErrNegativeDuration: a duration field of Strategy is negative; the
	// error names the field.
	ErrNegativeDuration = errors.New("kafkasource: negative duration")
	// ErrBoundWithoutBounded: MaxOutOfOrderness is set on a strategy that is
	// not BoundedOutOfOrderness, where it would be silently ignored.
	ErrBoundWithoutBounded = errors.New("kafkasource: MaxOutOfOrderness is only for BoundedOutOfOrderness")
	// ErrAlignmentWithoutIdleness: an AlignmentGroup with Idleness 0. A
	// silent laggard would hold its group for good (seed 002,
	// "alignment-idleness-off").
	ErrAlignmentWithoutIdleness = errors.New("kafkasource: an aligned source needs an idleness timeout")
	// ErrAlignmentWithoutWatermarks: an AlignmentGroup on a NoWatermarks
	// strategy. Its watermark is always mtime.MinTimestamp, so while it
	// delivers it would hold every other member of its group.
	ErrAlignmentWithoutWatermarks = errors.New("kafkasource: a NoWatermarks source cannot be aligned")
	// ErrDriftWithoutGroup: MaxDrift is set without an AlignmentGroup, where
	// it would be silently ignored.
	ErrDriftWithoutGroup = errors.New("kafkasource: MaxDrift is only for an aligned source")
	// ErrNotAligned: Align got a partition whose strategy has no
	// AlignmentGroup, or a nil partition.
	ErrNotAligned = errors.New("kafkasource: partition is not in an alignment group")
	// ErrMixedGroups: Align got partitions of different alignment groups.
	ErrMixedGroups = errors.New("kafkasource: partitions of different alignment groups")
	// ErrIdlenessWithLimitedDelay: Idleness set on a LimitedDelay strategy.
	// A caught-up LimitedDelay partition follows the wall clock less its
	// delay instead of idling out, so the idleness would be silently
	// ignored.
	ErrIdlenessWithLimitedDelay = errors.New("kafkasource: a LimitedDelay source does not idle out (a quiet partition follows the wall clock): idleness must be 0")
	// ErrLimitedDelayAligned: an AlignmentGroup on a LimitedDelay strategy
	// (not supported: alignment compares Partition.Watermark, which is not
	// a LimitedDelay partition's watermark once it is caught up).
	ErrLimitedDelayAligned = errors.New("kafkasource: a LimitedDelay source cannot be aligned")
)

// Kind is the kind of watermark a source partition generates (seed 002,
// "One minimum, N sources"; the names are Flink's WatermarkStrategy
// factories forBoundedOutOfOrderness, forMonotonousTimestamps and
// noWatermarks).
type Kind int

const (
	// BoundedOutOfOrderness: the watermark is the highest event time seen
	// less Strategy.MaxOutOfOrderness. The zero Kind.
	BoundedOutOfOrderness Kind = iota
	// Monotonous: the watermark is the highest event time seen less 1 ms,
	// for sources whose event times do not decrease (Kafka Streams'
	// partition time, seed 002).
	Monotonous
	// NoWatermarks: the watermark stays at mtime.MinTimestamp, for sources
	// read by processing-time-only pipelines. It still idles out.
	NoWatermarks
	// LimitedDelay: Beam Java KafkaIO's CustomTimestampPolicyWithLimitedDelay
	// with Strategy.MaxOutOfOrderness as its maxDelay d: the watermark is
	// min(highest event time, now) − d, and a partition that is caught up
	// and whose highest event time is more than d behind the wall clock
	// follows the wall clock, now − d (Partition.WatermarkAt). It never
	// idles out: a quiet partition's watermark keeps moving, so the windows
	// of a source that went quiet close (Kafka Streams' "suppress never
	// emits without new records"). A record more than d behind the wall
	// clock when it is read may be late.
	LimitedDelay
)

// String returns the kind's name as the datadriven tests and logs spell it.
func (k Kind) String() string {
	switch k {
	case BoundedOutOfOrderness:
		return "bounded"
	case Monotonous:
		return "monotonous"
	case NoWatermarks:
		return "none"
	case LimitedDelay:
		return "limited"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Strategy is the watermark strategy of one Kafka source, shared by all its
// partitions (seed 002: Flink's WatermarkStrategy with withIdleness and
// withWatermarkAlignment). The zero Strategy is valid: bounded
// out-of-orderness with a bound of 0, idleness off, no alignment.
type Strategy struct {
	// Kind of watermark. Default BoundedOutOfOrderness.
	Kind Kind
	// MaxOutOfOrderness is how far behind the highest event time seen a
	// record may still be on time, for BoundedOutOfOrderness (Flink's
	// forBoundedOutOfOrderness(Duration), StoatFlow's
	// max-out-of-orderness-ms), and LimitedDelay's maxDelay (also how far
	// behind the wall clock a caught-up partition's watermark trails).
	// Must be >= 0; default 0 (the watermark follows the highest event
	// time). Applied in whole milliseconds, rounded up, so the watermark
	// never passes max − MaxOutOfOrderness. Must be 0 for Monotonous and
	// NoWatermarks.
	MaxOutOfOrderness time.Duration
	// Idleness is the wall-clock time a partition may go without a record
	// before it is idle and excluded from the minimum (Flink's
	// withIdleness(Duration), StoatFlow's idleness-timeout-ms). Must be
	// >= 0; 0 switches idleness off (default). The engine-wide default of
	// seed 002 (5 minutes when a source sets none) is the caller's to
	// apply: here 0 always means off. Must be 0 for LimitedDelay.
	Idleness time.Duration
	// AlignmentGroup names the alignment group of the source (Flink's
	// withWatermarkAlignment(group, …), FLIP-217); "" (default) is not
	// aligned. An aligned source needs Idleness > 0 and a kind other than
	// NoWatermarks.
	AlignmentGroup string
	// MaxDrift is how far (event time) this source's partitions may run
	// ahead of their group's minimum before they are held (Flink's
	// maxAllowedWatermarkDrift). Must be >= 0; 0 holds any partition that is
	// ahead at all. Only with an AlignmentGroup. Seed 002 sizes it as
	// drift ≥ G + b(sparse) − b(held): the sparse source's normal gap
	// between records plus the difference in out-of-orderness bounds.
	MaxDrift time.Duration
}

// Validate checks the strategy's fields and their combinations, and returns
// the first violation (an unknown kind; then a negative duration, in field
// order; then the combinations, in the order below), wrapping one of
// ErrUnknownKind, ErrNegativeDuration (naming the field),
// ErrBoundWithoutBounded, ErrDriftWithoutGroup, ErrIdlenessWithLimitedDelay,
// ErrLimitedDelayAligned, ErrAlignmentWithoutIdleness or
// ErrAlignmentWithoutWatermarks:
//
//	Kind ∈ {BoundedOutOfOrderness, Monotonous, NoWatermarks, LimitedDelay}
//	MaxOutOfOrderness ≥ 0 ∧ (Kind ∈ {BoundedOutOfOrderness, LimitedDelay} ∨ MaxOutOfOrderness = 0)
//	Idleness ≥ 0
//	MaxDrift ≥ 0 ∧ (AlignmentGroup ≠ "" ∨ MaxDrift = 0)
//	Kind = LimitedDelay ⇒ Idleness = 0 ∧ AlignmentGroup = ""
//	AlignmentGroup ≠ "" ⇒ Idleness > 0 ∧ Kind ≠ NoWatermarks
//
// An aligned source without idleness is refused (a silent laggard would
// hold its group for good: seed 002, FLIP-217).
func (s Strategy) Validate() error {
	switch s.Kind {
	case BoundedOutOfOrderness, Monotonous, NoWatermarks, LimitedDelay:
	default:
		return fmt.Errorf("%w: %d", ErrUnknownKind, int(s.Kind))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"MaxOutOfOrderness", s.MaxOutOfOrderness}, {"Idleness", s.Idleness}, {"MaxDrift", s.MaxDrift}} {
		if f.d < 0 {
			return fmt.Errorf("%w: %s=%v", ErrNegativeDuration, f.name, f.d)
		}
	}
	switch {
	case s.Kind != BoundedOutOfOrderness && s.Kind != LimitedDelay && s.MaxOutOfOrderness != 0:
		return fmt.Errorf("%w: Kind=%v MaxOutOfOrderness=%v", ErrBoundWithoutBounded, s.Kind, s.MaxOutOfOrderness)
	case s.AlignmentGroup == "" && s.MaxDrift != 0:
		return fmt.Errorf("%w: MaxDrift=%v", ErrDriftWithoutGroup, s.MaxDrift)
	case s.Kind == LimitedDelay && s.Idleness != 0:
		return fmt.Errorf("%w: Idleness=%v", ErrIdlenessWithLimitedDelay, s.Idleness)
	case s.Kind == LimitedDelay && s.AlignmentGroup != "":
		return fmt.Errorf("%w: AlignmentGroup=%q", ErrLimitedDelayAligned, s.AlignmentGroup)
	case s.AlignmentGroup != "" && s.Idleness == 0:
		return fmt.Errorf("%w: AlignmentGroup=%q Idleness=0 (a silent laggard would hold its group for good)",
			ErrAlignmentWithoutIdleness, s.AlignmentGroup)
	case s.AlignmentGroup != "" && s.Kind == NoWatermarks:
		return fmt.Errorf("%w: AlignmentGroup=%q", ErrAlignmentWithoutWatermarks, s.AlignmentGroup)
	}
	return nil
}

// lagMillis is what the watermark trails the highest event time by, in
// ms: ⌈MaxOutOfOrderness / 1 ms⌉ for BoundedOutOfOrderness and
// LimitedDelay, 1 for Monotonous. Not used for NoWatermarks.
func (s Strategy) lagMillis() mtime.Time {
	if s.Kind == Monotonous {
		return 1
	}
	ms := s.MaxOutOfOrderness / time.Millisecond
	if s.MaxOutOfOrderness%time.Millisecond != 0 {
		ms++
	}
	return mtime.Time(ms)
}

// Partition is the watermark generator of one source partition: the
// highest event time it has seen, and its last activity for idleness. It
// does no I/O and reads no clock; it is not safe for concurrent use. The
// zero value is not usable; use NewPartition.
type Partition struct {
	s Strategy
	// lag is s.lagMillis(), in ms.
	lag mtime.Time
	// seen is false until the first record.
	seen bool
	// maxTS is the highest (clamped) event time observed; valid if seen.
	maxTS mtime.Time
	// lastTS is the (clamped) event time of the latest record observed, in
	// arrival order; valid if seen.
	lastTS mtime.Time
	// activity is the wall-clock instant of the last activity: MAX of the
	// assignment and the now of every Observe.
	activity time.Time
}

// NewPartition returns the generator of a partition assigned at assignedAt
// (wall clock), with strategy s, or an error from s.Validate. Its idleness
// clock starts at assignedAt, not at its first record, so a partition that
// never receives one still idles out after s.Idleness (seed 002: "The bug
// that made the clock start at registration").
func NewPartition(s Strategy, assignedAt time.Time) (*Partition, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Partition{s: s, lag: s.lagMillis(), activity: assignedAt}, nil
}

// clamp returns t within [mtime.MinTimestamp, mtime.MaxTimestamp].
func clamp(t mtime.Time) mtime.Time {
	return min(max(t, mtime.MinTimestamp), mtime.MaxTimestamp)
}

// Observe records one record of the partition with event time eventTime
// (mtime.Time, ms since the Unix epoch), consumed at wall-clock now:
//
//	e         = clamp(eventTime, mtime.MinTimestamp, mtime.MaxTimestamp)
//	maxTS'    = MAX(maxTS, e)          (maxTS = −∞ before the first record)
//	lastTS'   = e
//	activity' = MAX(activity, now)
//
// An event time outside Beam's range is clamped rather than refused: it
// comes from a producer, outside the process. A record stamped far in the
// future moves the watermark there all the same (seed 002, "Not every
// stalled partition is a quiet one"); the caller may warn about it. The
// MAX on activity keeps the idleness clock from going back when the caller
// passes an earlier now; Idle(now) is false right after Observe(…, now).
func (p *Partition) Observe(eventTime mtime.Time, now time.Time) {
	e := clamp(eventTime)
	if !p.seen || e > p.maxTS {
		p.maxTS = e
	}
	p.seen, p.lastTS = true, e
	if now.After(p.activity) {
		p.activity = now
	}
}

// Progress is the event-time part of a generator: what its records moved
// (whether it has seen one, its highest and its latest event time), not
// its idleness clock. A source keeps the Progress of each partition as of
// its last commit and puts it back when an attempt aborts (Rewind): the
// attempt's records are read again, and a watermark computed from them
// before they are output again would run ahead of them (a task woken
// without records reports it; downstream, the windows it closes drop the
// records as late).
type Progress struct {
	seen          bool
	maxTS, lastTS mtime.Time
}

// Progress returns p's event-time progress (see Progress).
func (p *Partition) Progress() Progress {
	return Progress{seen: p.seen, maxTS: p.maxTS, lastTS: p.lastTS}
}

// Rewind puts p's event-time progress back to pr, taken from p (or the
// zero Progress: no record seen, a generator as NewPartition makes it);
// the idleness clock stays (the wall-clock activity happened). Its
// watermark is then the one pr had: Watermark never decreases except here.
func (p *Partition) Rewind(pr Progress) {
	p.seen, p.maxTS, p.lastTS = pr.seen, pr.maxTS, pr.lastTS
}

// Touch moves the partition's idleness clock to now (activity' =
// MAX(activity, now)) without a record: its partition became reachable
// again after an outage, and records its producers held back may follow.
func (p *Partition) Touch(now time.Time) {
	if now.After(p.activity) {
		p.activity = now
	}
}

// Watermark returns the partition's watermark (mtime.Time, ms since the
// Unix epoch; seed 002, "One minimum, N sources"):
//
//	no record yet:          mtime.MinTimestamp
//	BoundedOutOfOrderness:  clamp(maxTS − ⌈MaxOutOfOrderness⌉ms)
//	Monotonous:             clamp(maxTS − 1 ms)
//	NoWatermarks:           mtime.MinTimestamp
//	LimitedDelay:           clamp(maxTS − ⌈MaxOutOfOrderness⌉ms), the term
//	                        its records give; its watermark is WatermarkAt's
//
// where clamp is to [mtime.MinTimestamp, mtime.MaxTimestamp]. It never
// decreases (maxTS only grows) but by Rewind, after an aborted attempt.
// In Beam a record is late when its timestamp is before the watermark, so a bounded watermark admits every
// record at most MaxOutOfOrderness behind the highest one seen; the
// monotonous 1 ms (Flink's forMonotonousTimestamps, seed 002) is 1 ms more
// cautious than Beam needs, and equals BoundedOutOfOrderness with a 1 ms
// bound. Flink's bounded generator subtracts a further 1 ms (its
// watermark W says no more records at or before W); seed 002 and this one
// do not. O(1).
func (p *Partition) Watermark() mtime.Time {
	if !p.seen || p.s.Kind == NoWatermarks {
		return mtime.MinTimestamp
	}
	// maxTS ≥ MinTimestamp ≈ −9.2e15 and lag ≤ MaxInt64 ns ≈ 9.2e12 ms, so
	// the difference does not overflow int64 before the clamp.
	return clamp(p.maxTS - p.lag)
}

// WatermarkWith returns the Watermark() the partition would have after
// Observe(eventTime, …), without observing it (mtime.Time, ms since the
// Unix epoch):
//
//	BoundedOutOfOrderness, Monotonous:  clamp(MAX(maxTS, e) − lag)
//
// with e = clamp(eventTime) and maxTS = −∞ before the first record. ok is
// false for NoWatermarks (no watermark moves) and LimitedDelay (a
// caught-up partition follows the wall clock, not its records: see
// WatermarkAt). The stage loop asks it while polling, before the step
// observes the record (sourcehead.Head.WatermarkWith). O(1).
func (p *Partition) WatermarkWith(eventTime mtime.Time) (wm mtime.Time, ok bool) {
	if p.s.Kind == NoWatermarks || p.s.Kind == LimitedDelay {
		return 0, false
	}
	e := clamp(eventTime)
	if p.seen && p.maxTS > e {
		e = p.maxTS
	}
	return clamp(e - p.lag), true
}

// WatermarkAt returns the partition's watermark at wall-clock now
// (mtime.Time, ms since the Unix epoch), caughtUp saying that its consumer
// has nothing left to read that it could see (the caller's notion, the one
// its idleness uses). For every kind but LimitedDelay it is Watermark().
// For LimitedDelay, with d = ⌈MaxOutOfOrderness⌉ms and n = now in ms, it is
// Beam Java KafkaIO's CustomTimestampPolicyWithLimitedDelay.getWatermark:
//
//	maxTS > n (a record stamped in the future):  n − d
//	caughtUp ∧ n − d > maxTS (quiet for over d):  n − d
//	otherwise:                                    maxTS − d
//
// with maxTS = −∞ before the first record (so a caught-up partition that
// never had one follows n − d, and one that is not caught up holds at
// mtime.MinTimestamp), clamped to [mtime.MinTimestamp,
// mtime.MaxTimestamp]. Java's policy holds a partition that has not read a
// record with a positive timestamp; here, as with idleness (seed 002: the
// clock starts at registration), an empty partition that is caught up does
// not hold its source. The backlog check time of Java's policy is now: the
// caller passes caughtUp as it knows it at now.
//
// It does not decrease as long as now does not and caughtUp stays (a
// record makes a caught-up partition not caught up until the consumer
// reaches its end again: the value may then drop by up to d, and the
// caller keeps the maximum it reported). A record read more than d after
// its event time may be behind it: the delay is the promise the strategy
// makes. O(1).
func (p *Partition) WatermarkAt(now time.Time, caughtUp bool) mtime.Time {
	if p.s.Kind != LimitedDelay {
		return p.Watermark()
	}
	n := mtime.FromTime(now)
	switch {
	case p.seen && p.maxTS > n:
		return clamp(n - p.lag)
	case caughtUp && (!p.seen || n-p.lag > p.maxTS):
		return clamp(n - p.lag)
	case !p.seen:
		return mtime.MinTimestamp
	}
	return clamp(p.maxTS - p.lag)
}

// Idle reports whether the partition is idle at wall-clock now (seed 002,
// "Idleness: the escape hatch"):
//
//	Idle(now) ⇔ Idleness > 0 ∧ now − activity ≥ Idleness
//
// where activity is the later of the assignment and the latest record's
// now (Observe). A partition that never had a record idles out Idleness
// after its assignment; a record makes it non-idle at once. An idle
// partition's watermark is unchanged; the caller excludes it from the
// minimum. O(1).
func (p *Partition) Idle(now time.Time) bool {
	return p.s.Idleness > 0 && now.Sub(p.activity) >= p.s.Idleness
}

// IdleAt returns the wall-clock instant at which the partition becomes idle
// unless a record arrives first, activity + Idleness, and false when
// idleness is off (Idleness = 0). The caller schedules a wake-up for it:
// an idle partition changes the minimum without any record arriving.
func (p *Partition) IdleAt() (time.Time, bool) {
	if p.s.Idleness == 0 {
		return time.Time{}, false
	}
	return p.activity.Add(p.s.Idleness), true
}

// LastEventTime returns the event time (mtime.Time, ms since the Unix
// epoch, clamped to Beam's range) of the latest record observed, in
// arrival order (not the highest), and false before the first record.
func (p *Partition) LastEventTime() (mtime.Time, bool) { return p.lastTS, p.seen }

// MaxEventTime returns the highest event time observed (mtime.Time, ms
// since the Unix epoch, clamped to Beam's range), the term the watermark is
// computed from, and false before the first record.
func (p *Partition) MaxEventTime() (mtime.Time, bool) { return p.maxTS, p.seen }

// LastActivity returns the wall-clock instant idleness is measured from:
// the later of the assignment and the latest record's now. It is what
// seed 002's GET /watermarks calls the liveness clock.
func (p *Partition) LastActivity() time.Time { return p.activity }

// Strategy returns the partition's strategy.
func (p *Partition) Strategy() Strategy { return p.s }

// View is one partition's state at one wall-clock instant: the row of the
// operator's GET /watermarks (seed 002) without its alignment columns,
// which Align computes for a group.
type View struct {
	// Watermark: see Partition.Watermark (mtime.Time, ms since the Unix
	// epoch).
	Watermark mtime.Time
	// Idle: Partition.Idle at the View's now.
	Idle bool
	// HasRecord is false until the first record; LastEventTime and
	// MaxEventTime are mtime.MinTimestamp until then.
	HasRecord bool
	// LastEventTime: see Partition.LastEventTime.
	LastEventTime mtime.Time
	// MaxEventTime: see Partition.MaxEventTime.
	MaxEventTime mtime.Time
	// LastActivity: see Partition.LastActivity (wall clock).
	LastActivity time.Time
	// IdleAt is when the partition becomes idle without a record (wall
	// clock); zero when Idleness is 0. See Partition.IdleAt.
	IdleAt time.Time
	// Idleness is the idleness timeout in force; 0 is off (seed 002's
	// idlenessTimeoutMs).
	Idleness time.Duration
	// Kind is the strategy's kind.
	Kind Kind
}

// View returns the partition's state at wall-clock now.
func (p *Partition) View(now time.Time) View {
	v := View{
		Watermark:     p.Watermark(),
		Idle:          p.Idle(now),
		HasRecord:     p.seen,
		LastEventTime: mtime.MinTimestamp,
		MaxEventTime:  mtime.MinTimestamp,
		LastActivity:  p.activity,
		Idleness:      p.s.Idleness,
		Kind:          p.s.Kind,
	}
	if p.seen {
		v.LastEventTime, v.MaxEventTime = p.lastTS, p.maxTS
	}
	v.IdleAt, _ = p.IdleAt()
	return v
}

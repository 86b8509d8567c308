package step

import (
	"context"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
)

// ProduceFunc takes one record of a head's state to commit (Head.Prepare):
// the step appends it to Ready.State, which the Loop produces into the
// attempt's transaction. It keeps key and value as they are (no copy) until
// the attempt is acknowledged or aborted. AnyPartition lets the producer's
// partitioner choose.
type ProduceFunc func(topic string, partition int32, key, value []byte) error

// RecordPreparer is implemented by a head whose records to commit carry
// more than a key and a value: headers and a timestamp (the Kafka source's
// dead letters, written as they were read). The step calls PrepareRecords
// after Prepare, on the same attempt, and puts the records in Ready.State
// after Prepare's; the head keeps their bytes as they are until the
// attempt is acknowledged or aborted.
type RecordPreparer interface {
	PrepareRecords() []Record
}

// StateSizer is implemented by a head that can say, before Prepare, about
// how many records Prepare will produce (a state store's pending writes,
// state.Manager.Pending): the step sizes Ready.State for them at once.
// Growing it record by record was 10% of a GroupByKey stage's CPU at 128
// partitions, where a backlog's last commit carried 1.66 M changelog
// records (a slice of 120-byte Records reallocated and copied at every
// growth). A hint only: Prepare may produce more or fewer.
type StateSizer interface {
	PendingState() int
}

// Work is what a head hands the step to run through the stage's bundles.
type Work struct {
	// Elements for the bundle's data input, encoded with the head output's
	// wire coder, in order.
	Elements [][]byte
	// Timers to fire, by timer family, each encoded as the SDK set it
	// (fnapi.Timer.Encoded). Work with timers runs in a bundle of its own,
	// at once: after the bundle already pending, before any later record.
	// Work with timers and elements runs its timers first, in a bundle of
	// their own, then its elements as if they came alone (a stateful head
	// fires the timers side inputs held back before the element that finds
	// them ready).
	Timers map[fnapi.TimerFamilyID][][]byte
	// Barrier says the bundle holding these elements must have run, and
	// its results reached the head (Head.Results), before the head's next
	// Advance of the same task: the elements may set timers that the next
	// watermark makes due (a stateful ParDo's elements).
	Barrier bool
	// Alone says the elements run at once in a bundle of their own, after
	// the bundle already pending and before any later record (as timers
	// do), so the Results that follow are about these elements only (a
	// splittable DoFn's restrictions: the head keeps each residual with the
	// task whose element it came from).
	Alone bool
	// Drain says the elements are splittable restrictions to truncate
	// first (the stage's drain descriptor: the DoFn's TruncateRestriction,
	// then its process step), because the application is draining.
	Drain bool
	// Point says the head's output watermark may have moved after this
	// work (Head.Hold): the step reports the task's output watermark here,
	// after the outputs of the work, when more of the task's records follow
	// in the batch (a TestStream segment).
	Point bool
}

func (w Work) empty() bool { return len(w.Elements) == 0 && len(w.Timers) == 0 }

// Head is the runner-side transform at the head of a stage: it turns the
// element records of a task's input partition into the work of the stage's
// bundles, and says how far the task's output watermark may go. Every head
// (Impulse, TestStream, GroupByKey, stateful ParDo, …) plugs into the step
// through this interface alone; the step calls it from the goroutine
// running Loop.Run.
//
// The order of calls in one attempt (Step.Decide; the rule is the
// partition's order: a report read between two records is a point in the
// stream, and the head acts on it there):
//
//   - Element for each element record of the batch, in offset order per
//     task;
//   - Advance(p, in) at every point where task p's input watermark moved
//     (right after the report that moved it, before the task's next
//     record) and once more at the end of the attempt for every task the
//     attempt touched or woke; before an Advance the step runs the pending
//     bundle if it holds Barrier work;
//   - Results after every bundle, with what the bundle returned (timers it
//     set or cleared); the work it returns runs at once, before the next
//     record;
//   - Hold(p) wherever the step computes task p's output watermark,
//     max(previous output, min(input watermark, Hold(p)));
//   - Prepare once at the end of the attempt, whose records go into the
//     Ready (Ready.State) with the attempt's outputs, reports and offsets;
//   - then Committed once the Loop's transaction carrying that Ready
//     committed (Step.Advance, the one acknowledgement), or Aborted for
//     the attempt's tasks if Decide failed or the transaction did not
//     commit (Step.Abort; the Loop then rewinds those tasks to their
//     committed offsets).
type Head interface {
	// Assign is called when task p (input partition p) is assigned, before
	// any of its records: the head restores the task's state.
	Assign(ctx context.Context, p int32) error
	// Revoke is called when task p has moved to another instance.
	Revoke(p int32)
	// Element handles one element record of task p: r.Key is the record's
	// Kafka key (the encoded Beam key on a keyed topic), r.Value the element
	// encoded with the upstream output's wire coder (the raw record's value
	// for a source stage). It returns the work to run now, in order.
	Element(p int32, r In) (Work, error)
	// Advance tells the head that task p's input watermark is in
	// (mtime.Time, ms; never less than in an earlier Advance of p). It
	// returns the work that is due at this point (GroupByKey panes, fired
	// timers).
	Advance(p int32, in mtime.Time) (Work, error)
	// Results hands the head what a bundle returned (Bundle.Timers). It
	// returns the work now due because of it (a timer set behind the input
	// watermark), run at once.
	Results(b *Bundle) (Work, error)
	// Hold is task p's hold: no element the head emits later has a
	// timestamp before it (mtime.Time, ms; mtime.MaxTimestamp when it
	// buffers nothing).
	Hold(p int32) mtime.Time
	// Idle reports whether task p's own input has been quiet for its
	// idleness timeout (a source partition without records, seed 002):
	// the task's report then says idle, and downstream leaves it out of
	// the minimum until it reports again without the flag (seed 000). A
	// task is also reported idle when every upstream is idle and it holds
	// nothing; heads that read no users' topics return false.
	Idle(p int32) bool
	// Pause returns the assigned tasks whose records must not be read now
	// (watermark alignment: a source partition ahead of its group's
	// minimum by more than the allowed drift, FLIP-217), sorted. The Loop
	// pauses their partitions and resumes each once it is no longer
	// listed; what was read stays read.
	Pause() []int32
	// Source describes task p's partition of a user's topic for its
	// reports (seed 002's GET /watermarks: last event time, idleness in
	// force, alignment); nil for heads that read no user's topic.
	Source(p int32) *pb.SourcePartition
	// ReachedEnd says task p's consumer has read its partition up to
	// offset, the partition's end as the broker knows it now (a partition
	// EOF event; only for stages whose Config.Consumer asks for them with
	// enable.partition.eof). A bounded source's head is done with the task
	// once offset reaches its end; other heads ignore it.
	ReachedEnd(p int32, offset int64)
	// Wake returns the assigned tasks that need an attempt now though no
	// record of theirs arrived (a processing-time timer is due, a source
	// partition went idle), sorted.
	Wake() []int32
	// Prepare hands over the attempt's state changes (changelog records,
	// dead letters) as records to commit with it, in order: the step
	// calls it once at the end of Decide and puts them in Ready.State.
	// The head keeps the changes pending until Committed or Aborted.
	Prepare(produce ProduceFunc) error
	// Committed makes the attempt's state changes durable locally: the
	// transaction that carried them committed (Step.Advance).
	Committed() error
	// Aborted discards the attempt's state changes of tasks ps: Decide
	// failed or its transaction did not commit (Step.Abort).
	Aborted(ps []int32) error
}

// Unskippable is implemented by a head one of whose input records can
// make work of more than itself: a TestStream's record is a segment (many
// elements and a watermark), a GroupByKey's element record can complete a
// pane of a data-driven trigger holding earlier records' values. The
// Loop never sets such a head's record aside (In.Skip, under the
// dead_letter error policy: stage.Config.ErrorPolicy): a record failing
// alone in its attempt fails the stage naming it, under either policy,
// since setting it aside would drop more than the record, or the wrong
// record. Unskippable says why, in words, for that error; "" means the
// head's records may be set aside after all (a Passthrough that is not
// an Impulse's).
type Unskippable interface {
	Unskippable() string
}

// Drainer is implemented by the heads of stages that read an unbounded
// input (a Kafka topic, a splittable DoFn's restrictions). Drain is Beam's
// drain of the application: the head stops taking new input, finishes or
// truncates what it holds, and lets its tasks' output watermarks go to the
// end of time, so that every window and timer downstream fires and the
// job ends. The Loop calls Drain once, between attempts, on its own
// goroutine; stopReading says the Loop must poll no more records of the
// stage's input (they stay unread and uncommitted: nothing is lost), as a
// Kafka source's head says; a splittable head goes on taking restrictions
// and truncates them.
type Drainer interface {
	Drain() (stopReading bool)
}

// EndsInput is implemented by heads whose every input record ends its
// task's input (an Impulse stage's Passthrough: the impulse record is the
// only record its input topic ever holds). The Loop then commits a batch
// holding such a record without waiting out the commit interval: the end
// of an input is what the stages downstream wait for.
type EndsInput interface {
	// EveryRecordEndsInput reports whether it is so for this head.
	EveryRecordEndsInput() bool
}

// Owing is implemented by heads that may stop an attempt's work at a
// budget and owe the rest (a GroupByKey firing at most a bounded number
// of values per task and attempt, gbk.HeadConfig.FireBudget): Owes says
// some task does, so the Loop's next poll takes only the records already
// fetched instead of waiting for the commit interval; Wake names the
// tasks.
type Owing interface {
	Owes() bool
}

// Due is implemented by heads that have work a watermark alone makes due
// (a GroupByKey's panes at their windows' ends). NextDue(p) is the least
// input watermark of task p at which Advance returns work (mtime.Time,
// ms); ok is false when no watermark would (nothing buffered, or
// firings the watermark alone does not decide). The Loop ends its poll
// once it reads a watermark report for task p at or past it, taking only
// the records already fetched (as for Owing), so the work runs and
// commits at once, not when the commit interval runs out: a watermark
// that moves with no record of its own would otherwise wait out a whole
// poll in every such stage (issue 24's steady run). Called on the Loop's
// goroutine, between attempts.
type Due interface {
	NextDue(p int32) (mtime.Time, bool)
}

// WatermarkAhead is implemented by a source head whose tasks' output
// watermarks follow their input records' Kafka timestamps (a Kafka source
// partition under BoundedOutOfOrderness or Monotonous, seed 002).
// WatermarkWith(p, ts) is the output watermark task p would report once it
// had taken a record of Kafka timestamp ts (ms since the Unix epoch) after
// what it took before (mtime.Time, ms); ok is false when p's watermark
// does not follow its records' Kafka timestamps or p is not assigned. The
// Loop asks it while polling, before Decide, so that the record that
// carries its tasks' watermark past the end of a window downstream
// (stage.Config.NextWindowEnd) commits at once instead of when the commit
// interval runs out: the GroupByKey downstream fires that window only
// once this stage reports it (issue 24's steady run). It must not change
// what the head reports. Called on the Loop's goroutine.
type WatermarkAhead interface {
	WatermarkWith(p int32, ts int64) (mtime.Time, bool)
}

// JobClockSource is implemented by the head of a stage that drives the
// job clock (Config.JobClock): a TestStream, whose
// AdvanceProcessingTime events move it. ProcessingTime is task p's job
// clock once the records it read in this attempt are committed (ms from 0
// at the job's start; Beam's synchronized processing time); ok is false
// when p read nothing in this attempt (its last reported value stands).
type JobClockSource interface {
	ProcessingTime(p int32) (ms int64, ok bool)
}

// JobClockReader is implemented by a head that reads processing time
// (processing-time triggers, processing-time timers). In a job with a job
// clock (Config.JobClock), the step calls SetProcessingTime(p, ms)
// before task p's Element and Advance calls whenever the task's
// synchronized processing time (the minimum over its upstream
// partitions' reports) is known or moved: the head then reads ms instead
// of its wall clock for that task, and Wake leaves the task out (the clock
// moves only with reports, and a report that moves it is a point). ms
// never decreases for a task between two Assigns.
type JobClockReader interface {
	SetProcessingTime(p int32, ms int64)
}

// Passthrough is the head of Reshuffle, Flatten and side-input stages (and,
// with an impulse element, of Impulse stages): each element record is one
// element of the bundle. It keeps no state and holds nothing.
type Passthrough struct {
	InternalInput
	// Impulse, if non-nil, replaces every record's value (Impulse stages:
	// the plan's record stands for the impulse element).
	Impulse []byte
}

var (
	_ Head        = (*Passthrough)(nil)
	_ EndsInput   = (*Passthrough)(nil)
	_ Unskippable = (*Passthrough)(nil)
)

// EveryRecordEndsInput implements EndsInput: an Impulse stage's one
// record ends its input.
func (h *Passthrough) EveryRecordEndsInput() bool { return h.Impulse != nil }

// Unskippable implements Unskippable: an Impulse stage's one record is
// every element the pipeline creates from it (a Create's values); any
// other record is one element ("").
func (h *Passthrough) Unskippable() string {
	if h.Impulse != nil {
		return "an Impulse's record is every element created from it: setting it aside would drop them all"
	}
	return ""
}

// Assign implements Head: a Passthrough keeps no state to restore.
func (h *Passthrough) Assign(context.Context, int32) error { return nil }

// Revoke implements Head: nothing to drop.
func (h *Passthrough) Revoke(int32) {}

// Element implements Head: the record's element (or the impulse element)
// is one element of the bundle.
func (h *Passthrough) Element(_ int32, r In) (Work, error) {
	if h.Impulse != nil {
		return Work{Elements: [][]byte{h.Impulse}}, nil
	}
	return Work{Elements: [][]byte{r.Value}}, nil
}

// Advance implements Head: nothing comes due with the watermark.
func (h *Passthrough) Advance(int32, mtime.Time) (Work, error) { return Work{}, nil }

// Results implements Head: a bundle's results make nothing due.
func (h *Passthrough) Results(*Bundle) (Work, error) { return Work{}, nil }

// Hold implements Head: nothing is held (mtime.MaxTimestamp).
func (h *Passthrough) Hold(int32) mtime.Time { return mtime.MaxTimestamp }

// Prepare implements Head: no state to commit.
func (h *Passthrough) Prepare(ProduceFunc) error { return nil }

// Committed implements Head: no state to apply.
func (h *Passthrough) Committed() error { return nil }

// Aborted implements Head: no state to drop.
func (h *Passthrough) Aborted([]int32) error { return nil }

// InternalInput gives a Head the methods that concern only heads reading a
// user's topic (Idle, ReachedEnd, Source, Pause: never idle, no end, no
// source details, nothing to pause) and those of heads without work that
// comes due without a record (Wake). A head embeds it and defines the rest
// (the stateful head defines Wake itself; the Kafka source head all).
type InternalInput struct{}

// Idle implements Head: an internal topic's task is idle only through its
// upstreams (Step computes that).
func (InternalInput) Idle(int32) bool { return false }

// Reachability is implemented by heads whose idleness depends on whether
// their partitions can be fetched (the Kafka source: a partition whose
// leader is gone is not quiet, it is unreachable, and must not idle out).
// The loop calls SetReachable for each assigned task at every statistics
// event of its consumer (StatsInterval), with PartitionsReachable's answer;
// a partition the statistics do not list is not reported.
type Reachability interface {
	SetReachable(p int32, reachable bool)
}

// LogEnds is implemented by heads whose idleness depends on what the
// broker holds past each partition's consumer position (the Kafka source:
// issue 21, section 2). librdkafka's partition EOF says only that the
// consumer was handed everything it could be: under read_committed it
// comes at the last stable offset while a transaction is open, and a
// fetch not answered yet, paused or stopped leaves an old EOF standing
// while records are written past it. The loop asks the broker (ListOffsets,
// latest, read_uncommitted and read_committed) for the partitions
// LogEndsWanted names, at most every LogEndInterval, and hands each answer
// to SetLogEnd with the wall-clock instant it sent the request; it calls
// Rewound when it seeks a partition back outside an abort (a task side
// inputs hold back).
type LogEnds interface {
	// LogEndsWanted returns the assigned partitions whose log end the
	// loop should ask for now, sorted.
	LogEndsWanted() []int32
	// SetLogEnd hands over the broker's answer for partition p: its high
	// watermark and last stable offset (Kafka offsets), asked at
	// wall-clock asked.
	SetLogEnd(p int32, high, stable int64, asked time.Time)
	// Rewound says partition p's consumer was sought back: its last
	// partition EOF is stale.
	Rewound(p int32)
}

// LogEndInterval is how often at most a loop asks the broker for the log
// ends its head wants (LogEnds): a partition goes idle up to this much
// plus one round trip after its idleness timeout.
const LogEndInterval = 500 * time.Millisecond

// ReachedEnd implements Head: an internal topic has no end to reach.
func (InternalInput) ReachedEnd(int32, int64) {}

// Source implements Head: no user's topic.
func (InternalInput) Source(int32) *pb.SourcePartition { return nil }

// Pause implements Head: no watermark alignment.
func (InternalInput) Pause() []int32 { return nil }

// Wake implements Head: nothing comes due without a record.
func (InternalInput) Wake() []int32 { return nil }

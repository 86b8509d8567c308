package stage

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
)

// Spec is what a Loop runs: one ExecutableStage of the plan, narrowed to
// what the stage package needs (the runner builds it from runner/plan).
type Spec struct {
	// ApplicationID prefixes the consumer group and the transactional id.
	ApplicationID string
	// Name is the stage's name: the consumer group is
	// "<ApplicationID>.<Name>", reports carry it.
	Name string
	// InputTopic is read by the stage's tasks, one task per partition;
	// Partitions is its partition count (totalSourcePartitions of the
	// stage's reports).
	InputTopic string
	Partitions int32
	// GrowingInput says InputTopic is a user's topic whose partition count
	// may grow while the job runs (Kafka partitions are only ever added):
	// the Loop asks for the count every PartitionCheck (500 ms) and on an
	// assignment of a partition beyond it, and every task's next report
	// carries the new total, which re-opens the downstream hold until the
	// new partitions have reported (seed 000).
	GrowingInput bool
	// RawInput says the input records are not Envelopes: every record is an
	// element record for the head as it is (a source stage: Impulse,
	// TestStream, whose records the plan transaction wrote). Such a stage
	// has no Upstreams.
	RawInput bool
	// Upstreams are the stages whose reports arrive on InputTopic, sorted.
	// A task's input watermark is the minimum over them; with none it is
	// the end of time (the input is complete once read).
	Upstreams []string
	// HeadOutput is the PCollection the head produces.
	HeadOutput string
	// Outputs are the PCollections the stage writes, and where.
	Outputs []Output
	// Sinks are users' topics the stage writes plain records to
	// (runner/kafkaio.Write); no report goes there.
	Sinks []Sink
}

// Sink is a user's topic a stage writes the elements of a PCollection to,
// as plain records, in its transactions.
type Sink struct {
	PCollection string
	Topic       string
	// Partitions of Topic: a record with a key goes to
	// javapartition.ForKey(key, Partitions), as the Java client's default
	// partitioner would put it; a record without a key to AnyPartition.
	Partitions int32
	// Decode turns an element (encoded with the PCollection's wire coder)
	// into the record's key (nil: none) and value, and its event time
	// (the record's timestamp). Required.
	Decode func(element []byte) (key, value []byte, eventTime mtime.Time, err error)
}

// Output is one PCollection a stage writes, to one or more topics.
type Output struct {
	PCollection string
	Topics      []OutputTopic
	// IntervalWindows: the PCollection's window coder is Beam's interval
	// window coder (beam:coder:interval_window:v1), so an element may be
	// in several windows (sliding windows). Each such element is written
	// as one record per window (ExplodeWindows), as the Beam model counts
	// it (a value in N windows is N elements) and as Prism stores a
	// stage's outputs; otherwise a downstream WindowInto, which the Go SDK
	// (exec.WindowInto) assigns from the timestamp alone, would make N
	// elements one.
	IntervalWindows bool
}

// OutputTopic is one topic an Output goes to.
type OutputTopic struct {
	Name       string
	Partitions int32
	// Keyed: the topic is a keyed stage's input (GroupByKey, stateful
	// ParDo): a record's Kafka key is the element's encoded Beam key and
	// its partition KeyPartition(key, Partitions), so equal keys meet on
	// one task. Otherwise records go round-robin, without a key.
	Keyed bool
	// Copies is how many times each element is written (2 when a Flatten
	// takes the same PCollection twice). At least 1.
	Copies int
}

// In is one input record of a batch, as polled: its task (input
// partition), offset, Kafka key and value, timestamp and headers. Head.Element
// gets it with Value replaced by the element for an Envelope record.
type In struct {
	Task   int32
	Offset int64
	Key    []byte
	Value  []byte
	// Timestamp is the record's Kafka timestamp (ms since the Unix epoch;
	// 0 if it has none); LogAppendTime says the broker set it (the topic's
	// message.timestamp.type=LogAppendTime), else the producer did
	// (CreateTime).
	Timestamp     int64
	LogAppendTime bool
	// Headers are the record's headers, in order.
	Headers []Header
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Offset is the offset a task commits with the attempt (the next record
// to read) and its checkpoint (TaskCheckpoint, base64), the consumed
// offset's metadata.
type Offset struct {
	Task     int32
	Next     int64
	Metadata string
}

// Ready is one attempt's decision, for the Loop to carry out in one Kafka
// transaction, in this order: Records, then the head's Prepare, then
// Offsets; after the commit, Committed. Like raft's Ready, it says what
// must happen and in what order; the step did no Kafka I/O to make it.
type Ready struct {
	// Records are the attempt's records in produce order: every bundle's
	// outputs, then its Extra records; each task's reports after the
	// outputs they cover and before the outputs of its later records. On
	// the output topics, every run of reports with no output record
	// between them (the tasks' reports at the end of the attempt, above
	// all) is one Envelope per partition holding them all, in order
	// (Envelope.reports): Q records for the run, not one per task and
	// partition. The report topic gets one record per report. With
	// StepConfig.Spill, Records are only those after the last Spill: the
	// first Spilled records of the attempt went to Spill.
	Records []Record
	// Spilled is how many records Spill took before Decide returned.
	Spilled int
	// Offsets are the touched tasks' offsets, sorted by task.
	Offsets []Offset
	// Blocked[p] is the offset of the first record of task p that side
	// inputs held back: Offsets has it as task p's next offset, and the
	// Loop seeks the task back there and pauses it (sidegate.go).
	Blocked map[int32]int64
	// Committed are the bundles' callbacks, to call once the transaction
	// committed.
	Committed []func()
	// Bundles, ElementsIn (work elements run), ElementsOut (element
	// records produced) and ReportsOut (report records produced) count
	// the attempt.
	Bundles, ElementsIn, ElementsOut, ReportsOut uint64
}

// SetPartitions sets the input topic's partition count (the total of the
// reports); n smaller than the current count is ignored (partitions are
// never removed). It reports whether the count changed.
func (s *Step) SetPartitions(n int32) bool {
	if n <= s.spec.Partitions {
		return false
	}
	s.spec.Partitions = n
	return true
}

// ErrTimerLoop: bundles kept returning due work (timers setting timers
// already due) for MaxRounds bundles at one point of one attempt. The
// attempt aborts (retryable, but it will loop again: a DoFn bug).
var ErrTimerLoop = errors.New("stage: timers keep firing timers")

// Step is the commit decision of one stage, a pure core in the sense of
// etcd's raft: given a batch of decoded input records and the tasks'
// watermark state it runs the head and the bundles and returns a Ready;
// it does no Kafka I/O, starts no goroutine and reads no clock (the
// head's clock, for processing-time timers, is the head's). The Loop is
// the I/O shell around it. Not safe for concurrent use.
//
// The rules, for each task p of the batch, in the partition's order:
//
//   - an element record gives the head's work; elements join the pending
//     bundle, timers run in a bundle of their own;
//   - a point is a report that moves p's input watermark, or work the head
//     marks as a Point; at a point the pending bundle runs first if it
//     holds Barrier work, then Advance(p, in) and its work, so a timer due
//     at the point fires before p's next record whatever the batching;
//   - at a point, if p has element records later in the batch, the pending
//     bundle runs and p's report follows its outputs:
//     out' = max(out, min(in, Hold(p))), reported when out' > out;
//   - at the end: for every touched or woken task, Advance(p, in) and its
//     work, the last bundle, then out' and the report as above (always for
//     a task that never reported: downstream holds until it does); a task
//     side inputs hold back (Ready.Blocked) keeps its output watermark,
//     since its input is not read past the held record.
//
// Every bundle's results go back to the head (Results) before anything
// else runs.
type Step struct {
	spec    Spec
	head    Head
	process ProcessFunc
	keyOf   map[string]func([]byte) ([]byte, error)
	gate    SideInputGate
	report  string
	// instance goes into every report (StepConfig.Instance).
	instance string
	rounds   int
	// jobClock is StepConfig.JobClock.
	jobClock bool
	// rr is the round-robin cursor of each unkeyed output topic.
	rr map[string]int32
	// spill and spillBytes are StepConfig.Spill and SpillBytes.
	spill      func([]Record) error
	spillBytes int
}

// StepConfig configures a Step.
type StepConfig struct {
	Spec Spec
	// Head is the stage's head. Required.
	Head Head
	// Process runs a bundle; nil means the stage has no SDK transforms:
	// the work's elements are the stage's HeadOutput as they are.
	Process ProcessFunc
	// KeyOf extracts the encoded Beam key of an element of a PCollection,
	// for its keyed output topics. Required for such outputs.
	KeyOf map[string]func(element []byte) ([]byte, error)
	// SideInputs holds back elements whose side input windows are not
	// complete; nil without side inputs.
	SideInputs SideInputGate
	// ReportTopic receives a copy of every report. Required.
	ReportTopic string
	// Instance is written into every report (WatermarkReport.instance):
	// the id of the runner instance owning the tasks. Optional.
	Instance string
	// MaxRounds bounds the bundles run at one point because earlier
	// bundles' results made work due. Default 1000.
	MaxRounds int
	// JobClock says the job runs on a job clock (it has a TestStream):
	// processing time is the synthetic clock the TestStream's
	// AdvanceProcessingTime events move (JobClockSource), carried in every
	// report (processing_time_millis) after the data it covers, and a
	// task's processing time is the minimum over its upstream partitions'
	// latest reports (Beam's synchronized processing time). A report that
	// moves it is a point, as one that moves the watermark: the head
	// (JobClockReader) fires its processing-time triggers and timers there,
	// before the task's next record, whatever the batching. Default false:
	// every head reads its own wall clock.
	JobClock bool
	// Spill, if set, takes an attempt's records before Decide returns,
	// whenever those not yet taken hold SpillBytes of keys and values or
	// more: in order, and before every record of Ready.Records, which then
	// holds only those after the last Spill. It must not keep the records
	// or their bytes after it returns (the step reuses both). So an
	// attempt's output, a file read in one bundle or every window of a
	// job firing at its end, is never held whole in memory. The stage
	// loop's Spill writes them to a local file that its transaction
	// replays before Ready.Records (Loop.spill); an error from Spill fails
	// Decide. Nil keeps every record in Ready.Records.
	Spill func(records []Record) error
	// SpillBytes is the threshold of Spill. Default 4 MiB.
	SpillBytes int
}

// NewStep returns the step. An output to a keyed topic without a KeyOf is
// an error.
func NewStep(cfg StepConfig) (*Step, error) {
	if cfg.Head == nil || cfg.ReportTopic == "" || cfg.Spec.Name == "" {
		return nil, errors.New("stage: StepConfig needs Spec.Name, Head and ReportTopic")
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = 1000
	}
	for _, o := range cfg.Spec.Outputs {
		for _, t := range o.Topics {
			if t.Partitions <= 0 || t.Copies <= 0 {
				return nil, fmt.Errorf("stage %s: output %s to %s: %d partitions, %d copies", cfg.Spec.Name, o.PCollection, t.Name, t.Partitions, t.Copies)
			}
			if t.Keyed && cfg.KeyOf[o.PCollection] == nil {
				return nil, fmt.Errorf("stage %s: output %s goes to keyed topic %s but has no KeyOf", cfg.Spec.Name, o.PCollection, t.Name)
			}
		}
	}
	for _, k := range cfg.Spec.Sinks {
		if k.Decode == nil || k.Partitions <= 0 || k.Topic == "" {
			return nil, fmt.Errorf("stage %s: sink of %s to %q: needs a Decode and a positive partition count (%d)", cfg.Spec.Name, k.PCollection, k.Topic, k.Partitions)
		}
	}
	if cfg.SpillBytes <= 0 {
		cfg.SpillBytes = defaultSpillBytes
	}
	return &Step{spec: cfg.Spec, head: cfg.Head, process: cfg.Process, keyOf: cfg.KeyOf, gate: cfg.SideInputs, report: cfg.ReportTopic, instance: cfg.Instance, rounds: cfg.MaxRounds, jobClock: cfg.JobClock, rr: map[string]int32{}, spill: cfg.Spill, spillBytes: cfg.SpillBytes}, nil
}

// defaultSpillBytes is StepConfig.SpillBytes's default: 4 MiB of record
// keys and values, a few times librdkafka's default batch (1 MB).
const defaultSpillBytes = 4 << 20

// attempt is the state of one Decide call.
type attempt struct {
	s     *Step
	ctx   context.Context
	tasks map[int32]*task
	ready *Ready
	// pending is the bundle being collected; barrier says it holds Barrier
	// work.
	pending [][]byte
	barrier bool
	// arena is the chunk output envelopes are cut from (envelope.AppendElement).
	arena []byte
	// reports are the reports made since the last output record was
	// appended, in the order made: they go to the output topics as one
	// batch per partition before the next output record, or at the end
	// of the attempt (flushReports).
	reports []*pb.WatermarkReport
	// held is the bytes of keys and values in ready.Records (Spill).
	held int
}

// Decide runs one attempt over batch (records in poll order; each task's in
// offset order) for tasks (the Loop's, by partition; Decide updates their
// watermark state, which the Loop restores from the checkpoint if the
// transaction aborts). woken maps tasks the head woke (Head.Wake) without
// records in the batch to their current offset: they commit that offset
// again with their new checkpoint.
//
// An error means the attempt must be aborted: nothing of it may be
// committed, and the head's changes are dropped with Aborted.
func (s *Step) Decide(ctx context.Context, tasks map[int32]*task, batch []In, woken map[int32]int64) (*Ready, error) {
	// Room for one output record per input record (a stateless stage's
	// shape) from the start, not grown by doubling.
	a := &attempt{s: s, ctx: ctx, tasks: tasks, ready: &Ready{Records: make([]Record, 0, len(batch)+8)}}
	// last[p] is the index of task p's last element record in batch.
	last := map[int32]int{}
	// elements[i] is batch[i]'s element, reports[i] its reports (Envelope
	// records; both nil for raw input).
	var elements [][]byte
	var reports [][]*pb.WatermarkReport
	if !s.spec.RawInput {
		elements, reports = make([][]byte, len(batch)), make([][]*pb.WatermarkReport, len(batch))
	}
	for i, m := range batch {
		if tasks[m.Task] == nil {
			return nil, fmt.Errorf("stage %s: record of task %d, which is not assigned", s.spec.Name, m.Task)
		}
		if s.spec.RawInput {
			last[m.Task] = i
			continue
		}
		e, r, err := envelope.Decode(m.Value)
		if errors.Is(err, envelope.ErrEmpty) {
			return nil, fmt.Errorf("stage %s: record at %s[%d]@%d: empty Envelope", s.spec.Name, s.spec.InputTopic, m.Task, m.Offset)
		}
		if err != nil {
			return nil, fmt.Errorf("stage %s: record at %s[%d]@%d is not an Envelope: %w", s.spec.Name, s.spec.InputTopic, m.Task, m.Offset, err)
		}
		if e != nil {
			last[m.Task] = i
		}
		elements[i], reports[i] = e, r
	}
	next := map[int32]int64{}
	seen := map[int32]bool{}
	for i, m := range batch {
		p, t := m.Task, tasks[m.Task]
		if _, held := a.ready.Blocked[p]; held {
			continue // behind a record side inputs hold back
		}
		if !seen[p] {
			seen[p] = true
			a.syncClock(p, t)
			// A task just restored: the head learns its input watermark
			// before its first record (timers already due fire first).
			if in, _ := t.inputWatermark(); t.advanced == mtime.MinTimestamp && in > t.advanced {
				if err := a.advance(p, t); err != nil {
					return nil, err
				}
			}
		}
		value := m.Value
		var report []*pb.WatermarkReport
		if !s.spec.RawInput {
			if elements[i] != nil {
				value = elements[i]
			} else {
				report = reports[i]
			}
		}
		if report == nil && s.gate != nil {
			ok, err := s.gate.Ready(value)
			if err != nil {
				return nil, fmt.Errorf("stage %s: side inputs: %w", s.spec.Name, err)
			}
			if !ok {
				if a.ready.Blocked == nil {
					a.ready.Blocked = map[int32]int64{}
				}
				a.ready.Blocked[p] = m.Offset
				next[p] = m.Offset // touched: advanced and reported at the end like any task
				continue
			}
		}
		next[p] = m.Offset + 1
		if report != nil {
			// A batch's reports were made at one place of one upstream
			// transaction: observed in order, then one point.
			for _, r := range report {
				if err := t.observe(r); err != nil {
					return nil, fmt.Errorf("stage %s: report at %s[%d]@%d: %w", s.spec.Name, s.spec.InputTopic, p, m.Offset, err)
				}
			}
			clockMoved := a.syncClock(p, t)
			if in, _ := t.inputWatermark(); in > t.advanced || clockMoved {
				if err := a.point(p, t, last[p] > i, clockMoved); err != nil {
					return nil, err
				}
			}
			continue
		}
		rec := m
		rec.Value = value
		w, err := s.head.Element(p, rec)
		if err != nil {
			return nil, fmt.Errorf("stage %s: element at %s[%d]@%d: %w", s.spec.Name, s.spec.InputTopic, p, m.Offset, err)
		}
		if err := a.add(w); err != nil {
			return nil, err
		}
		if w.Point {
			if err := a.point(p, t, last[p] > i, false); err != nil {
				return nil, err
			}
		}
	}
	for p, off := range woken {
		if _, ok := next[p]; !ok && tasks[p] != nil {
			next[p] = off
		}
	}
	if len(next) == 0 {
		a.flushReports()
		return a.ready, nil
	}
	ps := slices.Sorted(maps.Keys(next))
	for _, p := range ps {
		if err := a.advance(p, tasks[p]); err != nil {
			return nil, err
		}
	}
	if err := a.flush(); err != nil {
		return nil, err
	}
	for _, p := range ps {
		t := tasks[p]
		if _, held := a.ready.Blocked[p]; held {
			// The held record is not read: the task's input is not
			// complete past it (a source task's input watermark would be
			// the end of time), so its output watermark stays.
			if !t.reported {
				a.appendReports(p, t, t.out, false)
				t.reported = true
			}
		} else {
			a.reportIfMoved(p, t, !t.reported)
		}
		md, err := t.checkpoint()
		if err != nil {
			return nil, err
		}
		a.ready.Offsets = append(a.ready.Offsets, Offset{Task: p, Next: next[p], Metadata: md})
	}
	a.flushReports()
	return a.ready, nil
}

// advance runs the pending bundle if it holds Barrier work, then
// Advance(p, in) and its work.
func (a *attempt) advance(p int32, t *task) error {
	if a.barrier {
		if err := a.flush(); err != nil {
			return err
		}
	}
	in, _ := t.inputWatermark()
	w, err := a.s.head.Advance(p, in)
	if err != nil {
		return fmt.Errorf("stage %s: task %d: %w", a.s.spec.Name, p, err)
	}
	t.advanced = in
	return a.add(w)
}

// point is task p's point in the stream (a report that moved its input
// watermark or, clockMoved, its job clock; or work marked Point): Advance
// if either moved, and p's report before p's later element records if any
// follow (more) and the output watermark or the job clock moved.
func (a *attempt) point(p int32, t *task, more, clockMoved bool) error {
	if in, _ := t.inputWatermark(); in > t.advanced || clockMoved {
		if err := a.advance(p, t); err != nil {
			return err
		}
	}
	if !more {
		return nil
	}
	if out, idle := a.output(p, t); out <= t.out && idle == t.idle && t.reported && !a.clockToReport(p, t) {
		return nil
	}
	if err := a.flush(); err != nil {
		return err
	}
	a.reportIfMoved(p, t, !t.reported)
	return nil
}

// output is task p's output watermark now, max(out, min(in, Hold(p))), and
// whether it is idle: its own input quiet (Head.Idle), or every upstream
// idle and nothing held.
func (a *attempt) output(p int32, t *task) (mtime.Time, bool) {
	in, idle := t.inputWatermark()
	hold := a.s.head.Hold(p)
	return max(t.out, min(in, hold)), idle && hold == mtime.MaxTimestamp || a.s.head.Idle(p)
}

// reportIfMoved appends task p's report if its output watermark, its idle
// flag or its source details (Head.Source) changed (or always, with force)
// and records it as reported.
func (a *attempt) reportIfMoved(p int32, t *task, force bool) {
	out, idle := a.output(p, t)
	src := a.s.head.Source(p)
	if out == t.out && idle == t.idle && proto.Equal(src, t.source) && !force && !a.clockToReport(p, t) {
		return
	}
	a.appendReports(p, t, out, idle)
	t.out, t.idle, t.source, t.reported = out, idle, src, true
}

// clock is task p's job clock now (StepConfig.JobClock): a
// JobClockSource head's, else the task's input clock (the minimum over its
// upstream partitions' reports); ok is false without a job clock or when
// no upstream report carried one yet.
func (a *attempt) clock(p int32, t *task) (ms int64, ok bool) {
	if !a.s.jobClock {
		return 0, false
	}
	if src, is := a.s.head.(JobClockSource); is {
		if ms, ok := src.ProcessingTime(p); ok {
			return ms, true
		}
		return t.clockOut, t.hasClockOut
	}
	return t.inputClock()
}

// syncClock hands task p's job clock to a JobClockReader head when it is
// known and ahead of what the head last had, and reports whether it moved.
func (a *attempt) syncClock(p int32, t *task) bool {
	ms, ok := a.clock(p, t)
	if !ok || t.hasClockAdvanced && ms <= t.clockAdvanced {
		return false
	}
	if r, is := a.s.head.(JobClockReader); is {
		r.SetProcessingTime(p, ms)
	}
	t.clockAdvanced, t.hasClockAdvanced = ms, true
	return true
}

// clockToReport says task p's job clock differs from the one it last
// reported: its next report must carry it.
func (a *attempt) clockToReport(p int32, t *task) bool {
	ms, ok := a.clock(p, t)
	return ok && (!t.hasClockOut || ms != t.clockOut)
}

// add takes work: elements join the pending bundle; timers, and elements
// marked Alone, run at once in a bundle of their own, after the pending one.
func (a *attempt) add(w Work) error {
	if len(w.Timers) > 0 && len(w.Elements) > 0 {
		// Timers first, in a bundle of their own (Work.Timers).
		if err := a.add(Work{Timers: w.Timers}); err != nil {
			return err
		}
		w.Timers = nil
	}
	if len(w.Timers) > 0 || w.Alone && len(w.Elements) > 0 {
		if err := a.flush(); err != nil {
			return err
		}
		return a.run(w)
	}
	a.pending = append(a.pending, w.Elements...)
	a.barrier = a.barrier || w.Barrier && len(w.Elements) > 0
	return nil
}

// flush runs the pending bundle, if any.
func (a *attempt) flush() error {
	if len(a.pending) == 0 {
		a.barrier = false
		return nil
	}
	w := Work{Elements: a.pending}
	a.pending, a.barrier = nil, false
	return a.run(w)
}

// run runs w as one bundle, hands its results to the head, and runs the
// work they make due, round after round, up to MaxRounds.
func (a *attempt) run(w Work) error {
	for round := 0; !w.empty(); round++ {
		if round >= a.s.rounds {
			return fmt.Errorf("%w: stage %s: %d bundles at one point", ErrTimerLoop, a.s.spec.Name, round)
		}
		b, err := a.bundle(w)
		if err != nil {
			return err
		}
		if w, err = a.s.head.Results(b); err != nil {
			return fmt.Errorf("stage %s: bundle results: %w", a.s.spec.Name, err)
		}
	}
	return nil
}

// bundle runs one bundle of w and appends its records.
func (a *attempt) bundle(w Work) (*Bundle, error) {
	var b *Bundle
	if a.s.process != nil {
		var err error
		if b, err = a.s.process(a.ctx, w, a.emit); err != nil {
			return nil, fmt.Errorf("stage %s: bundle of %d elements: %w", a.s.spec.Name, len(w.Elements), err)
		}
	} else {
		if len(w.Timers) > 0 {
			return nil, fmt.Errorf("stage %s: timers to fire in a stage without SDK transforms", a.s.spec.Name)
		}
		b = &Bundle{Outputs: map[string][][]byte{a.s.spec.HeadOutput: w.Elements}}
	}
	a.ready.Bundles++
	a.ready.ElementsIn += uint64(len(w.Elements))
	if err := a.appendOutputs(b); err != nil {
		return nil, err
	}
	if err := a.appendSinks(b); err != nil {
		return nil, err
	}
	for _, r := range b.Extra {
		a.append(r)
	}
	if err := a.spillIfFull(); err != nil {
		return nil, err
	}
	if b.Committed != nil {
		a.ready.Committed = append(a.ready.Committed, b.Committed)
	}
	return b, nil
}

// emit is the Emit a bundle streams its outputs to: their records, as
// appendOutputs and appendSinks make them, then a Spill if they fill one.
func (a *attempt) emit(pcollection string, es [][]byte) error {
	for _, o := range a.s.spec.Outputs {
		if o.PCollection == pcollection {
			if err := a.appendOutputElements(o, es); err != nil {
				return err
			}
		}
	}
	for _, k := range a.s.spec.Sinks {
		if k.PCollection == pcollection {
			if err := a.appendSinkElements(k, es); err != nil {
				return err
			}
		}
	}
	return a.spillIfFull()
}

// append appends r to the attempt's records.
func (a *attempt) append(r Record) {
	a.ready.Records = append(a.ready.Records, r)
	a.held += len(r.Key) + len(r.Value)
}

// spillIfFull hands the records to StepConfig.Spill once they hold
// SpillBytes, then reuses their slice and the envelope arena: Spill keeps
// neither.
func (a *attempt) spillIfFull() error {
	if a.s.spill == nil || a.held < a.s.spillBytes {
		return nil
	}
	if err := a.s.spill(a.ready.Records); err != nil {
		return fmt.Errorf("stage %s: %w", a.s.spec.Name, err)
	}
	a.ready.Spilled += len(a.ready.Records)
	clear(a.ready.Records)
	a.ready.Records = a.ready.Records[:0]
	a.arena = a.arena[:0]
	a.held = 0
	return nil
}

// appendOutputs routes a bundle's outputs to their topics: a keyed topic
// by the element's key, others round-robin.
func (a *attempt) appendOutputs(b *Bundle) error {
	for _, o := range a.s.spec.Outputs {
		if err := a.appendOutputElements(o, b.Outputs[o.PCollection]); err != nil {
			return err
		}
	}
	return nil
}

// appendOutputElements appends elements es of output o (one per window of
// an interval-window PCollection: ExplodeWindows).
func (a *attempt) appendOutputElements(o Output, es [][]byte) error {
	for _, e := range es {
		if !o.IntervalWindows {
			if err := a.appendOutput(o, e); err != nil {
				return err
			}
			continue
		}
		ws, err := ExplodeWindows(e)
		if err != nil {
			return fmt.Errorf("stage %s: an element of %s: %w", a.s.spec.Name, o.PCollection, err)
		}
		for _, e := range ws {
			if err := a.appendOutput(o, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendOutput appends element e of output o to each of o's topics.
func (a *attempt) appendOutput(o Output, e []byte) error {
	v := envelope.AppendElement(&a.arena, e)
	var key []byte
	var err error
	for _, t := range o.Topics {
		if t.Keyed && key == nil {
			if key, err = a.s.keyOf[o.PCollection](e); err != nil {
				return fmt.Errorf("stage %s: key of an element of %s: %w", a.s.spec.Name, o.PCollection, err)
			}
		}
		for c := 0; c < t.Copies; c++ {
			a.flushReports() // the reports before it cover less
			r := Record{Topic: t.Name, Value: v}
			if t.Keyed {
				r.Key, r.Partition = key, keyPartition(key, t.Partitions)
			} else {
				r.Partition = a.s.rr[t.Name]
				a.s.rr[t.Name] = (r.Partition + 1) % t.Partitions
			}
			a.append(r)
			a.ready.ElementsOut++
		}
	}
	return nil
}

// appendSinks appends a bundle's elements of the sinks' PCollections as
// plain records to their topics: the key the Java client would partition by
// (javapartition.ForKey), the event time as the record's timestamp when Kafka can
// hold it (an event time at or before the epoch, such as Beam's start of
// time, leaves the timestamp to the producer: the time of writing;
// librdkafka reads a timestamp of 0 as "now" too).
func (a *attempt) appendSinks(b *Bundle) error {
	for _, k := range a.s.spec.Sinks {
		if err := a.appendSinkElements(k, b.Outputs[k.PCollection]); err != nil {
			return err
		}
	}
	return nil
}

// appendSinkElements appends elements es of sink k's PCollection.
func (a *attempt) appendSinkElements(k Sink, es [][]byte) error {
	for _, e := range es {
		key, value, ts, err := k.Decode(e)
		if err != nil {
			return fmt.Errorf("stage %s: an element of %s for topic %s: %w", a.s.spec.Name, k.PCollection, k.Topic, err)
		}
		r := Record{Topic: k.Topic, Partition: AnyPartition, Key: key, Value: value}
		if key != nil {
			r.Partition = javapartition.ForKey(key, k.Partitions)
		}
		if ts > 0 && ts <= mtime.MaxTimestamp {
			r.Timestamp = ts.ToTime()
		}
		a.append(r)
		a.ready.ElementsOut++
	}
	return nil
}

// AnyPartition as a Record's Partition lets the producer's partitioner
// choose (Kafka's RD_KAFKA_PARTITION_UA).
const AnyPartition int32 = -1

// appendReports makes task p's report: appended to the report topic now,
// and to every partition of every output topic with the other reports of
// its run at the next flushReports (before the next output record, or at
// the end of the attempt), so it sits after the data it covers in every
// partition, in the transaction (seed 000).
func (a *attempt) appendReports(p int32, t *task, wm mtime.Time, idle bool) {
	r := &pb.WatermarkReport{
		Stage:                    a.s.spec.Name,
		SourcePartition:          p,
		CommittedWatermarkMillis: int64(wm),
		TotalSourcePartitions:    a.s.spec.Partitions,
		Idle:                     idle,
		Source:                   a.s.head.Source(p),
		Instance:                 a.s.instance,
	}
	if ms, ok := a.clock(p, t); ok {
		r.ProcessingTimeMillis = proto.Int64(ms)
		t.clockOut, t.hasClockOut = ms, true
	}
	a.reports = append(a.reports, r)
	raw, _ := proto.Marshal(r)
	a.append(Record{Topic: a.s.report, Partition: AnyPartition, Key: []byte(fmt.Sprintf("%s/%d", a.s.spec.Name, p)), Value: raw})
	a.ready.ReportsOut++
}

// flushReports appends the reports made since the last output record to
// every partition of every output topic: one Envelope per partition
// holding them all, in the order made (Envelope.reports). So a run of
// reports of P tasks into Q partitions costs Q records, not P x Q, and no
// report moves past an output record: downstream, each sits between the
// same records as if every task had written its own.
func (a *attempt) flushReports() {
	if len(a.reports) == 0 {
		return
	}
	env := envelope.EncodeReports(a.reports)
	a.reports = nil
	seen := map[string]bool{}
	for _, o := range a.s.spec.Outputs {
		for _, t := range o.Topics {
			if seen[t.Name] {
				continue
			}
			seen[t.Name] = true
			for q := int32(0); q < t.Partitions; q++ {
				a.append(Record{Topic: t.Name, Partition: q, Value: env})
				a.ready.ReportsOut++
			}
		}
	}
}

// keyPartition is the partition of a record keyed by an encoded Beam key:
// FNV-1a of the key bytes modulo the partition count. Every instance computes
// the same partition for the same key.
func keyPartition(key []byte, partitions int32) int32 {
	h := fnv.New32a()
	h.Write(key)
	return int32(h.Sum32() % uint32(partitions))
}

// KeyPartition is the partition (task) of a record keyed by an encoded Beam
// key on a keyed topic (a GroupByKey's or a stateful ParDo's input): FNV-1a
// of the key bytes modulo the partition count. A stateful head finds the
// task of a state request or a timer by the key bytes the SDK sends.
func KeyPartition(key []byte, partitions int32) int32 { return keyPartition(key, partitions) }

package step

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

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

// Partitions is the input topic's partition count the reports carry
// (totalSourcePartitions): Spec.Partitions, or more after SetPartitions.
func (s *Step) Partitions() int32 { return s.spec.Partitions }

// ErrTimerLoop: bundles kept returning due work (timers setting timers
// already due) for MaxRounds bundles at one point of one attempt. The
// attempt aborts (retryable, but it will loop again: a DoFn bug).
var ErrTimerLoop = errors.New("step: timers keep firing timers")

// ErrUndecodable is wrapped by the error of an input record the stage
// cannot take as it stands, though it is a well-formed Envelope (issue 23,
// records in internal topics the runner did not write): its element does
// not decode with the PCollection's coder (a GroupByKey's codec, a Kafka
// sink's KafkaRecord of a stage without SDK transforms), or its record key
// is not the element's or not its partition's. A head's Element wraps it
// on such a record; Decide's error then names the record (input topic,
// partition, offset), or, for a sink's decode, the stage alone. The same
// bytes fail the same way on every attempt and every owner, so the loop
// takes it for the record's failure (stage.Config.ErrorPolicy), as it
// does a BundleError: the record is found (alone in its attempt) and the
// stage fails naming it, or it is set aside to the dead-letter topic.
var ErrUndecodable = errors.New("step: an input record the stage cannot decode")

// BundleError is the error of a bundle the SDK harness ran and failed
// (Config.Process returned an error: a DoFn's error or panic, which the
// SDK harness reports as the bundle's error): the user's code, not the
// runner's nor Kafka's. The loop counts only these and ErrUndecodable as
// a record's failure (stage.Config.ErrorPolicy); every other error of
// Decide (a head's error, a side input's) fails the attempt as before.
type BundleError struct {
	// Stage is the stage's name; Elements and Timers are the bundle's.
	Stage            string
	Elements, Timers int
	// Err is Process's error.
	Err error
}

func (e *BundleError) Error() string {
	if e.Timers > 0 {
		return fmt.Sprintf("stage %s: bundle of %d elements and %d timers: %v", e.Stage, e.Elements, e.Timers, e.Err)
	}
	return fmt.Sprintf("stage %s: bundle of %d elements: %v", e.Stage, e.Elements, e.Err)
}

func (e *BundleError) Unwrap() error { return e.Err }

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
// else runs. A record of an internal topic that the application's runner
// did not write (Untrusted: not an Envelope, reports without the
// application's header, a report the task's manager refuses) is skipped:
// consumed, its offset committed, nothing made from it, and named in
// Ready.Untrusted.
type Step struct {
	spec    Spec
	head    Head
	process ProcessFunc
	keyOf   map[string]func([]byte) ([]byte, error)
	gate    SideInputGate
	report  string
	// instance goes into every report (Config.Instance).
	instance string
	rounds   int
	// jobClock is Config.JobClock.
	jobClock bool
	// rr is the round-robin cursor of each unkeyed output topic.
	rr map[string]int32
	// spill and spillBytes are Config.Spill and SpillBytes.
	spill      func([]Record) error
	spillBytes int
	// writer are the headers of every record of reports (writerHeaders).
	writer []Header
	// now is Config.Now.
	now func() time.Time
}

// Config configures a Step.
type Config struct {
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
	// Now is the wall clock a sink record's timestamp is checked against
	// (Sink.TimestampAfterMax). Default time.Now.
	Now func() time.Time
}

// New returns the step. An output to a keyed topic without a KeyOf is
// an error.
func New(cfg Config) (*Step, error) {
	if cfg.Head == nil || cfg.ReportTopic == "" || cfg.Spec.Name == "" {
		return nil, errors.New("stage: Config needs Spec.Name, Head and ReportTopic")
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = 1000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
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
	return &Step{spec: cfg.Spec, head: cfg.Head, process: cfg.Process, keyOf: cfg.KeyOf, gate: cfg.SideInputs, report: cfg.ReportTopic, instance: cfg.Instance, rounds: cfg.MaxRounds, jobClock: cfg.JobClock, rr: map[string]int32{}, spill: cfg.Spill, spillBytes: cfg.SpillBytes, writer: writerHeaders(cfg.Spec.ApplicationID), now: cfg.Now}, nil
}

// defaultSpillBytes is Config.SpillBytes's default: 4 MiB of record
// keys and values, a few times librdkafka's default batch (1 MB).
const defaultSpillBytes = 4 << 20

// attempt is the state of one Decide call.
type attempt struct {
	s     *Step
	ctx   context.Context
	tasks map[int32]*Task
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
// At the end it asks the head for its state to commit (Head.Prepare) and
// puts it in Ready.State; the Loop acknowledges the Ready with Advance
// once its transaction committed.
//
// An error means the attempt must be aborted: nothing of it may be
// committed, and the head's changes are dropped with Abort.
func (s *Step) Decide(ctx context.Context, tasks map[int32]*Task, batch []In, woken map[int32]int64) (*Ready, error) {
	// Room for one output record per input record (a stateless stage's
	// shape) from the start, not grown by doubling.
	a := &attempt{s: s, ctx: ctx, tasks: tasks, ready: &Ready{Records: make([]Record, 0, len(batch)+8)}}
	// last[p] is the index of task p's last element record in batch.
	last := map[int32]int{}
	// elements[i] is batch[i]'s element, reports[i] its reports (Envelope
	// records; both nil for raw input).
	var elements [][]byte
	var reports [][]*pb.WatermarkReport
	// skipped[i] is why batch[i] is skipped (Untrusted); nil while none is.
	var skipped map[int]string
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
		e, r, why := s.decode(m)
		if why != "" {
			if skipped == nil {
				skipped = map[int]string{}
			}
			skipped[i] = why
			continue
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
		if why, ok := skipped[i]; ok {
			a.skip(m, 0, why)
			next[p] = m.Offset + 1 // consumed: committed past, never read again
			continue
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
		if report == nil && s.gate != nil && !m.Skip {
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
		if m.Skip {
			if report != nil {
				return nil, fmt.Errorf("stage %s: record at %s[%d]@%d holds watermark reports: it cannot be set aside", s.spec.Name, s.spec.InputTopic, p, m.Offset)
			}
			continue // set aside (In.Skip): its offset only
		}
		if report != nil {
			// A batch's reports were made at one place of one upstream
			// transaction: observed in order, then one point.
			// A report the task's manager refuses (not of an upstream of
			// the plan, out of range) is skipped; the others apply.
			refused, why := 0, ""
			for _, r := range report {
				if err := t.observe(r); err != nil {
					if refused++; why == "" {
						why = err.Error()
					}
				}
			}
			if refused > 0 {
				a.skip(m, refused, fmt.Sprintf("%d of %d watermark reports refused (the first: %s)", refused, len(report), why))
			}
			clockMoved := a.syncClock(p, t)
			if in, _ := t.inputWatermark(); in > t.advanced || clockMoved {
				if err := a.point(p, t, last[p] > i, clockMoved); err != nil {
					return nil, err
				}
			}
			continue
		}
		if s.spec.CheckElement != nil {
			if err := s.spec.CheckElement(value); err != nil {
				return nil, fmt.Errorf("%w: stage %s: element at %s[%d]@%d: %w", ErrUndecodable, s.spec.Name, s.spec.InputTopic, p, m.Offset, err)
			}
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
		if err := s.prepare(a.ready); err != nil {
			return nil, err
		}
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
	if err := s.prepare(a.ready); err != nil {
		return nil, err
	}
	return a.ready, nil
}

// prepare puts the head's state to commit (Head.Prepare) in rd.State: on
// every way out of a Decide that succeeds, so that Advance (the head's
// Committed: every pending change applied locally) never applies a change
// whose changelog record the transaction did not carry.
func (s *Step) prepare(rd *Ready) error {
	if sz, ok := s.head.(StateSizer); ok {
		rd.State = slices.Grow(rd.State, sz.PendingState())
	}
	if err := s.head.Prepare(func(topic string, partition int32, key, value []byte) error {
		rd.State = append(rd.State, Record{Topic: topic, Partition: partition, Key: key, Value: value})
		return nil
	}); err != nil {
		return fmt.Errorf("stage %s: head: %w", s.spec.Name, err)
	}
	if rp, ok := s.head.(RecordPreparer); ok {
		rd.State = append(rd.State, rp.PrepareRecords()...)
	}
	return nil
}

// advance runs the pending bundle if it holds Barrier work, then
// Advance(p, in) and its work.
func (a *attempt) advance(p int32, t *Task) error {
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
func (a *attempt) point(p int32, t *Task, more, clockMoved bool) error {
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
func (a *attempt) output(p int32, t *Task) (mtime.Time, bool) {
	in, idle := t.inputWatermark()
	hold := a.s.head.Hold(p)
	return max(t.out, min(in, hold)), idle && hold == mtime.MaxTimestamp || a.s.head.Idle(p)
}

// reportIfMoved appends task p's report if its output watermark, its idle
// flag or its source details (Head.Source) changed (or always, with force)
// and records it as reported.
func (a *attempt) reportIfMoved(p int32, t *Task, force bool) {
	out, idle := a.output(p, t)
	src := a.s.head.Source(p)
	if out == t.out && idle == t.idle && proto.Equal(src, t.source) && !force && !a.clockToReport(p, t) {
		return
	}
	a.appendReports(p, t, out, idle)
	t.out, t.idle, t.source, t.reported = out, idle, src, true
}

// clock is task p's job clock now (Config.JobClock): a
// JobClockSource head's, else the task's input clock (the minimum over its
// upstream partitions' reports); ok is false without a job clock or when
// no upstream report carried one yet.
func (a *attempt) clock(p int32, t *Task) (ms int64, ok bool) {
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
func (a *attempt) syncClock(p int32, t *Task) bool {
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
func (a *attempt) clockToReport(p int32, t *Task) bool {
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
			timers := 0
			for _, ts := range w.Timers {
				timers += len(ts)
			}
			return nil, &BundleError{Stage: a.s.spec.Name, Elements: len(w.Elements), Timers: timers, Err: err}
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

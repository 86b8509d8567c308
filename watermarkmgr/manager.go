package watermarkmgr

import (
	"errors"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Sentinel errors of Observe. Each returned error wraps exactly one of them
// (test with errors.Is) together with the offending values. None is
// retryable: the same report fails the same way every time. A report that
// fails means a corrupt or foreign record in the report topic; the caller
// logs it and skips it. The Manager's state is unchanged after any error.
var (
	// ErrInvalidTotal: totalSourcePartitions <= 0.
	ErrInvalidTotal = errors.New("watermarkmgr: total source partitions must be positive")
	// ErrTotalTooLarge: totalSourcePartitions > MaxSourcePartitions.
	ErrTotalTooLarge = errors.New("watermarkmgr: total source partitions too large")
	// ErrPartitionOutOfRange: sourcePartition outside [0, totalSourcePartitions).
	ErrPartitionOutOfRange = errors.New("watermarkmgr: source partition out of range")
	// ErrWatermarkOutOfRange: committedWatermark outside Beam's range
	// [mtime.MinTimestamp, mtime.MaxTimestamp] (milliseconds since the Unix epoch).
	ErrWatermarkOutOfRange = errors.New("watermarkmgr: watermark outside [mtime.MinTimestamp, mtime.MaxTimestamp]")
	// ErrUnknownUpstream: Aggregator.Observe named an upstream stage that was
	// not declared in NewAggregator.
	ErrUnknownUpstream = errors.New("watermarkmgr: undeclared upstream stage")
)

// MaxSourcePartitions is the largest totalSourcePartitions a report may carry:
// 1<<20 = 1,048,576 partitions, far above any real Kafka topic. It exists so
// that one corrupt report cannot make the Manager allocate gigabytes (the
// per-partition state is a slice indexed by partition).
const MaxSourcePartitions = 1 << 20

// partition is the state of one source partition of the upstream stage.
type partition struct {
	// wm is the max committed watermark this partition has reported since it
	// was last (re)created, in mtime.Time (ms since the Unix epoch). Only
	// meaningful when reported.
	wm mtime.Time
	// pos is the index in Manager.active (if !idle) or Manager.idle (if idle);
	// -1 when not reported.
	pos      int32
	reported bool
	// idle is the idle flag of the latest report.
	idle bool
}

// Manager computes the watermark of one upstream stage, as seen by one
// downstream task, from the reports of the upstream stage's tasks (seed 000,
// DESIGN.md "Watermarks"). A report is (sourcePartition, committedWatermark,
// totalSourcePartitions, idle): task sourcePartition of totalSourcePartitions
// tasks has committed everything before committedWatermark (an mtime.Time:
// milliseconds since the Unix epoch).
//
// Reports are recorded with Observe; the emitted watermark is recomputed only
// by Advance. Callers feed every report of a batch (e.g. all reports read in
// one poll) and then call Advance once: the result then does not depend on
// the order of the reports within the batch. Recomputing after every report
// would not be order independent, because the emitted watermark never
// decreases: a value reached mid-batch is locked in. For example, with
// partitions A=10 and B=20 active, C=5 idle and the watermark at 10, a batch
// in which A goes idle and C wakes up at 5 ends with candidate MIN(B, C) = 5,
// so the watermark stays 10; recomputed after each report it would become 20
// if A's report came first (MIN(B) = 20, locked in) and stay 10 if C's came
// first (testdata/batch_order.txt). ObserveAndAdvance is the
// convenience for callers that do process one report at a time.
//
// Cost: Observe and Advance are O(log P) for P source partitions (an indexed
// min-heap over the non-idle partitions, a max-heap over the idle ones and
// counters), except for a report that changes totalSourcePartitions, which
// is O(P). Missing and Snapshot are O(P).
//
// A Manager is not safe for concurrent use: it does no locking, no I/O,
// starts no goroutine and reads no clock. The zero value is not usable; use
// New.
type Manager struct {
	// total is totalSourcePartitions of the latest valid report; 0 before
	// the first report.
	total int32
	// parts[p] is the state of source partition p. len(parts) <= total; it
	// grows to the highest partition that has reported, so a partition at or
	// beyond len(parts) has not reported.
	parts []partition
	// reported counts partitions p < total that have reported.
	reported int32
	// active holds the reported, non-idle partitions, min watermark first.
	active partHeap
	// idle holds the reported, idle partitions, max watermark first.
	idle partHeap
	// out is the emitted watermark as of the last Advance.
	out mtime.Time
}

// New returns a Manager that has seen no report: it is held, its total is
// unknown (0) and its watermark is mtime.MinTimestamp.
func New() *Manager {
	return &Manager{
		out:  mtime.MinTimestamp,
		idle: partHeap{maxFirst: true},
	}
}

// validate checks one report against Beam's and this package's ranges.
func validate(sourcePartition int32, committedWatermark mtime.Time, totalSourcePartitions int32) error {
	switch {
	case totalSourcePartitions <= 0:
		return fmt.Errorf("%w: totalSourcePartitions=%d (sourcePartition=%d)",
			ErrInvalidTotal, totalSourcePartitions, sourcePartition)
	case totalSourcePartitions > MaxSourcePartitions:
		return fmt.Errorf("%w: totalSourcePartitions=%d > MaxSourcePartitions=%d (sourcePartition=%d)",
			ErrTotalTooLarge, totalSourcePartitions, MaxSourcePartitions, sourcePartition)
	case sourcePartition < 0 || sourcePartition >= totalSourcePartitions:
		return fmt.Errorf("%w: sourcePartition=%d not in [0, %d)",
			ErrPartitionOutOfRange, sourcePartition, totalSourcePartitions)
	case committedWatermark < mtime.MinTimestamp || committedWatermark > mtime.MaxTimestamp:
		return fmt.Errorf("%w: committedWatermark=%d ms (sourcePartition=%d)",
			ErrWatermarkOutOfRange, int64(committedWatermark), sourcePartition)
	}
	return nil
}

// Observe records one report: source partition sourcePartition, of
// totalSourcePartitions, has committed everything before committedWatermark
// (mtime.Time, milliseconds since the Unix epoch), and idle says whether it
// has nothing to deliver. It does not change the emitted watermark; call
// Advance after the batch.
//
// Per partition p (seed 000, DESIGN.md "Watermarks"):
//
//	wm[p]'   = MAX(wm[p], committedWatermark)   (a lower report is ignored…)
//	idle[p]' = idle                             (…but its idle flag applies)
//
// The total only grows (seed 000's count in-band, for Kafka, whose
// partitions are never taken away): a report whose totalSourcePartitions
// is larger than the current total first raises it; partitions keep their
// state, and the hold re-opens until every partition under the new total
// has reported. A report with a smaller total is stale, from a task that has
// not yet seen a topic's growth (instances find new partitions at different
// moments, issue 21 §4): it counts as a report of its partition under the
// current total, which it neither lowers nor lifts. Were a smaller total
// taken, the partitions under it, all reported, would lift the hold before
// the new partitions had reported, and the watermark would pass their
// records. The emitted watermark does not go back. A report costs
// O(log P).
//
// Errors (state unchanged): ErrInvalidTotal if totalSourcePartitions <= 0,
// ErrTotalTooLarge if it exceeds MaxSourcePartitions, ErrPartitionOutOfRange
// if sourcePartition is outside [0, totalSourcePartitions),
// ErrWatermarkOutOfRange if committedWatermark is outside
// [mtime.MinTimestamp, mtime.MaxTimestamp].
func (m *Manager) Observe(sourcePartition int32, committedWatermark mtime.Time, totalSourcePartitions int32, idle bool) error {
	return m.ObserveReport(Report{SourcePartition: sourcePartition, CommittedWatermark: committedWatermark, TotalSourcePartitions: totalSourcePartitions, Idle: idle})
}

// ObserveReport records report r of this Manager's upstream stage: it is
// Observe with r's fields (r.Upstream is not read: the caller chose the
// Manager by it). Observe's rules, errors and cost apply.
func (m *Manager) ObserveReport(r Report) error {
	if err := validate(r.SourcePartition, r.CommittedWatermark, r.TotalSourcePartitions); err != nil {
		return err
	}
	if r.TotalSourcePartitions > m.total {
		m.setTotal(r.TotalSourcePartitions)
	}
	for int(r.SourcePartition) >= len(m.parts) {
		m.parts = append(m.parts, partition{pos: -1})
	}
	st := &m.parts[r.SourcePartition]
	if !st.reported {
		st.reported, st.wm, st.idle = true, r.CommittedWatermark, r.Idle
		m.reported++
		m.heapOf(r.Idle).push(m.parts, r.SourcePartition)
		return nil
	}
	raised := r.CommittedWatermark > st.wm
	if raised {
		st.wm = r.CommittedWatermark
	}
	switch {
	case r.Idle != st.idle:
		m.heapOf(st.idle).remove(m.parts, r.SourcePartition)
		st.idle = r.Idle
		m.heapOf(r.Idle).push(m.parts, r.SourcePartition)
	case raised:
		m.heapOf(r.Idle).fix(m.parts, r.SourcePartition)
	}
	return nil
}

func (m *Manager) heapOf(idle bool) *partHeap {
	if idle {
		return &m.idle
	}
	return &m.active
}

// setTotal raises the number of source partitions to n > total: every
// report is kept, the partitions in [total, n) hold until they report.
// O(1).
func (m *Manager) setTotal(n int32) {
	m.total = n
}

// Advance recomputes the emitted watermark from every report observed so far
// and returns it (mtime.Time, milliseconds since the Unix epoch). O(1): it
// reads the roots of the heaps, which Observe keeps ordered.
//
//	done(p)   ⇔ ¬idle[p] ∧ wm[p] = end of time      (a bounded read of p ended)
//	live(p)   ⇔ ¬idle[p] ∧ ¬done(p)
//	held      = total == 0 OR some p < total has not reported      (seed 000)
//	candidate = MIN{ wm[p] : live(p) }              if some p is live
//	          = MAX{ wm[p] : idle[p] }              if none is live and some p is idle
//	          = end of time                         if every p is done
//	Out'      = Out                                 if held
//	          = MAX(Out, candidate)                 otherwise
//
// Out starts at mtime.MinTimestamp, so Out never decreases. A done
// partition never holds (it delivers nothing more), and never lifts Out to
// the end of time beside an idle one, which can still deliver: the same
// rule as the Aggregator's one level up (done, idle, live upstreams; issue
// 21 §1). Without it a bounded read whose topic grew while it ran (its new
// partitions read unbounded, and idle) ended the stage's watermark.
//
// The all-idle rule (MAX over the partitions' watermarks) is chosen because
// it is order independent: "hold at the last value" instead would make the
// result depend on the order in which partitions went idle across batches
// (A=5, B=10: A idles first → 10, B idles first → 5; see
// TestAllIdleRuleIsOrderIndependent). It is also right: an idle partition is
// delivering nothing, and its watermark covers everything it committed, so
// when nothing is delivering, nothing at or below the highest watermark can
// still arrive from a partition that stays idle. A partition that wakes up
// with an older watermark does not lower Out; its records below Out are late,
// which is the accepted cost of idleness in Beam and Flink alike. The caller
// reads AllIdle and forwards idle=true in its own report downstream.
func (m *Manager) Advance() mtime.Time {
	if c, ok := m.candidate(); ok && c > m.out {
		m.out = c
	}
	return m.out
}

// candidate returns the candidate of Advance's formula, and false when held.
func (m *Manager) candidate() (mtime.Time, bool) {
	if m.Held() {
		return 0, false
	}
	switch {
	case m.live():
		return m.parts[m.active.top()].wm, true
	case m.idle.len() > 0:
		return m.parts[m.idle.top()].wm, true
	}
	return mtime.MaxTimestamp, true // every partition is done
}

// live says that some reported partition is live: not idle and not done
// (its watermark below the end of time). The active heap's root has the
// lowest watermark of the partitions that are not idle, so one is live iff
// the root is below the end of time. O(1).
func (m *Manager) live() bool {
	return m.active.len() > 0 && m.parts[m.active.top()].wm < mtime.MaxTimestamp
}

// ObserveAndAdvance is Observe followed by Advance, for callers that process
// one report at a time. It returns the emitted watermark (mtime.Time,
// milliseconds since the Unix epoch); on error the state is unchanged and it
// returns the current watermark with the error. Batch callers should call
// Observe for every report of the batch and Advance once (see Manager).
func (m *Manager) ObserveAndAdvance(sourcePartition int32, committedWatermark mtime.Time, totalSourcePartitions int32, idle bool) (mtime.Time, error) {
	if err := m.Observe(sourcePartition, committedWatermark, totalSourcePartitions, idle); err != nil {
		return m.out, err
	}
	return m.Advance(), nil
}

// Watermark returns the emitted watermark as of the last Advance (mtime.Time,
// milliseconds since the Unix epoch): mtime.MinTimestamp until the first
// Advance after every partition has reported. It never decreases. O(1).
func (m *Manager) Watermark() mtime.Time { return m.out }

// Total returns totalSourcePartitions of the latest valid report, 0 before
// the first one.
func (m *Manager) Total() int32 { return m.total }

// Held reports whether the watermark is held: no report yet, or some
// partition below the current total has not reported since it was last
// (re)created (seed 000). It describes the reports observed so far, not the
// state at the last Advance. O(1).
func (m *Manager) Held() bool { return m.total == 0 || m.reported < m.total }

// AllIdle reports whether every partition below the current total has
// reported, none is live and at least one is idle (the others done: see
// Advance): the caller forwards idle=true in its own report downstream.
// False while held. O(1).
func (m *Manager) AllIdle() bool { return !m.Held() && !m.live() && m.idle.len() > 0 }

// MinPartition returns the partition that defines the min of Advance's
// formula: the non-idle partition with the lowest watermark (the lowest
// partition id on a tie; a done one when every partition is done), or -1
// when held or AllIdle. O(1).
func (m *Manager) MinPartition() int32 {
	if m.Held() || m.active.len() == 0 || m.AllIdle() {
		return -1
	}
	return m.active.top()
}

// Missing returns, in increasing order, the partitions below the current
// total that have not reported: the reason for the hold. It is empty when
// not held, and also before the first report (the total is not known yet;
// Held is true). O(P).
func (m *Manager) Missing() []int32 {
	var out []int32
	for p := int32(0); p < m.total; p++ {
		if int(p) >= len(m.parts) || !m.parts[p].reported {
			out = append(out, p)
		}
	}
	return out
}

// PartitionState is one source partition in a Snapshot.
type PartitionState struct {
	// Partition is the source partition id, in [0, Snapshot.Total).
	Partition int32
	// Reported is false until the partition reports (again, after a change
	// of the total forgot it).
	Reported bool
	// Watermark is the max committed watermark the partition has reported,
	// mtime.Time (ms since the Unix epoch); mtime.MinTimestamp if !Reported.
	Watermark mtime.Time
	// Idle is the idle flag of the latest report.
	Idle bool
}

// Snapshot is a read-only copy of a Manager's state, for the service
// (GET /watermarks) and for tests. Watermark is as of the last Advance; the
// other fields describe every report observed so far.
type Snapshot struct {
	// Total is totalSourcePartitions of the latest valid report; 0 before
	// the first report.
	Total int32
	// Watermark is the emitted watermark (mtime.Time, ms since the Unix
	// epoch) as of the last Advance.
	Watermark mtime.Time
	// Held: see Manager.Held.
	Held bool
	// AllIdle: see Manager.AllIdle.
	AllIdle bool
	// Missing lists the partitions that hold the watermark; see Manager.Missing.
	Missing []int32
	// MinPartition defines the min; -1 when held or all idle. See
	// Manager.MinPartition.
	MinPartition int32
	// Partitions has one entry per partition in [0, Total), in order.
	Partitions []PartitionState
}

// Snapshot returns a copy of the state. O(P).
func (m *Manager) Snapshot() Snapshot {
	s := Snapshot{
		Total:        m.total,
		Watermark:    m.out,
		Held:         m.Held(),
		AllIdle:      m.AllIdle(),
		Missing:      m.Missing(),
		MinPartition: m.MinPartition(),
		Partitions:   make([]PartitionState, m.total),
	}
	for p := range s.Partitions {
		ps := PartitionState{Partition: int32(p), Watermark: mtime.MinTimestamp}
		if p < len(m.parts) && m.parts[p].reported {
			st := m.parts[p]
			ps.Reported, ps.Watermark, ps.Idle = true, st.wm, st.idle
		}
		s.Partitions[p] = ps
	}
	return s
}

package service

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

// ErrUnknownStage is returned for a stage no report has named yet.
var ErrUnknownStage = errors.New("watermarkmgr/service: unknown stage")

// Tracker keeps one watermarkmgr.Manager per stage, fed with batches of
// reports. It is safe for concurrent use.
type Tracker struct {
	// now is the wall clock, injected for tests; it stamps when a partition's
	// last report was applied and gives the lag behind wall-clock.
	now func() time.Time
	// started is when NewTracker was called (by now).
	started time.Time

	mu struct {
		sync.Mutex
		stages map[string]*stageState
		// changed is closed and replaced every time any stage changes.
		changed chan struct{}
	}
}

type stageState struct {
	mgr *watermarkmgr.Manager
	// version increases on every batch that touched the stage.
	version uint64
	// lastReport[p] is the wall-clock time the last report of source
	// partition p was applied.
	lastReport map[int32]time.Time
	// rejected counts reports the manager refused (see Apply).
	rejected uint64
	// source[p] is the source details of partition p's last applied report
	// (a Kafka source stage's; absent for other stages).
	source map[int32]*pb.SourcePartition
	// owner[p] is the instance named by partition p's last report that
	// named one (WatermarkReport.instance).
	owner map[int32]string
	// firstSeen is when the stage's first report was applied; movedAt when
	// its emitted watermark (or held state) last changed, firstSeen before.
	firstSeen, movedAt time.Time
	// history holds the stage's watermark after each change, oldest first,
	// at most HistoryLen points.
	history []HistoryPoint
}

// HistoryPoint is a stage's emitted watermark (mtime.Time, ms) from wall
// clock time At on.
type HistoryPoint struct {
	At        time.Time
	Watermark mtime.Time
	Held      bool
}

// HistoryLen bounds the points a Tracker keeps per stage (HistoryPoint):
// the oldest is dropped first.
const HistoryLen = 600

// NewTracker returns an empty Tracker. now is the wall clock; nil means time.Now.
func NewTracker(now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	t := &Tracker{now: now, started: now()}
	t.mu.stages = make(map[string]*stageState)
	t.mu.changed = make(chan struct{})
	return t
}

// Apply observes a batch of reports, then advances every stage the batch
// touched, once: the emitted watermarks do not depend on the order of the
// reports within the batch (see watermarkmgr.Manager.Advance). A report the
// manager refuses (partition out of range, non-positive total, watermark
// outside Beam's range, empty stage) changes nothing; the others still apply.
// The returned error joins one error per refused report, each naming the
// stage and the report.
func (t *Tracker) Apply(reports []*pb.WatermarkReport) error {
	at := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	touched := make(map[*stageState]bool)
	var errs []error
	for _, r := range reports {
		if r.GetStage() == "" {
			errs = append(errs, fmt.Errorf("watermarkmgr/service: report without a stage: %v", r))
			continue
		}
		st := t.mu.stages[r.GetStage()]
		if st == nil {
			st = &stageState{mgr: watermarkmgr.New(), lastReport: make(map[int32]time.Time), source: make(map[int32]*pb.SourcePartition), owner: make(map[int32]string), firstSeen: at, movedAt: at}
			t.mu.stages[r.GetStage()] = st
		}
		err := st.mgr.ObserveReport(r.Core())
		if err != nil {
			st.rejected++
			errs = append(errs, fmt.Errorf("stage %q: %w", r.GetStage(), err))
			if st.mgr.Total() == 0 && len(st.lastReport) == 0 {
				delete(t.mu.stages, r.GetStage()) // never knew a valid report
			}
			continue
		}
		st.lastReport[r.GetSourcePartition()] = at
		if src := r.GetSource(); src != nil {
			st.source[r.GetSourcePartition()] = src
		}
		if in := r.GetInstance(); in != "" {
			st.owner[r.GetSourcePartition()] = in
		}
		touched[st] = true
	}
	for st := range touched {
		st.mgr.Advance()
		st.version++
		snap := st.mgr.Snapshot()
		if n := len(st.history); n == 0 || st.history[n-1].Watermark != snap.Watermark || st.history[n-1].Held != snap.Held {
			if n > 0 {
				st.movedAt = at
			}
			st.history = append(st.history, HistoryPoint{At: at, Watermark: snap.Watermark, Held: snap.Held})
			if len(st.history) > HistoryLen {
				st.history = append(st.history[:0], st.history[len(st.history)-HistoryLen:]...)
			}
		}
	}
	if len(touched) > 0 {
		close(t.mu.changed)
		t.mu.changed = make(chan struct{})
	}
	return errors.Join(errs...)
}

// StageView is one stage as the service shows it: the manager's snapshot plus
// when each partition last reported. Watermarks are mtime.Time (ms).
type StageView struct {
	Stage    string
	Version  uint64
	Snapshot watermarkmgr.Snapshot
	// LastReport[p] is the wall-clock time of source partition p's last
	// applied report (zero if none since this process started).
	LastReport map[int32]time.Time
	// Rejected counts refused reports for this stage.
	Rejected uint64
	// Source[p] is what source partition p's last report said of the
	// user's topic partition it reads (Kafka source stages only; treat as
	// read-only).
	Source map[int32]*pb.SourcePartition
	// Owner[p] is the instance that wrote source partition p's last report
	// naming one (the task's owner then); absent if none did.
	Owner map[int32]string
	// FirstSeen is when this process applied the stage's first report;
	// MovedAt when the stage's watermark or held state last changed
	// (FirstSeen if never since).
	FirstSeen, MovedAt time.Time
	// History is the stage's watermark after each change, oldest first
	// (at most HistoryLen points).
	History []HistoryPoint
}

// Stage returns the view of one stage, or ErrUnknownStage.
func (t *Tracker) Stage(name string) (StageView, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.mu.stages[name]
	if st == nil {
		return StageView{}, fmt.Errorf("%w %q", ErrUnknownStage, name)
	}
	return st.viewLocked(name), nil
}

// Stages returns every stage's view, sorted by stage name.
func (t *Tracker) Stages() []StageView {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]StageView, 0, len(t.mu.stages))
	for name, st := range t.mu.stages {
		out = append(out, st.viewLocked(name))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stage < out[j].Stage })
	return out
}

// Changed returns a channel that is closed at the next change of any stage.
func (t *Tracker) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.changed
}

// Started is when the Tracker was created, by its clock: the explanations
// count a stage without a report as stuck from Started + the threshold on.
func (t *Tracker) Started() time.Time { return t.started }

// Now is the Tracker's wall clock.
func (t *Tracker) Now() time.Time { return t.now() }

// viewLocked copies the stage's state. Must be called while holding t.mu.
func (st *stageState) viewLocked(name string) StageView {
	lr := make(map[int32]time.Time, len(st.lastReport))
	for p, at := range st.lastReport {
		lr[p] = at
	}
	src := make(map[int32]*pb.SourcePartition, len(st.source))
	for p, s := range st.source {
		src[p] = s
	}
	own := make(map[int32]string, len(st.owner))
	for p, o := range st.owner {
		own[p] = o
	}
	return StageView{Stage: name, Version: st.version, Snapshot: st.mgr.Snapshot(), LastReport: lr, Rejected: st.rejected, Source: src,
		Owner: own, FirstSeen: st.firstSeen, MovedAt: st.movedAt, History: append([]HistoryPoint(nil), st.history...)}
}

package userstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// ErrWrongTask: a state request or a timer names a key of a task this
// instance does not own (the key's partition is not assigned).
var ErrWrongTask = errors.New("userstate: key of a task not assigned here")

// Config configures the head of one stateful ParDo stage in one instance.
type Config struct {
	// Stage names the stage in logs and errors. Required.
	Stage string
	// Transform is the stateful ParDo's transform id: the transform of every
	// state request and timer this head serves. Required.
	Transform string
	// Partitions of the stage's input topic: a key's task is
	// step.KeyPartition(key, Partitions). Required, positive.
	Partitions int32
	// Stores holds the tasks' stores (state.Open). Required; the head owns
	// it from now on: Close closes it.
	Stores *state.Manager
	// WindowCoderURN is the window coder of the ParDo's main input
	// (beam:coder:global_window:v1 or beam:coder:interval_window:v1).
	// Required.
	WindowCoderURN string
	// AllowedLateness of the input's windowing strategy (ms, >= 0): a
	// window's state is deleted once the input watermark is past its max
	// timestamp + AllowedLateness. Default 0.
	AllowedLateness mtime.Time
	// Timers are the timer families of the stage's descriptor
	// (fnapi.Stage.Timers); only Transform's are used. Empty without timers.
	Timers []fnapi.TimerFamily
	// Clock is processing time for processing-time timers. Default time.Now.
	Clock func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// SideInputs, when the stateful transform reads side inputs, says
	// whether they are ready for a window: a timer of a window that is not
	// ready does not fire until it is (the step holds the elements back
	// likewise: step.SideInputGate). Nil without side inputs.
	SideInputs WindowGate
}

// WindowGate is what the head needs of a stage's side inputs
// (sideinput.Set): whether every side input window that window (encoded
// in the input's window coder) maps to is complete. Safe for concurrent
// use.
type WindowGate interface {
	ReadyWindow(window []byte) (bool, error)
}

// Head is the runner-side head of a stateful ParDo stage (step.Head): a
// passthrough for elements that keeps the stateful transform's user state
// (fnapi.UserState) and timers per task, and fires the timers at their
// point in the stream (see the package comment for the ordering rule).
type Head struct {
	step.InternalInput
	cfg      Config
	log      *slog.Logger
	families map[string]fnapi.TimerFamily // of cfg.Transform, by family name
	// barrier: the transform has event-time timers, so its elements' bundle
	// must run before the next Advance (step.Work.Barrier).
	barrier bool

	mu struct {
		sync.Mutex
		tasks map[int32]*Task
		// wm is each task's input watermark as of its last Advance (absent
		// before the first one since the task was assigned); committed is
		// wm as of the last committed attempt, which Aborted goes back to.
		wm, committed map[int32]mtime.Time
		// advanced are the tasks Advance saw in the current attempt (their
		// expired windows' state is deleted in Prepare).
		advanced map[int32]bool
		// rounds counts the current attempt's Results calls (bundles of
		// timers that bundles set): past timerRoundsPerAttempt the due
		// timers wait for the next attempt (Owes, Wake).
		rounds int
	}
}

// timerRoundsPerAttempt bounds the bundles of timers set by timers one
// attempt runs (Beam's looping timer: a timer re-set one period later
// until a stop time, each a bundle when the watermark has passed many
// periods at once, as a bounded input's last report to the end of time
// does). Past it, Results leaves the due timers pending, the head Owes,
// and the next attempt, at once, fires them (Wake): a loop of any length
// runs in attempts of this many bundles, below step.Config.MaxRounds
// (1000), where the step fails the attempt with step.ErrTimerLoop.
const timerRoundsPerAttempt = 500

var (
	_ step.Head       = (*Head)(nil)
	_ fnapi.UserState = (*Head)(nil)
	_ step.Due        = (*Head)(nil)
	_ step.Owing      = (*Head)(nil)
	_ step.StateSizer = (*Head)(nil)
)

// NewHead returns the head.
func NewHead(cfg Config) (*Head, error) {
	if cfg.Stage == "" || cfg.Transform == "" || cfg.Partitions <= 0 || cfg.Stores == nil || cfg.WindowCoderURN == "" {
		return nil, errors.New("userstate: Config needs Stage, Transform, Partitions, Stores and WindowCoderURN")
	}
	if cfg.AllowedLateness < 0 {
		return nil, fmt.Errorf("userstate: negative allowed lateness %d ms", cfg.AllowedLateness)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Head{cfg: cfg, log: cfg.Logger.With("stage", cfg.Stage), families: map[string]fnapi.TimerFamily{}}
	for _, f := range cfg.Timers {
		if f.Transform == cfg.Transform {
			h.families[f.Family] = f
			h.barrier = h.barrier || f.Domain == fnapi.TimeDomainEventTime
		}
	}
	h.mu.tasks = map[int32]*Task{}
	h.mu.wm = map[int32]mtime.Time{}
	h.mu.committed = map[int32]mtime.Time{}
	h.mu.advanced = map[int32]bool{}
	return h, nil
}

func (h *Head) now() mtime.Time { return mtime.FromTime(h.cfg.Clock()) }

// Assign restores task p's store from its changelog and loads its timers.
func (h *Head) Assign(ctx context.Context, p int32) error {
	st, err := h.cfg.Stores.Restore(ctx, p)
	if err != nil {
		return err
	}
	t := NewTask(st, h.cfg.WindowCoderURN)
	if h.cfg.SideInputs != nil {
		t.SetReady(h.cfg.SideInputs.ReadyWindow)
	}
	if err := t.Load(); err != nil {
		return fmt.Errorf("userstate: stage %s task %d: load timers: %w", h.cfg.Stage, p, err)
	}
	h.mu.Lock()
	h.mu.tasks[p] = t
	delete(h.mu.wm, p)
	delete(h.mu.committed, p)
	h.mu.Unlock()
	h.log.Info("userstate: task ready", "task", p, "timers", t.Timers(), "hold", int64(t.Hold()))
	return nil
}

// Revoke drops task p's store.
func (h *Head) Revoke(p int32) {
	h.mu.Lock()
	delete(h.mu.tasks, p)
	delete(h.mu.wm, p)
	delete(h.mu.committed, p)
	delete(h.mu.advanced, p)
	h.mu.Unlock()
	h.cfg.Stores.Drop(p)
}

// Element passes the element on. key must be the element's key bytes (the
// record key of the keyed topic), whose task is p. With event-time timers
// the work is a barrier: its bundle runs, and the timers it set reach
// Results, before the task's next Advance. Timers that side inputs held
// back (Config.SideInputs) and that are ready now fire first, in a bundle
// of their own before the element's (step.Work.Timers): they were due
// before it. A record whose key is of another task than p is
// step.ErrUndecodable (the record's failure, under the error policy).
func (h *Head) Element(p int32, r step.In) (step.Work, error) {
	key, value := r.Key, r.Value
	if key != nil {
		if q := step.KeyPartition(key, h.cfg.Partitions); q != p {
			return step.Work{}, fmt.Errorf("%w: userstate: stage %s: a record of task %d has key %x of task %d", step.ErrUndecodable, h.cfg.Stage, p, key, q)
		}
	}
	w := step.Work{Elements: [][]byte{value}, Barrier: h.barrier}
	if h.cfg.SideInputs == nil {
		return w, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskLocked(p)
	if err != nil {
		return step.Work{}, err
	}
	ready, err := t.Held()
	if err != nil || !ready {
		return w, err
	}
	wm, ok := h.mu.wm[p]
	if !ok {
		return w, nil
	}
	due, err := t.PopDue(wm, true, h.now())
	if err != nil {
		return step.Work{}, err
	}
	w.Timers = h.fireLocked(due).Timers
	return w, nil
}

// Advance records task p's input watermark wm and returns its due timers
// to fire now: event-time timers with fire < wm and processing-time timers
// with fire <= now, in (fire, key) order per family.
func (h *Head) Advance(p int32, wm mtime.Time) (step.Work, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskLocked(p)
	if err != nil {
		return step.Work{}, err
	}
	h.mu.wm[p] = wm
	h.mu.advanced[p] = true
	due, err := t.PopDue(wm, true, h.now())
	if err != nil {
		return step.Work{}, err
	}
	return h.fireLocked(due), nil
}

// fireLocked is the work that fires timers due. Must be called holding
// h.mu.
func (h *Head) fireLocked(due []*timer) step.Work {
	if len(due) == 0 {
		return step.Work{}
	}
	fire := map[fnapi.TimerFamilyID][][]byte{}
	for _, tm := range due {
		id := fnapi.TimerFamilyID{Transform: h.cfg.Transform, Family: tm.family}
		fire[id] = append(fire[id], tm.encoded)
	}
	return step.Work{Timers: fire}
}

// NextDue implements step.Due: the least input watermark at which task
// p fires an event-time timer (Task.NextEvent); ok false if it has none
// or is not assigned.
func (h *Head) NextDue(p int32) (mtime.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.mu.tasks[p]; t != nil {
		return t.NextEvent()
	}
	return 0, false
}

// Hold is task p's timer hold (mtime.MaxTimestamp if it is not assigned).
func (h *Head) Hold(p int32) mtime.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.mu.tasks[p]; t != nil {
		return t.Hold()
	}
	return mtime.MaxTimestamp
}

// Wake returns the tasks with a processing-time timer due now, an
// event-time timer due at their input watermark that an attempt left for
// the next (timerRoundsPerAttempt), or a timer side inputs held back that
// is ready now (Task.Held), sorted: the
// step advances them, so a processing-time timer fires on the wall clock
// on a quiet input too (integration TestProcessingTimeOnQuietInput/timer).
// A side input error is logged and leaves the task to its next record,
// whose Element returns it.
func (h *Head) Wake() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var out []int32
	for p, t := range h.mu.tasks {
		if next, ok := t.NextProcessing(); ok && next <= now {
			out = append(out, p)
			continue
		}
		if h.eventDueLocked(p, t) {
			out = append(out, p)
			continue
		}
		if ready, err := t.Held(); err != nil {
			h.log.Warn("userstate: side inputs of held timers", "task", p, "err", err)
		} else if ready {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Owes implements step.Owing: some task has an event-time timer due at
// its input watermark that an attempt left for the next
// (timerRoundsPerAttempt), so the loop's next attempt comes at once.
func (h *Head) Owes() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, t := range h.mu.tasks {
		if h.eventDueLocked(p, t) {
			return true
		}
	}
	return false
}

// eventDueLocked reports whether task p has an event-time timer due at its
// input watermark as of its last Advance (fire < wm) still pending. Must
// be called holding h.mu.
func (h *Head) eventDueLocked(p int32, t *Task) bool {
	wm, ok := h.mu.wm[p]
	if !ok {
		return false
	}
	due, ok := t.NextEvent()
	return ok && due <= wm
}

// Results applies a bundle's timer writes (set, re-set: the later wins,
// clear; in the harness's order), then returns the event-time timers now
// due in the tasks they touched: fire < the task's input watermark as of
// its last Advance (a timer set behind the watermark fires at once, before
// the task's next record). Processing-time timers a bundle sets fire at a
// later Advance (Wake), never in a loop within one point.
func (h *Head) Results(b *step.Bundle) (step.Work, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]fnapi.TimerFamilyID, 0, len(b.Timers))
	for id := range b.Timers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	h.mu.rounds++
	touched := map[int32]bool{}
	for _, id := range ids {
		f, ok := h.families[id.Family]
		if id.Transform != h.cfg.Transform || !ok {
			return step.Work{}, fmt.Errorf("userstate: stage %s: timers of %s, not a timer family of %s", h.cfg.Stage, id, h.cfg.Transform)
		}
		for _, tm := range b.Timers[id] {
			p := step.KeyPartition(tm.Key, h.cfg.Partitions)
			t, err := h.taskLocked(p)
			if err != nil {
				return step.Work{}, err
			}
			if err := t.SetTimer(id.Family, f.Domain == fnapi.TimeDomainProcessingTime, tm); err != nil {
				return step.Work{}, err
			}
			touched[p] = true
		}
	}
	if h.mu.rounds >= timerRoundsPerAttempt {
		// The rest of a long loop goes to the next attempts (Owes).
		return step.Work{}, nil
	}
	var due []*timer
	for _, p := range slices.Sorted(maps.Keys(touched)) {
		wm, ok := h.mu.wm[p]
		if !ok {
			continue
		}
		d, err := h.mu.tasks[p].PopDue(wm, false, 0)
		if err != nil {
			return step.Work{}, err
		}
		due = append(due, d...)
	}
	return h.fireLocked(due), nil
}

func (h *Head) taskLocked(p int32) (*Task, error) {
	t := h.mu.tasks[p]
	if t == nil {
		return nil, fmt.Errorf("userstate: stage %s task %d: %w", h.cfg.Stage, p, state.ErrNotAssigned)
	}
	return t, nil
}

// taskOfKey returns the task owning key. Must be called holding h.mu.
func (h *Head) taskOfKeyLocked(key []byte) (*Task, error) {
	p := step.KeyPartition(key, h.cfg.Partitions)
	t := h.mu.tasks[p]
	if t == nil {
		return nil, fmt.Errorf("%w: stage %s: key %x is task %d's", ErrWrongTask, h.cfg.Stage, key, p)
	}
	return t, nil
}

// Get serves a user state Get (fnapi.UserState).
func (h *Head) Get(k fnapi.UserStateKey) ([][]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskOfKeyLocked(k.Key)
	if err != nil {
		return nil, err
	}
	return t.Get(k)
}

// Append serves a user state Append (fnapi.UserState): a pending write of
// the attempt.
func (h *Head) Append(k fnapi.UserStateKey, data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskOfKeyLocked(k.Key)
	if err != nil {
		return err
	}
	return t.Append(k, data)
}

// Clear serves a user state Clear (fnapi.UserState): a pending write of
// the attempt.
func (h *Head) Clear(k fnapi.UserStateKey) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskOfKeyLocked(k.Key)
	if err != nil {
		return err
	}
	return t.Clear(k)
}

// PendingState is the stores' pending writes (step.StateSizer), before
// Prepare's deletions of expired windows.
func (h *Head) PendingState() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfg.Stores.Pending()
}

// Prepare deletes the expired windows' state of the attempt's tasks and
// writes the attempt's state and timer changes to the changelog.
func (h *Head) Prepare(produce step.ProduceFunc) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range h.mu.advanced {
		t, wm := h.mu.tasks[p], h.mu.wm[p]
		if t == nil {
			continue
		}
		if _, err := t.GC(wm, h.cfg.AllowedLateness); err != nil {
			return fmt.Errorf("userstate: stage %s task %d: gc: %w", h.cfg.Stage, p, err)
		}
	}
	return h.cfg.Stores.Prepare(state.ProduceFunc(produce))
}

// Committed applies the attempt's changes to the stores.
func (h *Head) Committed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.advanced = map[int32]bool{}
	h.mu.rounds = 0
	for p, wm := range h.mu.wm {
		h.mu.committed[p] = wm
	}
	return h.cfg.Stores.Committed()
}

// PendingTimers is the number of timers the head's tasks have set and not
// fired or cleared: the state a stateful stage holds besides its user
// state, for the live page. Safe from any goroutine.
func (h *Head) PendingTimers() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, t := range h.mu.tasks {
		n += int64(t.Timers())
	}
	return n
}

// TaskTimers is the number of timers task p has set and not fired or
// cleared, in the current attempt's state (0 for a task not assigned
// here). Safe from any goroutine.
func (h *Head) TaskTimers(p int32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.mu.tasks[p]; t != nil {
		return int64(t.Timers())
	}
	return 0
}

// Aborted drops the attempt's changes of tasks ps and reloads their timers
// from the committed store.
func (h *Head) Aborted(ps []int32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.advanced = map[int32]bool{}
	h.mu.rounds = 0
	h.cfg.Stores.Aborted(ps)
	for _, p := range ps {
		if wm, ok := h.mu.committed[p]; ok {
			h.mu.wm[p] = wm
		} else {
			delete(h.mu.wm, p)
		}
		if t := h.mu.tasks[p]; t != nil {
			if err := t.Load(); err != nil {
				return fmt.Errorf("userstate: stage %s task %d: reload after abort: %w", h.cfg.Stage, p, err)
			}
		}
	}
	return nil
}

// Close closes the stores.
func (h *Head) Close() { h.cfg.Stores.Close() }

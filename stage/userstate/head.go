package userstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// Sentinel errors.
var (
	// ErrTimerLoop: timers kept setting due timers for Config.MaxTimerRounds
	// bundles in one attempt. The attempt aborts (retryable, but it will
	// loop again: a DoFn bug).
	ErrTimerLoop = errors.New("userstate: timers keep firing timers")
	// ErrWrongTask: a state request or a timer names a key of a task this
	// instance does not own (the key's partition is not assigned).
	ErrWrongTask = errors.New("userstate: key of a task not assigned here")
)

// Config configures the head of one stateful ParDo stage in one instance.
type Config struct {
	// Stage names the stage in logs and errors. Required.
	Stage string
	// Transform is the stateful ParDo's transform id: the transform of every
	// state request and timer this head serves. Required.
	Transform string
	// Partitions of the stage's input topic: a key's task is
	// stage.KeyPartition(key, Partitions). Required, positive.
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
	// MaxTimerRounds bounds the bundles of one attempt that only fire
	// timers set by the attempt's own bundles. Default 1000.
	MaxTimerRounds int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Head is the runner-side head of a stateful ParDo stage: a passthrough for
// elements (stage.Head) that keeps the stateful transform's user state
// (fnapi.UserState) and timers (stage.TimerHead) per task.
type Head struct {
	cfg      Config
	log      *slog.Logger
	families map[string]fnapi.TimerFamily // of cfg.Transform, by family name

	mu struct {
		sync.Mutex
		tasks map[int32]*Task
		// advanced is the input watermark of each task Advance saw in the
		// current attempt.
		advanced map[int32]mtime.Time
		// fire are the timers Advance popped for the attempt's first bundle.
		fire map[fnapi.TimerFamilyID][][]byte
	}
}

var (
	_ stage.TimerHead = (*Head)(nil)
	_ fnapi.UserState = (*Head)(nil)
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
	if cfg.MaxTimerRounds <= 0 {
		cfg.MaxTimerRounds = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Head{cfg: cfg, log: cfg.Logger.With("stage", cfg.Stage), families: map[string]fnapi.TimerFamily{}}
	for _, f := range cfg.Timers {
		if f.Transform == cfg.Transform {
			h.families[f.Family] = f
		}
	}
	h.mu.tasks = map[int32]*Task{}
	h.mu.advanced = map[int32]mtime.Time{}
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
	if err := t.Load(); err != nil {
		return fmt.Errorf("userstate: stage %s task %d: load timers: %w", h.cfg.Stage, p, err)
	}
	h.mu.Lock()
	h.mu.tasks[p] = t
	h.mu.Unlock()
	h.log.Info("userstate: task ready", "task", p, "timers", t.Timers(), "hold", int64(t.Hold()))
	return nil
}

// Revoke drops task p's store.
func (h *Head) Revoke(p int32) {
	h.mu.Lock()
	delete(h.mu.tasks, p)
	delete(h.mu.advanced, p)
	h.mu.Unlock()
	h.cfg.Stores.Drop(p)
}

// Element passes the element on. key must be the element's key bytes (the
// record key of the keyed topic), whose task is p.
func (h *Head) Element(p int32, key, value []byte) ([][]byte, error) {
	if key != nil {
		if q := stage.KeyPartition(key, h.cfg.Partitions); q != p {
			return nil, fmt.Errorf("userstate: stage %s: a record of task %d has key %x of task %d", h.cfg.Stage, p, key, q)
		}
	}
	return [][]byte{value}, nil
}

// Advance records task p's input watermark wm and pops its due timers for
// the attempt's first bundle: event-time timers with fire < wm and
// processing-time timers with fire <= now. It fires nothing as elements
// (Pending and Run deliver the timers) and returns the hold of the timers
// left.
func (h *Head) Advance(p int32, wm mtime.Time) ([][]byte, mtime.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskLocked(p)
	if err != nil {
		return nil, 0, err
	}
	h.mu.advanced[p] = wm
	due, err := t.PopDue(wm, true, h.now())
	if err != nil {
		return nil, 0, err
	}
	for _, tm := range due {
		h.addFireLocked(tm)
	}
	return nil, t.Hold(), nil
}

func (h *Head) addFireLocked(tm *timer) {
	if h.mu.fire == nil {
		h.mu.fire = map[fnapi.TimerFamilyID][][]byte{}
	}
	id := fnapi.TimerFamilyID{Transform: h.cfg.Transform, Family: tm.family}
	h.mu.fire[id] = append(h.mu.fire[id], tm.encoded)
}

// Pending reports whether Advance popped timers for the attempt.
func (h *Head) Pending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.mu.fire) > 0
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

// Due returns the tasks with a processing-time timer due now, sorted.
func (h *Head) Due() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var out []int32
	for p, t := range h.mu.tasks {
		if next, ok := t.NextProcessing(); ok && next <= now {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// RunFunc runs one bundle of the stage: elements to its data source and
// encoded timers to fire, by family; it returns the bundle's result, whose
// Timers are those the bundle set or cleared.
type RunFunc func(ctx context.Context, elements [][]byte, timers map[fnapi.TimerFamilyID][][]byte) (*fnapi.Result, error)

// Run runs the attempt's bundles: the elements with the timers Advance
// popped, then, while the bundles set event-time timers that are already
// due (fire < the task's input watermark), a bundle of those timers. Each
// bundle's timer writes are applied in order before the next starts. It
// returns every bundle's result, in order. Processing-time timers a bundle
// sets fire in a later attempt (Due), never in a loop within one.
func (h *Head) Run(ctx context.Context, elements [][]byte, run RunFunc) ([]*fnapi.Result, error) {
	h.mu.Lock()
	fire := h.mu.fire
	h.mu.fire = nil
	h.mu.Unlock()
	var out []*fnapi.Result
	for round := 0; ; round++ {
		if round > h.cfg.MaxTimerRounds {
			return out, fmt.Errorf("%w: stage %s: %d bundles in one attempt", ErrTimerLoop, h.cfg.Stage, round)
		}
		res, err := run(ctx, elements, fire)
		if err != nil {
			return out, err
		}
		out = append(out, res)
		elements = nil
		if fire, err = h.applyTimers(res.Timers); err != nil {
			return out, err
		}
		if len(fire) == 0 {
			return out, nil
		}
	}
}

// applyTimers applies a bundle's timer writes and pops the event-time
// timers now due in the tasks of the attempt.
func (h *Head) applyTimers(set map[fnapi.TimerFamilyID][]fnapi.Timer) (map[fnapi.TimerFamilyID][][]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]fnapi.TimerFamilyID, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	touched := map[int32]bool{}
	for _, id := range ids {
		f, ok := h.families[id.Family]
		if id.Transform != h.cfg.Transform || !ok {
			return nil, fmt.Errorf("userstate: stage %s: timers of %s, not a timer family of %s", h.cfg.Stage, id, h.cfg.Transform)
		}
		for _, tm := range set[id] {
			p := stage.KeyPartition(tm.Key, h.cfg.Partitions)
			t, err := h.taskLocked(p)
			if err != nil {
				return nil, err
			}
			if err := t.SetTimer(id.Family, f.Domain == fnapi.TimeDomainProcessingTime, tm); err != nil {
				return nil, err
			}
			touched[p] = true
		}
	}
	h.mu.fire = nil
	for p := range touched {
		wm, ok := h.mu.advanced[p]
		if !ok {
			continue
		}
		due, err := h.mu.tasks[p].PopDue(wm, false, 0)
		if err != nil {
			return nil, err
		}
		for _, tm := range due {
			h.addFireLocked(tm)
		}
	}
	fire := h.mu.fire
	h.mu.fire = nil
	return fire, nil
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
	p := stage.KeyPartition(key, h.cfg.Partitions)
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

// Prepare deletes the expired windows' state of the attempt's tasks and
// writes the attempt's state and timer changes to the changelog.
func (h *Head) Prepare(produce stage.ProduceFunc) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, wm := range h.mu.advanced {
		t := h.mu.tasks[p]
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
	h.mu.advanced = map[int32]mtime.Time{}
	h.mu.fire = nil
	return h.cfg.Stores.Committed()
}

// Aborted drops the attempt's changes of tasks ps and reloads their timers
// from the committed store.
func (h *Head) Aborted(ps []int32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.advanced = map[int32]mtime.Time{}
	h.mu.fire = nil
	h.cfg.Stores.Aborted(ps)
	for _, p := range ps {
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

// Package splittable is the head of a stage whose first transform is the
// process step of a splittable DoFn that may checkpoint
// (plan.HeadSplittable): periodic.Impulse, a self-checkpointing read.
//
// The stage's input topic carries sized restrictions, KV<KV<element,
// restriction>, size>, written by the stage before it (where the pair and
// split steps run). The head runs each input record in a bundle of its own
// (step.Work.Alone), so that the residuals the bundle returns (the rest of
// a restriction the DoFn asked to resume, Beam's DelayedBundleApplication)
// belong to the task whose record it was. Each residual is kept in the
// task's state store (stage/state), so it is committed in the transaction
// that commits the bundle's outputs and the input offset: a kill resumes it
// exactly once, from the changelog, on whichever instance gets the task.
//
// A residual is resumed (sent to the same data source, in a bundle of its
// own) once its requested delay has passed (sdf.ResumeProcessingIn; zero:
// at the task's next attempt), by processing time (Config.Clock); Wake
// lists the tasks with one due. Until then it holds the task's output
// watermark at the watermark its DoFn's watermark estimator reported for it
// (the residual's output watermarks; without one, the residual element's
// timestamp), as Beam's model says a runner holds the output of an
// unfinished restriction. A task with no residual holds nothing.
package splittable

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// Config configures the head of one splittable stage in one instance.
type Config struct {
	// Stage names the stage in logs and errors. Required.
	Stage string
	// Stores holds the tasks' stores (state.Open); the head owns it from
	// now on: Close closes it. Required.
	Stores *state.Manager
	// Clock is processing time, for the residuals' delays. Default time.Now.
	Clock func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// residual is one kept residual: when it is due, the watermark it holds
// and its element (the data source's wire encoding).
type residual struct {
	seq       uint64
	due       time.Time
	watermark mtime.Time
	element   []byte
}

// task is one task's residuals, as its store (with the attempt's pending
// writes) has them.
type task struct {
	st        *state.Task
	residuals map[uint64]*residual
	next      uint64
}

// Head is the head of a splittable stage (step.Head).
type Head struct {
	step.InternalInput
	cfg Config
	log *slog.Logger

	mu struct {
		sync.Mutex
		tasks map[int32]*task
		// current is the task whose work the step runs now (every work
		// this head returns is Alone: Results follows at once).
		current int32
		// drained: the application is draining (Drain).
		drained bool
	}
}

var (
	_ step.Head       = (*Head)(nil)
	_ step.Drainer    = (*Head)(nil)
	_ step.StateSizer = (*Head)(nil)
)

// Drain implements step.Drainer (Beam's drain of a splittable DoFn):
// every residual is due at once and, from now on, every restriction runs
// truncated (step.Work.Drain: the DoFn's TruncateRestriction, then its
// process step, which can no longer checkpoint), so the tasks hold nothing
// once they have run and their output watermark follows their input's to
// the end of time. The stage goes on reading its input.
func (h *Head) Drain() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.drained = true
	n := 0
	for _, t := range h.mu.tasks {
		n += len(t.residuals)
	}
	h.log.Info("splittable: draining: residuals run now, truncated", "residuals", n)
	return false
}

// NewHead returns the head.
func NewHead(cfg Config) (*Head, error) {
	if cfg.Stage == "" || cfg.Stores == nil {
		return nil, errors.New("splittable: Config needs Stage and Stores")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Head{cfg: cfg, log: cfg.Logger.With("stage", cfg.Stage)}
	h.mu.tasks = map[int32]*task{}
	h.mu.current = -1
	return h, nil
}

// keyPrefix prefixes every residual's key in a task's store; the key is the
// prefix and the residual's sequence number (8 bytes, big-endian), so a
// scan finds them in the order they were kept.
var keyPrefix = []byte("r/")

func residualKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, keyPrefix...), seq)
}

// encode is a residual's stored value: due (Unix ms, 8 bytes), watermark
// (mtime ms, 8 bytes, two's complement), element.
func (r *residual) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(r.due.UnixMilli()))
	b = binary.BigEndian.AppendUint64(b, uint64(int64(r.watermark)))
	return append(b, r.element...)
}

func decode(key, v []byte) (*residual, error) {
	if len(key) != len(keyPrefix)+8 || len(v) < 16 {
		return nil, fmt.Errorf("malformed residual record (key %x, %d bytes)", key, len(v))
	}
	return &residual{
		seq:       binary.BigEndian.Uint64(key[len(keyPrefix):]),
		due:       time.UnixMilli(int64(binary.BigEndian.Uint64(v))),
		watermark: mtime.Time(int64(binary.BigEndian.Uint64(v[8:]))),
		element:   append([]byte{}, v[16:]...),
	}, nil
}

// load reads t's residuals from its store.
func (t *task) load() error {
	t.residuals = map[uint64]*residual{}
	t.next = 0
	return t.st.Scan(keyPrefix, func(k, v []byte) error {
		r, err := decode(k, v)
		if err != nil {
			return err
		}
		t.residuals[r.seq] = r
		t.next = max(t.next, r.seq+1)
		return nil
	})
}

// Assign restores task p's store from its changelog and loads its residuals.
func (h *Head) Assign(ctx context.Context, p int32) error {
	st, err := h.cfg.Stores.Restore(ctx, p)
	if err != nil {
		return err
	}
	t := &task{st: st}
	if err := t.load(); err != nil {
		return fmt.Errorf("splittable: stage %s task %d: %w", h.cfg.Stage, p, err)
	}
	h.mu.Lock()
	h.mu.tasks[p] = t
	h.mu.Unlock()
	h.log.Info("splittable: task ready", "task", p, "residuals", len(t.residuals))
	return nil
}

// Revoke drops task p's store.
func (h *Head) Revoke(p int32) {
	h.mu.Lock()
	delete(h.mu.tasks, p)
	h.mu.Unlock()
	h.cfg.Stores.Drop(p)
}

// Element runs the record's sized restriction in a bundle of its own.
func (h *Head) Element(p int32, r step.In) (step.Work, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.taskLocked(p); err != nil {
		return step.Work{}, err
	}
	h.mu.current = p
	return step.Work{Elements: [][]byte{r.Value}, Alone: true, Drain: h.mu.drained}, nil
}

// Advance resumes task p's residuals that are due (their delay has passed),
// in the order they were kept, in one bundle of their own.
func (h *Head) Advance(p int32, _ mtime.Time) (step.Work, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskLocked(p)
	if err != nil {
		return step.Work{}, err
	}
	now := h.cfg.Clock()
	var due []*residual
	for _, r := range t.residuals {
		if h.mu.drained || !r.due.After(now) {
			due = append(due, r)
		}
	}
	if len(due) == 0 {
		return step.Work{}, nil
	}
	sort.Slice(due, func(i, j int) bool { return due[i].seq < due[j].seq })
	w := step.Work{Alone: true, Point: true, Drain: h.mu.drained}
	for _, r := range due {
		if err := t.st.Delete(residualKey(r.seq)); err != nil {
			return step.Work{}, err
		}
		delete(t.residuals, r.seq)
		w.Elements = append(w.Elements, r.element)
	}
	h.mu.current = p
	return w, nil
}

// Results keeps the bundle's residuals with the task whose work it ran.
// Nothing runs at once: a residual is resumed at a later Advance, so a DoFn
// that checkpoints at once cannot spin within one attempt.
func (h *Head) Results(b *step.Bundle) (step.Work, error) {
	if len(b.Residuals) == 0 {
		return step.Work{}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := h.taskLocked(h.mu.current)
	if err != nil {
		return step.Work{}, fmt.Errorf("splittable: %d residuals of no task's bundle: %w", len(b.Residuals), err)
	}
	now := h.cfg.Clock()
	for _, res := range b.Residuals {
		r := &residual{seq: t.next, due: now.Add(res.Delay), watermark: residualWatermark(res), element: res.Element}
		t.next++
		if err := t.st.Set(residualKey(r.seq), r.encode()); err != nil {
			return step.Work{}, err
		}
		t.residuals[r.seq] = r
	}
	return step.Work{}, nil
}

// residualWatermark is the watermark a residual holds: the least of the
// output watermarks its watermark estimator reported, else its element's
// timestamp (the first 8 bytes of a windowed value: milliseconds,
// big-endian, sign bit flipped, as Beam's timestamp coder writes them).
func residualWatermark(r fnapi.Residual) mtime.Time {
	if len(r.OutputWatermarks) > 0 {
		wm := mtime.MaxTimestamp
		for _, w := range r.OutputWatermarks {
			wm = min(wm, w)
		}
		return wm
	}
	if len(r.Element) >= 8 {
		return mtime.Time(int64(binary.BigEndian.Uint64(r.Element) ^ (1 << 63)))
	}
	return mtime.MinTimestamp
}

// Hold is the least watermark of task p's residuals (mtime.MaxTimestamp
// without one).
func (h *Head) Hold(p int32) mtime.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	hold := mtime.MaxTimestamp
	if t := h.mu.tasks[p]; t != nil {
		for _, r := range t.residuals {
			hold = min(hold, r.watermark)
		}
	}
	return hold
}

// Wake returns the tasks with a residual due now, sorted.
func (h *Head) Wake() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock()
	var out []int32
	for p, t := range h.mu.tasks {
		for _, r := range t.residuals {
			if h.mu.drained || !r.due.After(now) {
				out = append(out, p)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Residuals is how many residuals task p keeps (-1 if it is not assigned).
func (h *Head) Residuals(p int32) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.mu.tasks[p]; t != nil {
		return len(t.residuals)
	}
	return -1
}

// PendingState is the stores' pending writes (step.StateSizer).
func (h *Head) PendingState() int { return h.cfg.Stores.Pending() }

// Prepare writes the attempt's residual changes to the changelog.
func (h *Head) Prepare(produce step.ProduceFunc) error {
	return h.cfg.Stores.Prepare(state.ProduceFunc(produce))
}

// Committed applies the attempt's changes to the stores.
func (h *Head) Committed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.current = -1
	return h.cfg.Stores.Committed()
}

// Aborted drops the attempt's changes of tasks ps (of every task if ps is
// nil) and reloads their residuals from the committed store.
func (h *Head) Aborted(ps []int32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.current = -1
	h.cfg.Stores.Aborted(ps)
	if ps == nil {
		for p := range h.mu.tasks {
			ps = append(ps, p)
		}
	}
	for _, p := range ps {
		if t := h.mu.tasks[p]; t != nil {
			if err := t.load(); err != nil {
				return fmt.Errorf("splittable: stage %s task %d: reload after abort: %w", h.cfg.Stage, p, err)
			}
		}
	}
	return nil
}

// Close closes the stores.
func (h *Head) Close() { h.cfg.Stores.Close() }

func (h *Head) taskLocked(p int32) (*task, error) {
	t := h.mu.tasks[p]
	if t == nil {
		return nil, fmt.Errorf("splittable: stage %s task %d: %w", h.cfg.Stage, p, state.ErrNotAssigned)
	}
	return t, nil
}

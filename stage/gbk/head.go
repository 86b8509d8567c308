package gbk

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// HeadConfig configures the GroupByKey head of one stage in one instance.
type HeadConfig struct {
	// Stage names the stage, in logs and errors. Required.
	Stage string
	// Strategy is the input's windowing strategy (ParseStrategy). Required.
	Strategy Strategy
	// Codec decodes input elements and encodes panes (NewCodec). Required.
	Codec *Codec
	// Stores holds the tasks' state stores (state.Open). Required. The head
	// owns it from now on: Close closes it.
	Stores *state.Manager
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock is the processing time processing-time triggers see, read
	// before every Element and Advance. Default time.Now. (Beam: the
	// runner's processing time.) In a job with a job clock (a TestStream:
	// step.Config.JobClock) the step's SetProcessingTime replaces it
	// for each task.
	Clock func() time.Time
	// FireBudget bounds the values one attempt fires per task under the
	// default trigger (Core.SetFireBudget): past it, the task's other due
	// panes fire in the next attempts, which Wake asks for at once. It
	// keeps an attempt's memory, state writes and transaction bounded when
	// the watermark passes millions of values at once (the end of a
	// bounded input: every window fires). Default DefaultFireBudget;
	// negative: no bound.
	FireBudget int
	// Compact, if set, turns on compaction (compact.go): at the end of
	// each attempt (Prepare) the head passes it, in one call, every entry
	// that got values in the attempt and holds more than one
	// (Core.Compactable: Key, Window and Values set), and stores the value
	// it returns for each, in the same order, in place of the entry's
	// values (Core.ReplaceValues). For a lifted combine's GroupByKey under
	// the default trigger, in discarding mode: the runner's Compact runs
	// the combine's MergeAccumulators in the SDK. An error aborts the
	// attempt.
	Compact func(panes []Pane) ([][]byte, error)
}

// DefaultFireBudget is HeadConfig.FireBudget's default: 100 000 values a
// task and attempt (about 10 MB of state deletes and a few MB of panes for
// small values).
const DefaultFireBudget = 100_000

// Head is the runner-side GroupByKey at the head of a stage (step.Head):
// per task a Core over the task's state.Task. Element buffers values,
// Advance fires panes, and the store's pending writes go to the changelog
// in the attempt's transaction (Prepare), to Pebble once it committed
// (Committed), or nowhere (Aborted, after which the cores reload from the
// committed store).
type Head struct {
	step.InternalInput
	cfg   HeadConfig
	log   *slog.Logger
	cores map[int32]*Core
	// droppedAttempt counts expired values dropped in the current attempt;
	// dropped the committed total.
	droppedAttempt int64
	dropped        atomic.Int64
	// closedAttempt counts values dropped in the current attempt because
	// their window's trigger had finished; closed the committed total.
	closedAttempt int64
	closed        atomic.Int64
	// woken[p] is the processing-time deadline task p was last woken for
	// (Wake): a deadline whose trigger did not fire at it (its window's
	// trigger moved on another way) wakes the task once, not at every poll.
	woken map[int32]int64
	// jobClock[p] is task p's job clock (SetProcessingTime), ms; absent:
	// the wall clock (cfg.Clock).
	jobClock map[int32]int64
	// windowsHeld is WindowsHeld.
	windowsHeld atomic.Int64
	// budgetStops is BudgetStops.
	budgetStops atomic.Int64
	// compacted is Compacted.
	compacted atomic.Int64
}

// BudgetStops counts the Advance calls after which a task owed panes past
// its fire budget (HeadConfig.FireBudget), aborted attempts included.
// Safe from any goroutine.
func (h *Head) BudgetStops() int64 { return h.budgetStops.Load() }

var (
	_ step.Head           = (*Head)(nil)
	_ step.JobClockReader = (*Head)(nil)
	_ step.Owing          = (*Head)(nil)
	_ step.Due            = (*Head)(nil)
	_ step.StateSizer     = (*Head)(nil)
)

// NewHead returns the head.
func NewHead(cfg HeadConfig) (*Head, error) {
	if cfg.Stage == "" || cfg.Codec == nil || cfg.Stores == nil || cfg.Strategy.Kind == "" {
		return nil, fmt.Errorf("gbk: HeadConfig needs Stage, Strategy, Codec and Stores")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.FireBudget == 0 {
		cfg.FireBudget = DefaultFireBudget
	}
	return &Head{cfg: cfg, log: cfg.Logger.With("stage", cfg.Stage), cores: map[int32]*Core{}, woken: map[int32]int64{}, jobClock: map[int32]int64{}}, nil
}

// Dropped is the number of expired values dropped by committed attempts
// (Beam: "droppedDueToLateness").
func (h *Head) Dropped() int64 { return h.dropped.Load() }

// Assign restores task p's store from its changelog partition and loads
// its core.
func (h *Head) Assign(ctx context.Context, p int32) error {
	t, err := h.cfg.Stores.Restore(ctx, p)
	if err != nil {
		return err
	}
	c := NewCore(h.cfg.Strategy, t)
	if err := c.Load(); err != nil {
		return fmt.Errorf("gbk: stage %s task %d: load: %w", h.cfg.Stage, p, err)
	}
	c.SetFireBudget(h.cfg.FireBudget)
	c.SetCompacting(h.cfg.Compact != nil)
	h.cores[p] = c
	h.publishWindows()
	h.log.Info("gbk: task ready", "task", p, "watermark", int64(c.Watermark()), "hold", int64(c.Hold()), "windows", len(c.windows))
	return nil
}

// Revoke drops task p's core and store.
func (h *Head) Revoke(p int32) {
	delete(h.cores, p)
	delete(h.woken, p)
	delete(h.jobClock, p)
	h.cfg.Stores.Drop(p)
	h.publishWindows()
}

func (h *Head) core(p int32) (*Core, error) {
	c := h.cores[p]
	if c == nil {
		return nil, fmt.Errorf("gbk: stage %s task %d: %w", h.cfg.Stage, p, state.ErrNotAssigned)
	}
	return c, nil
}

// ClosedDropped is the number of values dropped by committed attempts
// because their window's trigger had finished (Beam:
// "droppedDueToClosedWindow").
func (h *Head) ClosedDropped() int64 { return h.closed.Load() }

// Unskippable implements step.Unskippable: an element record can complete
// a pane (a data-driven trigger) holding earlier records' values, so the
// record a pane's bundle fails with is not the pane's poison.
func (h *Head) Unskippable() string {
	return "a GroupByKey's record can complete a pane that holds earlier records' values: setting it aside would not set the pane aside"
}

// Element buffers one input element in every window it is in. The record
// key must be the element's key bytes (KeyOf upstream). It returns the
// panes a non-default trigger fires on it (the default trigger fires only
// in Advance). A value the Codec cannot decode, or whose key is not the
// record key, is step.ErrUndecodable (the record's failure, named by the
// loop; never set aside: Unskippable).
func (h *Head) Element(p int32, r step.In) (step.Work, error) {
	out, err := h.element(p, r.Key, r.Value)
	return step.Work{Elements: out}, err
}

func (h *Head) element(p int32, key, value []byte) ([][]byte, error) {
	c, err := h.core(p)
	if err != nil {
		return nil, err
	}
	d, err := h.cfg.Codec.Decode(value)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", step.ErrUndecodable, err)
	}
	if key != nil && !bytes.Equal(key, d.Key) {
		return nil, fmt.Errorf("%w: %w: record key %x is not the element's key %x", step.ErrUndecodable, ErrMalformed, key, d.Key)
	}
	c.SetProcessingTime(h.now(p))
	var out [][]byte
	for _, w := range d.Windows {
		closedBefore := c.ClosedDropped()
		panes, dropped, _, err := c.AddFire(Element{Key: d.Key, Window: w, Timestamp: d.Timestamp, Value: d.Value})
		if err != nil {
			return nil, err
		}
		if dropped {
			h.droppedAttempt++
		}
		// The value, and with session windows the values of a merged
		// window that a finished trigger closed (trigger_merge.go).
		h.closedAttempt += c.ClosedDropped() - closedBefore
		for _, pn := range panes {
			e, err := h.cfg.Codec.Encode(pn)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Advance fires task p's panes for input watermark wm and returns them
// encoded, in firing order.
func (h *Head) Advance(p int32, wm mtime.Time) (step.Work, error) {
	c, err := h.core(p)
	if err != nil {
		return step.Work{}, err
	}
	c.SetProcessingTime(h.now(p))
	panes, err := c.Advance(wm)
	if err != nil {
		return step.Work{}, err
	}
	if c.Owes() {
		h.budgetStops.Add(1)
	}
	out := make([][]byte, 0, len(panes))
	for _, pn := range panes {
		e, err := h.cfg.Codec.Encode(pn)
		if err != nil {
			return step.Work{}, err
		}
		out = append(out, e)
	}
	return step.Work{Elements: out}, nil
}

// SetProcessingTime implements step.JobClockReader: task p's
// processing-time triggers read ms (the job clock) from now on.
func (h *Head) SetProcessingTime(p int32, ms int64) { h.jobClock[p] = ms }

// now is task p's processing time (Unix ms, or the job clock's ms).
func (h *Head) now(p int32) int64 {
	if ms, ok := h.jobClock[p]; ok {
		return ms
	}
	return h.cfg.Clock().UnixMilli()
}

// Wake returns the tasks with an AfterProcessingTime deadline due now
// (Core.NextProcessingTime), sorted: the step advances them, and Advance
// evaluates their triggers at the current processing time. Without it a
// processing-time trigger fired only when the task's next record or
// report arrived, never on a quiet input. It also returns the tasks that
// owe panes past the last attempt's fire budget (HeadConfig.FireBudget).
func (h *Head) Wake() []int32 {
	now := h.cfg.Clock().UnixMilli()
	var out []int32
	for p, c := range h.cores {
		if c.Owes() {
			out = append(out, p) // panes past the last attempt's fire budget
			continue
		}
		if _, ok := h.jobClock[p]; ok {
			continue // the job clock moves only with reports, which are points
		}
		if next, ok := c.NextProcessingTime(); ok && next <= now && next > h.woken[p] {
			h.woken[p] = next
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Hold is task p's hold (Core.Hold): the earliest timestamp of a pane it
// may still fire; mtime.MaxTimestamp if p is not assigned.
func (h *Head) Hold(p int32) mtime.Time {
	if c := h.cores[p]; c != nil {
		return c.Hold()
	}
	return mtime.MaxTimestamp
}

// Results implements step.Head: the bundles after a GroupByKey set no
// timers.
func (h *Head) Results(*step.Bundle) (step.Work, error) { return step.Work{}, nil }

// PendingState is the stores' pending writes (step.StateSizer).
func (h *Head) PendingState() int { return h.cfg.Stores.Pending() }

// Prepare compacts the attempt's entries (HeadConfig.Compact), then writes
// the attempt's state changes to the changelog.
func (h *Head) Prepare(produce step.ProduceFunc) error {
	if err := h.compact(); err != nil {
		return err
	}
	return h.cfg.Stores.Prepare(state.ProduceFunc(produce))
}

// compact hands the compactable entries of every task (in task order) to
// HeadConfig.Compact in one call and stores what it returns.
func (h *Head) compact() error {
	if h.cfg.Compact == nil {
		return nil
	}
	ps := make([]int32, 0, len(h.cores))
	for p := range h.cores {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	var panes []Pane
	var owner []*Core
	for _, p := range ps {
		c := h.cores[p]
		got, err := c.Compactable()
		if err != nil {
			return fmt.Errorf("gbk: stage %s task %d: compaction: %w", h.cfg.Stage, p, err)
		}
		for range got {
			owner = append(owner, c)
		}
		panes = append(panes, got...)
	}
	if len(panes) == 0 {
		return nil
	}
	merged, err := compactNamed(h.cfg.Compact, h.cfg.Stage, panes)
	if err != nil {
		return err
	}
	if len(merged) != len(panes) {
		return fmt.Errorf("gbk: stage %s: compaction of %d windows returned %d values", h.cfg.Stage, len(panes), len(merged))
	}
	for i, pn := range panes {
		if err := owner[i].ReplaceValues(pn.Key, pn.Window, merged[i]); err != nil {
			return fmt.Errorf("gbk: stage %s: %w", h.cfg.Stage, err)
		}
	}
	h.compacted.Add(int64(len(panes)))
	return nil
}

// Compacted counts the windows compacted (HeadConfig.Compact), aborted
// attempts included. Safe from any goroutine.
func (h *Head) Compacted() int64 { return h.compacted.Load() }

// Committed applies the attempt's state changes to the stores.
func (h *Head) Committed() error {
	if n := h.droppedAttempt; n > 0 {
		total := h.dropped.Add(n)
		h.log.Warn("gbk: dropped values of expired windows (behind the watermark by more than the allowed lateness)", "dropped", n, "dropped_total", total, "allowed_lateness_ms", h.cfg.Strategy.AllowedLateness)
	}
	h.droppedAttempt = 0
	if n := h.closedAttempt; n > 0 {
		total := h.closed.Add(n)
		h.log.Warn("gbk: dropped values of closed windows (their trigger had finished)", "dropped", n, "dropped_total", total)
	}
	h.closedAttempt = 0
	for _, c := range h.cores {
		c.NewAttempt()
	}
	h.publishWindows()
	return h.cfg.Stores.Committed()
}

// Owes implements step.Owing: some task owes panes past the last
// attempt's fire budget (HeadConfig.FireBudget).
func (h *Head) Owes() bool {
	for _, c := range h.cores {
		if c.Owes() {
			return true
		}
	}
	return false
}

// NextDue implements step.Due: the least input watermark at which task
// p fires a pane (Core.NextDue); ok false if p fires none on the
// watermark alone or is not assigned.
func (h *Head) NextDue(p int32) (mtime.Time, bool) {
	if c := h.cores[p]; c != nil {
		return c.NextDue()
	}
	return 0, false
}

// WindowsHeld is the number of open (key, window) panes the head's tasks
// hold, as of the last commit, assignment or revocation: the state a
// GroupByKey stage holds, for the live page. Safe from any goroutine.
func (h *Head) WindowsHeld() int64 { return h.windowsHeld.Load() }

// AttemptDropped is the number of expired values the current attempt
// dropped so far (Dropped adds it once the attempt commits). Must be
// called on the loop's goroutine (stage.Config.CommitRecords).
func (h *Head) AttemptDropped() int64 { return h.droppedAttempt }

// TaskWindowsHeld is the number of open (key, window) panes task p holds
// in the current attempt's state (0 for a task not assigned here). Must be
// called on the loop's goroutine (stage.Config.CommitRecords).
func (h *Head) TaskWindowsHeld(p int32) int64 {
	if c := h.cores[p]; c != nil {
		return c.Held()
	}
	return 0
}

// publishWindows stores the windows the cores hold for WindowsHeld.
func (h *Head) publishWindows() {
	var n int64
	for _, c := range h.cores {
		n += c.Held()
	}
	h.windowsHeld.Store(n)
}

// Aborted drops the attempt's state changes of tasks ps and reloads their
// cores from the committed store.
func (h *Head) Aborted(ps []int32) error {
	h.droppedAttempt, h.closedAttempt = 0, 0
	h.cfg.Stores.Aborted(ps)
	for _, p := range ps {
		if c := h.cores[p]; c != nil {
			if err := c.Load(); err != nil {
				return fmt.Errorf("gbk: stage %s task %d: reload after abort: %w", h.cfg.Stage, p, err)
			}
		}
	}
	return nil
}

// Close closes the stores.
func (h *Head) Close() { h.cfg.Stores.Close() }

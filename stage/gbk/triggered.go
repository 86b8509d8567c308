package gbk

import (
	"bytes"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
)

// SetProcessingTime sets the processing time (ms since the epoch) the
// triggers see from now on: the core reads no clock; the head passes its
// injected clock's time before each Element and Advance. Never decreases.
func (c *Core) SetProcessingTime(ms int64) { c.now = max(c.now, ms) }

// ClosedDropped counts the values dropped since the core was created
// because their window's trigger had finished (Beam's
// droppedDueToClosedWindow).
func (c *Core) ClosedDropped() int64 { return c.closedDropped }

// AddFire buffers one value (Add) and, with a non-default trigger,
// evaluates the window's trigger after it (Beam evaluates triggers per
// element): it returns the pane that fires, if any. closed=true says the
// value was dropped, storing nothing, because the trigger of its window
// had finished: a finished trigger closes the window (Beam's
// ReduceFnRunner) until it expires. dropped is Add's: the window expired.
func (c *Core) AddFire(e Element) (panes []Pane, dropped, closed bool, err error) {
	t := c.strat.Trigger
	if t != nil && c.strat.Merging() {
		return c.addFireMerging(e)
	}
	if t != nil && c.strat.expiry(e.Window) >= c.wm {
		if ent := c.lookup(e.Window, e.Key); ent != nil && ent.m.Closed {
			c.closedDropped++
			return nil, false, true, nil
		}
	}
	if dropped, err = c.Add(e); err != nil || dropped || t == nil {
		return nil, dropped, false, err
	}
	ent := c.lookup(e.Window, e.Key)
	ctx := triggerCtx{eow: e.Window.MaxTimestamp() < c.wm, now: c.now, element: true}
	if panes, err = c.fireOnElement(ent, ctx, panes); err != nil {
		return nil, false, false, err
	}
	return panes, false, false, nil
}

// fireOnElement runs the part of adding an element that follows storing it in
// ent, for merging windows as for the others: the trigger sees the element
// (ctx.eow: it arrived with the input watermark past the window's end, which
// makes the pane LATE), fires if it should (its pane appended to panes), and
// ent's state, the window's hold and the deadline indexes are brought up to
// date. It returns panes; errors are the store's.
func (c *Core) fireOnElement(ent *entry, ctx triggerCtx, panes []Pane) ([]Pane, error) {
	ent.m.LateIn = ent.m.LateIn || ctx.eow
	c.trigState(ent)
	c.strat.Trigger.onElement(ent.m.Trig, ctx)
	p, ok, err := c.evaluate(ent, ctx, c.wm, false)
	if err != nil {
		return nil, err
	}
	if ok {
		panes = append(panes, p)
	}
	if err := c.save(ent); err != nil {
		return nil, err
	}
	c.recomputeHold(c.windows[ent.win])
	c.track(ent)
	return panes, nil
}

func (c *Core) trigState(e *entry) {
	if n := c.strat.Trigger.nodes(); len(e.m.Trig) != n {
		e.m.Trig = make([]nodeState, n)
	}
}

// evaluate fires e's trigger if it should and returns the pane (ok=false if
// it would be empty (nonEmpty): the trigger's state still moves on). The
// pane's timing (Beam's PaneInfoTracker):
//
//	LATE    ⇔ LateIn (a value arrived with the input watermark past the
//	          window's end: the output watermark may be past it too)
//	          ∨ a non-EARLY pane fired before
//	EARLY   ⇔ otherwise, ¬eow (the input watermark is not past the window)
//	ON_TIME ⇔ otherwise (the one on-time pane)
//
// prev is the input watermark before this evaluation. last ⇔ the trigger finished
// (the window closes) ∨ closing (the window expires now). A finished
// trigger closes the window: its values are deleted, Closed is set.
func (c *Core) evaluate(e *entry, ctx triggerCtx, prev mtime.Time, closing bool) (Pane, bool, error) {
	t := c.strat.Trigger
	if !t.shouldFire(e.m.Trig, ctx) {
		return Pane{}, false, nil
	}
	t.onFire(e.m.Trig, ctx)
	finished := e.m.Trig[t.index].finished
	var p Pane
	timing := c.paneTiming(e, ctx)
	ok := c.nonEmpty(e) || c.emitsEmpty(e, timing, prev, finished || closing)
	if ok {
		var err error
		if p, err = c.fireTiming(e, prev, finished || closing, timing); err != nil {
			return Pane{}, false, err
		}
		e.m.LateIn = false
	}
	if finished {
		e.m.Closed = true
		if err := c.dropValues(e); err != nil {
			return Pane{}, false, err
		}
	}
	return p, ok, nil
}

// nonEmpty says whether a firing of e has values to emit: a pane holds
// the values since the last one (discarding) or every value
// (accumulating). A firing with none emits a pane only if emitsEmpty.
func (c *Core) nonEmpty(e *entry) bool {
	if c.strat.Accumulating {
		return e.m.Total > 0
	}
	return e.m.Pending > 0
}

// emitsEmpty says whether a firing of e with no value (¬nonEmpty) still
// emits its pane, of timing timing, prev being the input watermark before
// the firing and last saying the pane is the window's last (Beam Java
// ReduceFnRunner.needToEmit):
//
//	emit ⇔ OnTimeAlways ∧ timing = ON_TIME ∧ prev ≤ w.MaxTimestamp()
//	     ∨ ClosingAlways ∧ last
//
// the on-time pane under OnTimeBehavior FIRE_ALWAYS, at the firing as
// the watermark passes the end of the window (Java's end-of-window
// timer: the garbage-collection firing of a window with allowed lateness
// comes later and is LATE there), and the final pane under
// ClosingBehavior EMIT_ALWAYS, when the trigger finishes or the window
// expires. The entry exists, so the (key, window) has state: a key with
// no value in the window gets no pane.
func (c *Core) emitsEmpty(e *entry, timing typex.PaneTiming, prev mtime.Time, last bool) bool {
	return c.strat.OnTimeAlways && timing == typex.PaneOnTime && prev <= e.win.MaxTimestamp() ||
		c.strat.ClosingAlways && last
}

// paneTiming is the timing of the pane e's trigger fires now; the caller
// clears LateIn if the pane is emitted.
func (c *Core) paneTiming(e *entry, ctx triggerCtx) typex.PaneTiming {
	switch {
	case e.m.LateIn || e.m.NonSpec > 0:
		return typex.PaneLate
	case !ctx.eow:
		return typex.PaneEarly
	}
	return typex.PaneOnTime
}

// dropValues deletes e's stored values (a closed window keeps only its
// meta, to drop later values, until it expires).
func (c *Core) dropValues(e *entry) error {
	if err := c.deleteValues(e); err != nil {
		return err
	}
	e.m.Pending, e.m.Total = 0, 0
	e.m.MinTs, e.m.MaxTs = mtime.MaxTimestamp, mtime.MinTimestamp
	return nil
}

// advanceTriggered is Advance under a non-default trigger: for every
// candidate (key, window) (trigIndex: the windows whose end or expiry the
// watermark passes, the processing-time deadlines passed, the entries hot
// after their last evaluation), in the order of Advance (window max
// timestamp, start, key), with eow ⇔ w.MaxTimestamp() < wm and the
// processing time of SetProcessingTime:
//
//	fire  ⇔ ¬closed ∧ trigger.shouldFire (evaluate)
//	final ⇔ w.MaxTimestamp() + allowedLateness < wm ∧ ¬closed ∧ ¬fire
//	        ∧ (nonEmpty ∨ emitsEmpty): the window expires with values no
//	        firing took, or with none under EMIT_ALWAYS: one last pane
//	        (Beam's GC-time firing; ON_TIME if no non-EARLY pane fired and
//	        the values were not late, else LATE), then the window is
//	        deleted (closed or not). A firing at expiry is the last pane
//	        itself: no final pane follows it.
//
// Another entry's trigger cannot fire at this Advance (trigIndex says
// why), so visiting only the candidates gives the panes that visiting
// every open entry gave (TestTriggeredAdvanceVisitsCandidates compares
// them). An entry is written back only if its state changed.
func (c *Core) advanceTriggered(prev, wm mtime.Time) ([]Pane, error) {
	cands := c.candidates(prev, wm)
	var panes []Pane
	touched := map[Window]bool{}
	for _, e := range cands {
		w := e.win
		touched[w] = true
		closing := c.strat.expiry(w) < wm
		before := e.m.encode()
		ctx := triggerCtx{eow: w.MaxTimestamp() < wm, now: c.now, merging: c.strat.Merging()}
		if !e.m.Closed {
			c.trigState(e)
			p, ok, err := c.evaluate(e, ctx, prev, closing)
			if err != nil {
				return nil, err
			}
			if ok {
				panes = append(panes, p)
			}
			// The trigger's pane, if emitted at expiry, was the last
			// already (evaluate): no second final pane.
			if closing && !e.m.Closed && !ok {
				timing := c.paneTiming(e, ctx)
				if c.nonEmpty(e) || c.emitsEmpty(e, timing, prev, true) {
					p, err := c.fireTiming(e, prev, true, timing)
					if err != nil {
						return nil, err
					}
					e.m.LateIn = false
					panes = append(panes, p)
				}
			}
		}
		if closing {
			if err := c.gc(e); err != nil {
				return nil, err
			}
			continue
		}
		if !bytes.Equal(before, e.m.encode()) {
			if err := c.save(e); err != nil {
				return nil, err
			}
		}
		c.trackAt(e, wm)
	}
	for w := range touched {
		if ws := c.windows[w]; ws != nil {
			c.recomputeHold(ws)
		}
	}
	return panes, nil
}

// trackAt is track with the input watermark wm this Advance moves to
// (c.wm is set after advanceTriggered).
func (c *Core) trackAt(e *entry, wm mtime.Time) {
	old := c.wm
	c.wm = wm
	c.track(e)
	c.wm = old
}

// NextProcessingTime is the earliest processing time (Unix ms) at which an
// AfterProcessingTime trigger of one of the task's open windows may fire:
// the least deadline (fireAt) of an unfinished processing-time node that an
// element has armed and that no Advance has evaluated at or after; ok is
// false when there is none (no trigger, none armed). The head wakes the
// task for it (Head.Wake), so a processing-time trigger fires on the wall
// clock on a quiet input too, not only when the next record or report
// arrives. O(1) amortized (trigIndex's deadline heap).
func (c *Core) NextProcessingTime() (next int64, ok bool) {
	if c.ti == nil {
		return 0, false
	}
	it, ok := c.ti.deadlines.peekLive(c)
	return it.at, ok
}

package gbk

// Triggers on merging windows (session windows).
//
// When a value's proto-session merges windows of its key, the merged
// window's trigger state is the merge of its parts' states, as Beam's
// TriggerStateMachine.onMerge defines it (Java runners-core, called by
// ReduceFnRunner after the windows merged and before the value is
// processed). The parts are the live windows merged and, unless the value's
// proto-session is one of them, the proto-session itself with a fresh
// state (Beam merges the value's new window like any other:
// MergeOverlappingIntervalWindows). A merge of one part is no merge: the
// state stays as it is. Per node (any/all: over the parts; eow ⇔ the
// input watermark is past the merged window's max timestamp):
//
//	Never:        no state
//	Always:       count = Σ count
//	Count(n):     finished ⇔ finished in any part (AfterPane: it fired
//	              for some of the merged window's values already);
//	              else count = Σ count
//	ProcTime:     finished ⇔ finished in any part; else fireAt = the
//	              earliest armed deadline (AfterDelayFromFirstElement
//	              merges its delayed-until state to the earliest)
//	SyncProcTime: as Count (armed ⇔ armed in some part)
//	EndOfWindow:  if every part had its on-time firing and eow: on-time
//	              done (count = 1), early reset, late = merge of the late
//	              sides, finished ⇔ no late trigger; otherwise the early
//	              side is active again: count = 0, early = merge of the
//	              early sides, late reset (AfterWatermarkEarlyAndLate)
//	AfterAll:     subs merged; finished ⇔ every sub finished
//	AfterAny:     subs merged; finished ⇔ some sub finished
//	AfterEach:    subs merged in order while every earlier sub is
//	              finished, the rest reset; finished ⇔ all finished
//	Repeat(t):    t merged
//	OrFinally:    both merged; finished ⇔ either finished
//
// The merged window is closed ⇔ the root finished: a later value of it is
// dropped (droppedDueToClosedWindow) and its buffered values will never
// fire (ReduceFnRunner emits nothing for a closed window at GC), so they
// are dropped now, and counted in ClosedDropped with the value. It is LateIn if a part was. Pane indexes continue from
// the largest of the parts (absorbCounts), and the merged window holds the
// parts' values in order (accumulating: every value not yet discarded;
// discarding: those pending).

// mergeState writes into out the state of t's subtree in a merged window
// from parts, the states of the merged windows (one slice of nodeState per
// part, each of t's tree size). eow: the input watermark is past the
// merged window's max timestamp.
func (t *Trigger) mergeState(parts [][]nodeState, out []nodeState, eow bool) {
	i := t.index
	anyFin := false
	for _, p := range parts {
		anyFin = anyFin || p[i].finished
	}
	s := &out[i]
	*s = nodeState{}
	switch t.Kind {
	case TrigNever:
	case TrigAlways:
		for _, p := range parts {
			s.count += p[i].count
		}
	case TrigCount, TrigSyncProcTime:
		if anyFin {
			s.finished = true
			return
		}
		for _, p := range parts {
			s.count += p[i].count
		}
	case TrigProcTime:
		if anyFin {
			s.finished = true
			return
		}
		for _, p := range parts {
			if at := p[i].fireAt; at != 0 && (s.fireAt == 0 || at < s.fireAt) {
				s.fireAt = at
			}
		}
	case TrigEndOfWindow:
		onTime := true
		for _, p := range parts {
			onTime = onTime && p[i].count > 0
		}
		early, late := t.Subs[0], t.Subs[1]
		if onTime && eow {
			s.count = 1
			s.finished = late == nil
			if early != nil {
				early.reset(out)
			}
			if late != nil {
				late.mergeState(parts, out, eow)
			}
			return
		}
		if early != nil {
			early.mergeState(parts, out, eow)
		}
		if late != nil {
			late.reset(out)
		}
	case TrigAll:
		s.finished = true
		for _, sub := range t.Subs {
			sub.mergeState(parts, out, eow)
			s.finished = s.finished && out[sub.index].finished
		}
	case TrigAny:
		for _, sub := range t.Subs {
			sub.mergeState(parts, out, eow)
			s.finished = s.finished || out[sub.index].finished
		}
	case TrigEach:
		prior := true
		for _, sub := range t.Subs {
			if prior {
				sub.mergeState(parts, out, eow)
				prior = out[sub.index].finished
			} else {
				sub.reset(out)
			}
		}
		s.finished = prior
	case TrigRepeat:
		t.Subs[0].mergeState(parts, out, eow)
	case TrigOrFinally:
		t.Subs[0].mergeState(parts, out, eow)
		t.Subs[1].mergeState(parts, out, eow)
		s.finished = out[t.Subs[0].index].finished || out[t.Subs[1].index].finished
	}
}

// mergedTrigger is the trigger state, closed and LateIn flags of window
// win, merged from the entries merged and, unless it is one of their
// windows, the value's proto-session proto (a fresh state). merge=false:
// one part, nothing merges (the caller keeps the entry's state).
func (c *Core) mergedTrigger(proto, win Window, merged []*entry) (st []nodeState, closed, lateIn, merge bool) {
	n := c.strat.Trigger.nodes()
	var parts [][]nodeState
	fresh := true
	for _, e := range merged {
		if e.win == proto {
			fresh = false
		}
		p := e.m.Trig
		if len(p) != n {
			p = make([]nodeState, n)
		}
		parts = append(parts, p)
		lateIn = lateIn || e.m.LateIn
	}
	if fresh {
		parts = append(parts, make([]nodeState, n))
	}
	if len(parts) < 2 {
		return nil, false, false, false
	}
	st = make([]nodeState, n)
	c.strat.Trigger.mergeState(parts, st, win.MaxTimestamp() < c.wm)
	return st, st[c.strat.Trigger.index].finished, lateIn, true
}

// addFireMerging is AddFire for merging windows under a non-default
// trigger: the value's proto-session merges with the key's windows it
// overlaps (Add), the merged window takes the merged trigger state
// (mergedTrigger), and then, unless it is closed, the value is buffered
// and the trigger evaluated as in AddFire.
func (c *Core) addFireMerging(e Element) (panes []Pane, dropped, closed bool, err error) {
	if c.strat.expiry(e.Window) < c.wm {
		c.dropped++
		return nil, true, false, nil
	}
	win, merged := c.mergeCandidates(e.Key, e.Window)
	st, isClosed, lateIn, remerge := c.mergedTrigger(e.Window, win, merged)
	ent, isNew, err := c.merge(e.Key, win, merged)
	if err != nil {
		return nil, false, false, err
	}
	if remerge {
		ent.m.Trig, ent.m.Closed, ent.m.LateIn = st, isClosed, lateIn
	}
	if ent.m.Closed {
		// The merged parts' values no pane took are dropped with the
		// value, and counted with it (ClosedDropped), never silently.
		c.closedDropped += ent.m.Pending
		if ent.m.Total > 0 {
			if err := c.dropValues(ent); err != nil {
				return nil, false, false, err
			}
		}
		if isNew {
			c.index(ent)
		} else {
			c.recomputeHold(c.windows[ent.win])
		}
		c.closedDropped++
		c.track(ent)
		return nil, false, true, c.save(ent)
	}
	if err := c.put(ent, isNew, e); err != nil {
		return nil, false, false, err
	}
	ctx := triggerCtx{eow: win.MaxTimestamp() < c.wm, now: c.now, element: true, merging: true}
	panes, err = c.fireOnElement(ent, ctx, panes)
	if err != nil {
		return nil, false, false, err
	}
	return panes, false, false, nil
}

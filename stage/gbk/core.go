package gbk

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
)

// Store is the key-value view of one task's state the core reads and writes:
// in production a state.Task (Pebble with the attempt's pending writes
// overlaid), in tests a MemStore. The core does no other I/O.
type Store interface {
	// Get returns key's value; ok=false if absent.
	Get(key []byte) (value []byte, ok bool, err error)
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan calls fn for every key with prefix, in key order. fn must not
	// keep its arguments nor write to the store.
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// Element is one value to group: the encoded key and value (wire bytes),
// one window of the element, and its event timestamp (mtime.Time, ms).
type Element struct {
	Key       []byte
	Window    Window
	Timestamp mtime.Time
	Value     []byte
}

// Pane is a fired group: every value of Key in Window since the previous
// pane (discarding) or ever (accumulating), in arrival order.
type Pane struct {
	Key       []byte
	Window    Window
	Timestamp mtime.Time
	Info      typex.PaneInfo
	Values    [][]byte
}

// entry is one (key, window) in memory: its meta, mirrored in the store.
// Its values are under valuePrefix(m.SW, key), but for a unit entry's
// first.
type entry struct {
	key []byte
	win Window
	m   meta
	// unit: e's meta is not stored, and its value at sequence Lo is under
	// unitKey(win, key) (layout.go), not valueKey. Only a compacting core
	// makes one (unitsOn); it stays one while its meta, at every save, is
	// unitMeta, and is made an ordinary entry (materialize) at the first
	// save where it is not.
	unit bool
	// ptAt is the processing-time deadline of e queued in the trigger
	// index (trigIndex; 0: none).
	ptAt int64
}

// newEntry is an empty entry of (key, w).
func (c *Core) newEntry(key []byte, w Window) *entry {
	e := &entry{key: append([]byte{}, key...), win: w, m: meta{MinTs: mtime.MaxTimestamp, MaxTs: mtime.MinTimestamp, SW: w}}
	if c.strat.Merging() {
		e.m.Ext, e.m.Seq, e.m.Lo = true, seqMid, seqMid
	}
	return e
}

// windowState indexes the entries of one window.
// sortedWindows returns the windows with state that keep says to keep, in
// firing order (Window.less).
func (c *Core) sortedWindows(keep func(Window) bool) []Window {
	var out []Window
	for w := range c.windows {
		if keep(w) {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].less(out[j]) })
	return out
}

// sortedKeys returns the window's keys in byte order.
func (ws *windowState) sortedKeys() []string {
	keys := make([]string, 0, len(ws.entries))
	for k := range ws.entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type windowState struct {
	entries map[string]*entry // by key
	// hold is the min over entries with pending values of their hold.
	hold mtime.Time
}

// Core groups the values of one task: per (key, window) it buffers values
// in the Store and fires panes as the input watermark passes windows' ends,
// under Beam's default trigger. It is deterministic: the same calls on the
// same store contents give the same panes in the same order, and its
// in-memory index is a function of the store (Load rebuilds it). It does no
// I/O but through Store, starts no goroutine and reads no clock. Not safe
// for concurrent use.
type Core struct {
	strat   Strategy
	st      Store
	wm      mtime.Time
	windows map[Window]*windowState
	// held is the number of entries in windows: the (key, window) panes
	// the task holds (Held), kept as entries are indexed and unindexed so
	// that the live page's count costs O(1), not a walk of every window
	// at every commit (3% of a 128-partition GroupByKey stage's CPU).
	held int64
	// keyWindows indexes entries by key, for merging (sessions only): each
	// key's entries sorted by window (keyWins).
	keyWindows map[string]keyWins
	// compacting: remember in dirty the entries of merging windows that
	// get values (compact.go).
	compacting bool
	dirty      map[*entry]bool
	dropped    int64
	// closedDropped counts values dropped because their window's trigger
	// had finished; now is the processing time (ms) triggers see
	// (SetProcessingTime).
	closedDropped int64
	now           int64
	// holdVisits counts the entries hold recomputations have visited: a
	// cost counter (TestGCClosingWindowLinear).
	holdVisits int64
	// read are the values of the window Advance is firing, read from the
	// store in one scan (readWindow), by key; nil outside Advance. An
	// entry's list is dropped when its values are deleted.
	read    map[string]*storedValues
	readWin Window
	// scans counts the store scans (TestAdvanceScansOncePerWindow).
	scans int64
	// materialized counts the unit entries made ordinary (materialize)
	// whose unit value moved (TestCompactionFiresTheSameSums).
	materialized int64
	// ti indexes the entries an Advance evaluates under a non-default
	// trigger (trigger_index.go); nil under the default trigger.
	ti *trigIndex
	// fired is the watermark through which every due window has fired:
	// wm, unless an Advance from fired to owedTo stopped at the budget
	// (SetFireBudget): the panes it owes (Owes) fire as that Advance would
	// have fired them, before any later watermark is acted on. Both are
	// persisted under keyFired while owing.
	fired, owedTo mtime.Time
	owes          bool
	// budget is SetFireBudget's; firedValues counts the values fired since
	// the last NewAttempt.
	budget, firedValues int
}

// storedValues are one entry's stored values and their store keys, in
// store order.
type storedValues struct{ keys, vals [][]byte }

// NewCore returns a core over st. Call Load before anything else if st may
// hold state.
func NewCore(strat Strategy, st Store) *Core {
	c := &Core{strat: strat, st: st, wm: mtime.MinTimestamp, fired: mtime.MinTimestamp, owedTo: mtime.MinTimestamp, windows: map[Window]*windowState{}, keyWindows: map[string]keyWins{}}
	if strat.Trigger != nil {
		c.ti = newTrigIndex()
	}
	return c
}

// Held is the number of (key, window) panes the core holds state for, in
// the current attempt: O(1).
func (c *Core) Held() int64 { return c.held }

// Load rebuilds the in-memory index from the store: after a restore, and
// after an abort dropped the attempt's writes.
func (c *Core) Load() error {
	c.dirty = nil
	c.wm = mtime.MinTimestamp
	c.windows = map[Window]*windowState{}
	c.held = 0
	c.keyWindows = map[string]keyWins{}
	if c.ti != nil {
		c.ti = newTrigIndex()
	}
	v, ok, err := c.st.Get([]byte(keyWM))
	if err != nil {
		return err
	}
	if ok {
		if len(v) != 8 {
			return fmt.Errorf("%w: watermark record of %d bytes", ErrMalformed, len(v))
		}
		c.wm = mtime.Time(binary.BigEndian.Uint64(v))
	}
	c.fired, c.owedTo, c.owes = c.wm, c.wm, false
	if v, ok, err = c.st.Get([]byte(keyFired)); err != nil {
		return err
	} else if ok {
		if len(v) != 16 {
			return fmt.Errorf("%w: owed-panes record of %d bytes", ErrMalformed, len(v))
		}
		c.fired, c.owedTo, c.owes = mtime.Time(binary.BigEndian.Uint64(v)), mtime.Time(binary.BigEndian.Uint64(v[8:])), true
	}
	c.firedValues = 0
	load := func(e *entry) {
		c.index(e)
		if c.ti != nil {
			c.ti.hot[e] = true // evaluated at the next Advance (trigIndex)
		}
	}
	if err := c.st.Scan([]byte{prefixMeta}, func(k, v []byte) error {
		w, err := parseWindow(k[1:])
		if err != nil {
			return err
		}
		m, err := decodeMeta(v)
		if err != nil {
			return err
		}
		if !m.Ext {
			m.SW = w
		}
		load(&entry{key: append([]byte{}, k[1+windowKeyLen:]...), win: w, m: m})
		return nil
	}); err != nil {
		return err
	}
	return c.st.Scan([]byte{prefixUnit}, func(k, _ []byte) error {
		w, err := parseWindow(k[1:])
		if err != nil {
			return err
		}
		key := k[1+windowKeyLen:]
		if c.lookup(w, key) != nil {
			return fmt.Errorf("%w: key %x in window %v has both a meta record and a unit value", ErrMalformed, key, w)
		}
		load(&entry{key: append([]byte{}, key...), win: w, m: unitMeta(w), unit: true})
		return nil
	})
}

// SetFireBudget bounds the values the default trigger's Advance fires
// between two NewAttempt calls to n (n <= 0: no bound): once the panes it
// fired hold n values or more, Advance stops at the next (key, window) and
// owes the rest (Owes), which fire at the following Advance calls, in the
// same order and with the same timing as if they had fired at once (the
// watermark before the stopped Advance decides it). Until then Hold keeps
// the output watermark at the owed windows. A pane is never cut: one with
// more than n values fires whole. Stage loops commit between attempts, so
// an attempt's state writes and output stay bounded when the watermark
// passes millions of values at once (the end of a bounded input). A
// non-default trigger (Strategy.Trigger) is not bounded.
func (c *Core) SetFireBudget(n int) { c.budget = n }

// NewAttempt starts a new fire budget (SetFireBudget) and forgets the
// entries Compactable would return: the step's next attempt.
func (c *Core) NewAttempt() { c.firedValues, c.dirty = 0, nil }

// Owes says an Advance stopped at the fire budget with panes still due.
func (c *Core) Owes() bool { return c.owes }

// NextDue is the least input watermark at which Advance fires a pane
// under the default trigger:
//
//	due = min over windows w with pending values of w.MaxTimestamp() + 1
//
// (Advance fires w once wm > w.MaxTimestamp()). ok is false when no window
// holds pending values, or under a non-default trigger (Strategy.Trigger),
// whose firings the watermark alone does not decide. A core that owes
// panes (Owes) has them due now whatever the watermark: the stage loop
// asks Owes first.
//
// Under ClosingAlways a window with state and no pending value is due at
// its expiry + 1 too (its empty final pane).
func (c *Core) NextDue() (due mtime.Time, ok bool) {
	if c.strat.Trigger != nil {
		return 0, false
	}
	due = mtime.MaxTimestamp
	for w, ws := range c.windows {
		end := w.MaxTimestamp()
		if ws.hold == mtime.MaxTimestamp {
			if !c.strat.ClosingAlways {
				continue // no pending values: nothing to fire
			}
			end = c.strat.expiry(w)
		}
		if end < due {
			due, ok = end, true
		}
	}
	if !ok {
		return 0, false
	}
	return due + 1, true
}

// Watermark is the input watermark of the last Advance (mtime.MinTimestamp
// before the first).
func (c *Core) Watermark() mtime.Time { return c.wm }

// Dropped counts the values dropped as expired since the core was created.
func (c *Core) Dropped() int64 { return c.dropped }

// Hold is the earliest timestamp a pane fired later may have, given the
// values buffered now, or mtime.MaxTimestamp if none is pending:
//
//	hold = min over (key, window) with pending values of
//	       window.MaxTimestamp()   (EndOfWindow)
//	       min timestamp of its pending values (EarliestInPane, LatestInPane)
//
// (for LatestInPane the earliest value is a lower bound of the pane's
// timestamp that, unlike the latest, only moves down as values arrive: the
// hold stays a function of the store, whatever the order of arrivals).
// The task's output watermark is max(previous, min(input watermark, hold)).
// With EarliestInPane a value added later may lower a pane below an earlier
// hold, but never below the input watermark it arrived under, and so never
// below the output watermark.
//
// While an Advance owes panes (SetFireBudget) under ClosingAlways, a
// window also holds at its expiry, Beam Java's garbage-collection hold
// (WatermarkHold.addGarbageCollectionHold under
// ClosingBehavior.FIRE_ALWAYS): an owed empty final pane, stamped with
// the window's end, then reaches a downstream step with the same allowed
// lateness before its watermark passes the window's expiry. Otherwise a
// window still held is not expired (expiry ≥ input watermark), and that
// hold could not lower the output watermark.
func (c *Core) Hold() mtime.Time {
	h := mtime.MaxTimestamp
	gcHold := c.owes && c.strat.ClosingAlways
	for w, ws := range c.windows {
		h = min(h, ws.hold)
		if gcHold {
			h = min(h, c.strat.expiry(w))
		}
	}
	return h
}

// entryHold is one (key, window)'s contribution to Hold.
func (c *Core) entryHold(e *entry) mtime.Time {
	if e.m.Pending == 0 {
		return mtime.MaxTimestamp
	}
	if c.strat.Combiner == EndOfWindow {
		return e.win.MaxTimestamp()
	}
	return e.m.MinTs
}

func (c *Core) index(e *entry) {
	ws := c.windows[e.win]
	if ws == nil {
		ws = &windowState{entries: map[string]*entry{}, hold: mtime.MaxTimestamp}
		c.windows[e.win] = ws
		if c.ti != nil {
			c.ti.addWindow(e.win, c.wm, c.strat)
		}
	}
	if _, ok := ws.entries[string(e.key)]; !ok {
		c.held++
	}
	ws.entries[string(e.key)] = e
	ws.hold = min(ws.hold, c.entryHold(e))
	if c.strat.Merging() {
		c.keyWindows[string(e.key)] = c.keyWindows[string(e.key)].insert(e)
	}
}

// unindex removes e from the index. The window's hold is recomputed only
// when e may have been its minimum:
//
//	recompute ⇔ entryHold(e) ≠ MaxTimestamp ∧ entryHold(e) ≤ ws.hold
//
// otherwise another entry holds ws.hold and stays, and ws.hold is
// unchanged. Garbage collection removes every entry of a closing window
// after firing it (entryHold = MaxTimestamp), which so costs O(1) an entry,
// not O(entries of the window): a recomputation per entry made Advance
// quadratic in the keys of a window (40% of the GroupByKey benchmark's CPU
// at 7 500 keys a window and task).
func (c *Core) unindex(e *entry) {
	if c.ti != nil {
		delete(c.ti.hot, e)
	}
	if ws := c.windows[e.win]; ws != nil {
		if _, ok := ws.entries[string(e.key)]; ok {
			c.held--
			delete(ws.entries, string(e.key))
		}
		if len(ws.entries) == 0 {
			delete(c.windows, e.win)
		} else if h := c.entryHold(e); h != mtime.MaxTimestamp && h <= ws.hold {
			c.recomputeHold(ws)
		}
	}
	if kw, ok := c.keyWindows[string(e.key)]; ok {
		if kw = kw.remove(e.win); len(kw) == 0 {
			delete(c.keyWindows, string(e.key))
		} else {
			c.keyWindows[string(e.key)] = kw
		}
	}
}

func (c *Core) recomputeHold(ws *windowState) {
	ws.hold = mtime.MaxTimestamp
	c.holdVisits += int64(len(ws.entries))
	for _, e := range ws.entries {
		ws.hold = min(ws.hold, c.entryHold(e))
	}
}

// save stores e's meta; a unit entry's only once it is no longer
// unitMeta (materialize).
func (c *Core) save(e *entry) error {
	if e.unit {
		if e.m.isUnit(e.win) {
			return nil
		}
		if err := c.materialize(e); err != nil {
			return err
		}
	}
	return c.st.Set(metaKey(e.win, e.key), e.m.encode())
}

// Add buffers one value. It returns dropped=true, storing nothing, if the
// value's window has expired:
//
//	drop ⇔ window.MaxTimestamp() + allowedLateness < input watermark
//
// (Beam's LateDataDroppingDoFnRunner; the watermark is that of the last
// Advance). For session windows the element's window is its proto-session
// [ts, ts+gap); it merges with every window of the same key it overlaps,
// transitively (Beam's MergeOverlappingIntervalWindows), and the merged
// window holds the values of the merged windows, ordered by window (less),
// then arrival, then the value added.
//
// Cost of a merge: the merged entry is the one with the most values (the
// first in window order on a tie), which keeps its values where they are
// (its storage window, meta.SW) and takes the merged window; only the
// other entries' values move (prepended or appended to keep the order).
// An in-order value extending a session of n values writes one value, not
// n (TestSessionAppendMovesNoValues).
func (c *Core) Add(e Element) (dropped bool, err error) {
	if c.strat.expiry(e.Window) < c.wm {
		c.dropped++
		return true, nil
	}
	win := e.Window
	var ent *entry
	isNew := false
	if c.strat.Merging() {
		var merged []*entry
		win, merged = c.mergeCandidates(e.Key, e.Window)
		if ent, isNew, err = c.merge(e.Key, win, merged); err != nil {
			return false, err
		}
	} else if ent = c.lookup(win, e.Key); ent == nil {
		ent, isNew = c.newEntry(e.Key, win), true
	}
	return false, c.put(ent, isNew, e)
}

// put stores e's value as the next value of ent (indexed unless isNew),
// indexes ent if isNew, and saves its meta, unless ReplaceValues will
// (compactedLater).
func (c *Core) put(ent *entry, isNew bool, e Element) error {
	key := valueKey(ent.m.SW, ent.key, ent.m.Seq)
	if isNew && c.unitsOn() {
		key, ent.unit = unitKey(ent.win, ent.key), true
	}
	if err := c.st.Set(key, e.Value); err != nil {
		return err
	}
	c.markDirty(ent)
	ent.m.Seq++
	ent.m.Pending++
	ent.m.Total++
	if c.strat.Combiner != EndOfWindow {
		// Read by the in-pane combiners only (paneTimestamp,
		// entryHold): under EndOfWindow a compacted entry's meta stays
		// the same from attempt to attempt, and is not written again.
		ent.m.MinTs = min(ent.m.MinTs, e.Timestamp)
		ent.m.MaxTs = max(ent.m.MaxTs, e.Timestamp)
	}
	if isNew {
		c.index(ent)
	} else {
		// O(1): an entry's hold only moves down as values arrive.
		ws := c.windows[ent.win]
		ws.hold = min(ws.hold, c.entryHold(ent))
	}
	if c.compactedLater(ent, isNew) {
		return nil
	}
	return c.save(ent)
}

func (c *Core) lookup(w Window, key []byte) *entry {
	if ws := c.windows[w]; ws != nil {
		return ws.entries[string(key)]
	}
	return nil
}

// readWindow reads every value stored under window w in one scan into
// c.read, when every entry of w stores its values under w itself (not a
// merging window fn, whose entries keep a storage window of their own:
// meta.SW): firing a window of n keys then costs one store iterator, not
// n (a Pebble iterator and its seek per entry were a fifth of the
// GroupByKey benchmark's CPU). Otherwise c.read is nil.
func (c *Core) readWindow(w Window) error {
	c.read = nil
	if c.strat.Merging() {
		return nil
	}
	read := map[string]*storedValues{}
	// Which of the two prefixes hold values of w: unit values, and the
	// others (a unit entry's past Lo, added since the last compaction).
	units, others := false, false
	if ws := c.windows[w]; ws != nil {
		for _, e := range ws.entries {
			units = units || e.unit
			others = others || !e.unit || e.m.Seq > e.m.Lo+1
		}
	}
	if units {
		// A unit entry's value first: it is the one at sequence Lo.
		unit := append([]byte{prefixUnit}, appendWindow(nil, w)...)
		c.scans++
		if err := c.st.Scan(unit, func(k, v []byte) error {
			read[string(k[len(unit):])] = &storedValues{keys: [][]byte{append([]byte{}, k...)}, vals: [][]byte{append([]byte{}, v...)}}
			return nil
		}); err != nil {
			return err
		}
	}
	if !others {
		c.read, c.readWin = read, w
		return nil
	}
	prefix := append([]byte{prefixValue}, appendWindow(nil, w)...)
	c.scans++
	err := c.st.Scan(prefix, func(k, v []byte) error {
		rest := k[len(prefix):]
		n, m := binary.Uvarint(rest)
		if m <= 0 || uint64(len(rest)-m) < n+8 {
			return fmt.Errorf("%w: value key %x", ErrMalformed, k)
		}
		key := string(rest[m : m+int(n)])
		sv := read[key]
		if sv == nil {
			sv = &storedValues{}
			read[key] = sv
		}
		sv.keys = append(sv.keys, append([]byte{}, k...))
		sv.vals = append(sv.vals, append([]byte{}, v...))
		return nil
	})
	if err != nil {
		return err
	}
	c.read, c.readWin = read, w
	return nil
}

// scanValues calls fn with each stored value of e and its store key, in
// order: from c.read when Advance read e's window ahead (an entry with no
// values there has none), else from the store. fn must not keep k or v.
func (c *Core) scanValues(e *entry, fn func(k, v []byte) error) error {
	if c.read != nil && e.win == c.readWin && e.m.SW == e.win {
		if sv := c.read[string(e.key)]; sv != nil {
			for i := range sv.keys {
				if err := fn(sv.keys[i], sv.vals[i]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if e.unit {
		k := unitKey(e.win, e.key)
		v, ok, err := c.st.Get(k)
		if err != nil {
			return err
		}
		if ok {
			if err := fn(k, v); err != nil {
				return err
			}
		}
	}
	c.scans++
	return c.st.Scan(valuePrefix(e.m.SW, e.key), fn)
}

// valuesDeleted says e's stored values were deleted: c.read must not
// give them again.
func (c *Core) valuesDeleted(e *entry) {
	if c.read != nil {
		delete(c.read, string(e.key))
	}
}

// values returns e's stored values and their keys, in order.
func (c *Core) values(e *entry) (keys, vals [][]byte, err error) {
	err = c.scanValues(e, func(k, v []byte) error {
		keys = append(keys, append([]byte{}, k...))
		vals = append(vals, append([]byte{}, v...))
		return nil
	})
	return keys, vals, err
}

// Advance moves the input watermark to wm (a lower wm is ignored: watermarks
// never decrease) and returns the panes that fire, in firing order: by
// window max timestamp, then window start, then key bytes.
//
// Firing (Beam's default trigger, Repeatedly(AfterWatermark.pastEndOfWindow())):
//
//	fire(key, w) ⇔ pending(key, w) > 0 ∧ w.MaxTimestamp() < wm
//
// (a timer at MaxTimestamp fires once the watermark is past it, as Prism's
// "watermark <= window.MaxTimestamp() → skip" and Java's timers). A pane is
//
//	ON_TIME ⇔ prev ≤ w.MaxTimestamp() < wm ∧ no earlier non-speculative pane
//	LATE    otherwise (its values arrived behind the watermark)
//	last    ⇔ w.MaxTimestamp() + allowedLateness < wm (the window closes now)
//
// where prev is the previous Advance's watermark (with a fire budget, an
// Advance that stopped at it is finished first, as if it had not:
// SetFireBudget); Index counts earlier
// panes, OnTimeIndex (NonSpeculativeIndex) earlier non-speculative ones.
// The pane's timestamp is the window's max timestamp (EndOfWindow), or the
// earliest or latest timestamp of the values added since the previous
// pane (paneTimestamp).
//
// Under ClosingBehavior EMIT_ALWAYS (Strategy.ClosingAlways; Beam Java
// ReduceFnRunner.needToEmit) a (key, w) also fires at its last firing
// with no pending value: an empty final pane (discarding), or its values
// so far (accumulating), timestamped with the window's max timestamp.
// OnTimeBehavior FIRE_ALWAYS changes nothing here: under the default
// trigger no value of a window fires before its end, so the on-time
// pane of a (key, w), which has state, is never empty.
//
// Garbage collection: once w.MaxTimestamp() + allowedLateness < wm, every
// (key, w) is deleted after firing.
//
// With a non-default trigger (Strategy.Trigger) see advanceTriggered.
func (c *Core) Advance(wm mtime.Time) ([]Pane, error) {
	prev := c.wm
	if wm < prev {
		wm = prev
	}
	if c.strat.Trigger != nil {
		panes, err := c.advanceTriggered(prev, wm)
		if err != nil {
			return nil, err
		}
		c.fired, c.owedTo, c.owes = wm, wm, false // never owes: not bounded
		return panes, c.setWatermark(prev, wm)
	}
	wasOwing := c.Owes()
	var panes []Pane
	// At most two rounds: the Advance that stopped at the budget, if one
	// did, finished with its own watermarks, then this one's.
	for {
		from, to := c.fired, wm
		if c.Owes() {
			to = c.owedTo
		}
		ps, stopped, err := c.fireDue(from, to)
		panes = append(panes, ps...)
		if err != nil {
			return nil, err
		}
		c.owes = stopped
		if stopped {
			c.fired, c.owedTo = from, to
			break
		}
		c.fired, c.owedTo = to, to
		if to == wm {
			break
		}
	}
	if err := c.setWatermark(prev, wm); err != nil {
		return nil, err
	}
	switch {
	case c.Owes():
		return panes, c.st.Set([]byte(keyFired), binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(c.fired)), uint64(c.owedTo)))
	case wasOwing:
		return panes, c.st.Delete([]byte(keyFired))
	}
	return panes, nil
}

// fireDue is one Advance from watermark prev to wm under the default
// trigger: it fires and collects the windows due at wm, in order, and
// stops (stopped) at the first pane past the fire budget.
func (c *Core) fireDue(prev, wm mtime.Time) (panes []Pane, stopped bool, err error) {
	due := c.sortedWindows(func(w Window) bool { return w.MaxTimestamp() < wm })
	defer func() { c.read = nil }()
	for _, w := range due {
		ws := c.windows[w]
		keys := ws.sortedKeys()
		if err := c.readWindow(w); err != nil {
			return panes, false, err
		}
		closing := c.strat.expiry(w) < wm
		for _, k := range keys {
			e := ws.entries[k]
			// An empty final pane under ClosingAlways (EMIT_ALWAYS) is
			// a pane like any other: within the budget, owed past it.
			fired := e.m.Pending > 0 || closing && c.strat.ClosingAlways
			if fired && c.budget > 0 && c.firedValues >= c.budget {
				stopped = true
				break
			}
			if fired {
				p, err := c.fire(e, prev, closing)
				if err != nil {
					return panes, false, err
				}
				panes = append(panes, p)
				c.firedValues += len(p.Values)
			}
			if closing {
				if err := c.gc(e); err != nil {
					return panes, false, err
				}
			} else if fired {
				if err := c.save(e); err != nil {
					return panes, false, err
				}
			}
		}
		if ws := c.windows[w]; ws != nil {
			c.recomputeHold(ws)
		}
		if stopped {
			break
		}
	}
	return panes, stopped, nil
}

func (c *Core) setWatermark(prev, wm mtime.Time) error {
	if wm != prev {
		c.wm = wm
		return c.st.Set([]byte(keyWM), binary.BigEndian.AppendUint64(nil, uint64(wm)))
	}
	return nil
}

// fire builds the pane of e and updates e's meta (not yet saved).
func (c *Core) fire(e *entry, prev mtime.Time, closing bool) (Pane, error) {
	return c.fireTiming(e, prev, closing, typex.PaneUnknown)
}

// fireTiming is fire with the pane's timing decided by the caller (a
// triggered pane), or by the default trigger's rule (typex.PaneUnknown).
func (c *Core) fireTiming(e *entry, prev mtime.Time, closing bool, timing typex.PaneTiming) (Pane, error) {
	p := Pane{Key: e.key, Window: e.win}
	var del [][]byte
	if err := c.scanValues(e, func(k, v []byte) error {
		p.Values = append(p.Values, append([]byte{}, v...))
		if !c.strat.Accumulating {
			del = append(del, append([]byte{}, k...))
		}
		return nil
	}); err != nil {
		return Pane{}, err
	}
	for _, k := range del {
		if err := c.st.Delete(k); err != nil {
			return Pane{}, err
		}
	}
	if len(del) > 0 {
		c.valuesDeleted(e)
	}
	maxTs := e.win.MaxTimestamp()
	p.Timestamp = c.paneTimestamp(e)
	onTime := prev <= maxTs && e.m.NonSpec == 0
	p.Info = typex.PaneInfo{IsFirst: e.m.Fired == 0, IsLast: closing, Index: e.m.Fired, NonSpeculativeIndex: e.m.NonSpec, Timing: typex.PaneLate}
	if onTime {
		p.Info.Timing = typex.PaneOnTime
	}
	if timing != typex.PaneUnknown {
		p.Info.Timing = timing
	}
	if p.Info.Timing == typex.PaneEarly {
		p.Info.NonSpeculativeIndex = -1
	} else {
		e.m.NonSpec++
	}
	e.m.Fired++
	e.m.Pending = 0
	// The timestamp bounds restart at every pane, accumulating too
	// (paneTimestamp).
	e.m.MinTs, e.m.MaxTs = mtime.MaxTimestamp, mtime.MinTimestamp
	if !c.strat.Accumulating {
		e.m.Total = 0
	}
	return p, nil
}

// paneTimestamp is the timestamp of the pane e fires now:
//
//	EndOfWindow      window.MaxTimestamp()
//	EarliestInPane   min timestamp of the values added since the last pane
//	LatestInPane     max timestamp of the values added since the last pane
//	no value added since the last pane: window.MaxTimestamp()
//
// in either accumulation mode: an accumulating pane carries every value
// so far, but its timestamp combines only the new ones. This is Beam
// Java's model: WatermarkHold.addHolds adds each element's timestamp to
// the window's hold, WatermarkHold.extractAndRelease reads the hold at a
// firing and clears it, and ReduceFnRunner.onTrigger stamps the pane with
// what it read, the end of the window when no hold was set. Prism
// (runners/prism/internal/handlerunner.go, gbkBytes) instead combines the
// timestamps of every element the pane's bundle carries, which in
// accumulating mode are all of the window's values so far; its job
// service admits EARLIEST_IN_PANE and LATEST_IN_PANE only "to unblock
// running python tasks" and says tests using them will fail
// (jobservices/management.go), so it does not define the rule and Java's
// is followed. Combining all values would also break the hold: once a
// pane released it and the output watermark moved on, the next pane's
// timestamp could fall behind that watermark (accumulating.txt).
//
// Not followed from Java: a value that arrived behind the output
// watermark or after the end of its window sets no element hold there
// (its pane is stamped with the end of the window instead); here its
// timestamp counts (Core.Hold).
func (c *Core) paneTimestamp(e *entry) mtime.Time {
	if c.strat.Combiner == EndOfWindow || e.m.MinTs > e.m.MaxTs {
		return e.win.MaxTimestamp()
	}
	if c.strat.Combiner == EarliestInPane {
		return e.m.MinTs
	}
	return e.m.MaxTs
}

// gc deletes e's values and meta.
func (c *Core) gc(e *entry) error {
	if e.m.Total > 0 {
		if err := c.deleteValues(e); err != nil {
			return err
		}
	}
	c.unindex(e)
	if e.unit {
		return nil // no meta stored
	}
	return c.st.Delete(metaKey(e.win, e.key))
}

// deleteValues deletes every stored value of e (its value prefix); e's
// meta is the caller's.
func (c *Core) deleteValues(e *entry) error {
	var del [][]byte
	if err := c.scanValues(e, func(k, _ []byte) error {
		del = append(del, append([]byte{}, k...))
		return nil
	}); err != nil {
		return err
	}
	for _, k := range del {
		if err := c.st.Delete(k); err != nil {
			return err
		}
	}
	c.valuesDeleted(e)
	return nil
}

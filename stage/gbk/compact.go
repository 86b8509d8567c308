package gbk

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
)

// Compaction is Beam's combining state, done by the runner with the SDK's
// help: a lifted combine's GroupByKey buffers accumulators. Under session
// windows every value arrives in its own proto-session, so the precombine
// before the shuffle cannot combine anything and a session holds one
// accumulator per element until it fires (the main job over 10 M
// synthetic events: one pane of millions of values); under any window fn
// the precombine combines within one upstream bundle only, so a window
// open for 10 s holds one accumulator per key for every upstream commit
// (issue 24's steady run: 20 per key, all read, fired and deleted, 20 000
// changelog tombstones, in the window's firing transaction). A core with
// compaction on (SetCompacting) remembers the entries that got values in
// the attempt; at the attempt's end the head hands those holding more
// than one value to its HeadConfig.Compact (the combine's
// MergeAccumulators, run by the SDK) and stores the one accumulator it
// returns in their place (ReplaceValues): Kafka Streams' aggregate,
// updated in place. The CombineFn's contract (MergeAccumulators
// associative and commutative) makes the fired pane's merged accumulator
// the same (Beam's CombineFn.mergeAccumulators; Java runners' combining
// state merges accumulators the same way).

// SetCompacting turns on remembering the entries that get a value from
// now on (Compactable). Off by default. With it on, an attempt's writes
// to the store are whole only once Compactable has been called and each
// entry it returned replaced (ReplaceValues): until then the meta of an
// entry that already held values is not written (compactedLater), and a
// store reloaded from those writes would miss values. A stage loop
// compacts in Prepare, before the writes reach the changelog, and an
// aborted attempt's writes are dropped.
func (c *Core) SetCompacting(on bool) {
	c.compacting = on
	c.dirty = nil
}

// markDirty remembers e for Compactable.
func (c *Core) markDirty(e *entry) {
	if !c.compacting {
		return
	}
	if c.dirty == nil {
		c.dirty = map[*entry]bool{}
	}
	c.dirty[e] = true
}

// Compactable returns one Pane (Key, Window and Values set; Timestamp and
// Info not) for every live entry that got a value since the last
// NewAttempt (or Load) and holds more than one value, in window order then
// key order, and forgets them. Empty unless compaction is on.
func (c *Core) Compactable() ([]Pane, error) {
	var es []*entry
	for e := range c.dirty {
		if c.lookup(e.win, e.key) == e && e.m.Total > 1 {
			es = append(es, e)
		}
	}
	c.dirty = nil
	sort.Slice(es, func(i, j int) bool {
		if es[i].win != es[j].win {
			return es[i].win.less(es[j].win)
		}
		return bytes.Compare(es[i].key, es[j].key) < 0
	})
	out := make([]Pane, 0, len(es))
	for _, e := range es {
		_, vals, err := c.values(e)
		if err != nil {
			return nil, err
		}
		out = append(out, Pane{Key: e.key, Window: e.win, Values: vals})
	}
	return out, nil
}

// ReplaceValues replaces every stored value of the live entry (key, w)
// with the one value v (the merge of them), keeping its meta but the
// counts: Total becomes 1, Pending 1 if it was positive. Under merging
// windows the value goes after the deleted ones' positions (a later merge
// may still prepend values below it); otherwise at the first one's, which
// it overwrites. An error if (key, w) has no live entry.
func (c *Core) ReplaceValues(key []byte, w Window, v []byte) error {
	e := c.lookup(w, key)
	if e == nil {
		return fmt.Errorf("gbk: compaction: no live entry for key %x in window %v", key, w)
	}
	if err := c.deleteValues(e); err != nil {
		return err
	}
	at := e.m.Seq
	if !c.strat.Merging() {
		// Values only append here, from Lo = 0 (not stored: layout.go):
		// the merged value takes the first one's key, so the changelog
		// gets one put per (key, window) and attempt, and no tombstone
		// for the value merged into it the attempt before.
		at = e.m.Lo
	}
	vk := valueKey(e.m.SW, e.key, at)
	if e.unit {
		vk = unitKey(e.win, e.key) // the value at Lo (layout.go)
	}
	if err := c.st.Set(vk, v); err != nil {
		return err
	}
	e.m.Lo, e.m.Seq = at, at+1
	e.m.Total = 1
	if e.m.Pending > 0 {
		e.m.Pending = 1
	}
	return c.saveChanged(e)
}

// compactedLater says put need not save ent's meta: compaction is on
// (with the default trigger, windows that do not merge) and ent held a
// value before this one, so it is dirty with more than one value and
// Compactable returns it at the attempt's end, whose ReplaceValues saves
// the meta then, if it changed (saveChanged). Whatever fires or moves
// ent before then saves its meta itself. In a windowed sum's steady
// state the meta after an attempt is the one before it (one value,
// pending, under EndOfWindow): the changelog gets the merged value alone,
// where it got the value and the meta, two records per (key, window) and
// attempt.
func (c *Core) compactedLater(ent *entry, isNew bool) bool {
	return c.compacting && !isNew && ent.m.Total > 1 && !c.strat.Merging() && c.strat.Trigger == nil
}

// unitsOn says a new entry is made a unit entry (entry.unit): compaction
// is on, with the default trigger and its end-of-window timestamps
// (the meta of an entry's one pending value is then unitMeta whatever
// the value's timestamp), windows that do not merge. At every attempt's
// end such an entry holds one accumulator (ReplaceValues) and, until its
// window fires, the same meta: a windowed sum's (key, window) then costs
// the changelog one put per commit and one tombstone, where the value
// and its meta cost two of each (issue 24: 3.05 changelog records per
// (key, window) at 3 M records, against Kafka Streams' 2.2 across its
// aggregate and suppress changelogs).
func (c *Core) unitsOn() bool {
	return c.compacting && !c.strat.Merging() && c.strat.Trigger == nil && c.strat.Combiner == EndOfWindow
}

// materialize makes unit entry e an ordinary one, its meta to be stored
// by the caller: its unit value, if still stored, moves to its value key
// at Lo (in c.read too, if Advance read e's window ahead).
func (c *Core) materialize(e *entry) error {
	uk := unitKey(e.win, e.key)
	e.unit = false
	v, ok, err := c.st.Get(uk)
	if err != nil || !ok {
		return err
	}
	vk := valueKey(e.m.SW, e.key, e.m.Lo)
	if err := c.st.Delete(uk); err != nil {
		return err
	}
	if err := c.st.Set(vk, v); err != nil {
		return err
	}
	c.materialized++
	if c.read != nil && e.win == c.readWin {
		if sv := c.read[string(e.key)]; sv != nil && len(sv.keys) > 0 && bytes.Equal(sv.keys[0], uk) {
			sv.keys[0] = vk
		}
	}
	return nil
}

// saveChanged saves e's meta unless the store holds it already, byte
// for byte.
func (c *Core) saveChanged(e *entry) error {
	if e.unit {
		// Never stored: save stores it, unless it is still unitMeta.
		return c.save(e)
	}
	enc := e.m.encode()
	key := metaKey(e.win, e.key)
	old, ok, err := c.st.Get(key)
	if err != nil {
		return err
	}
	if ok && bytes.Equal(old, enc) {
		return nil
	}
	return c.st.Set(key, enc)
}

// ErrMergeFailed: the combine's MergeAccumulators (HeadConfig.Compact)
// failed on a window. Not set aside under either --error_policy: a
// merge spans every value the window holds, from many input records, so
// there is no one record to write to the dead-letter topic; the attempt
// fails, and after its attempts the stage, with this error naming the
// stage, the key and the window.
var ErrMergeFailed = errors.New("gbk: MergeAccumulators failed")

// compactNamed runs compact (HeadConfig.Compact) over panes. If it fails,
// the window it fails on is searched by halving (at most about
// 2·log2(len(panes)) more calls, on the failure path only: the CombineFn's
// MergeAccumulators has no effect but its result) and the error, wrapping
// ErrMergeFailed and compact's, names stage, that window's key (hex) and
// window; if no half fails alone, it names the first and last of panes.
func compactNamed(compact func([]Pane) ([][]byte, error), stage string, panes []Pane) ([][]byte, error) {
	merged, err := compact(panes)
	if err == nil {
		return merged, nil
	}
	at, cause := panes, err
	for len(at) > 1 {
		half := len(at) / 2
		if _, e := compact(at[:half]); e != nil {
			at, cause = at[:half], e
		} else if _, e := compact(at[half:]); e != nil {
			at, cause = at[half:], e
		} else {
			break
		}
	}
	if len(at) == 1 {
		return nil, fmt.Errorf("%w: stage %s: key %x, window %v (one of %d windows merged in the attempt): %w", ErrMergeFailed, stage, at[0].Key, at[0].Window, len(panes), cause)
	}
	return nil, fmt.Errorf("%w: stage %s: %d windows, from key %x window %v to key %x window %v (no one of them fails alone): %w", ErrMergeFailed, stage, len(at), at[0].Key, at[0].Window, at[len(at)-1].Key, at[len(at)-1].Window, cause)
}

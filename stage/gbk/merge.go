package gbk

import (
	"slices"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// This file is the merging of a key's windows (session windows): the
// windows an Add overlaps, and one entry made of them.

// mergeCandidates returns the window w grows into by merging with the
// live windows of key that overlap it, transitively, and those windows in
// window order (Window.less).
//
// A key's live windows are pairwise disjoint (every Add merges what
// overlaps), so sorted by start they are sorted by end too, and the
// windows overlapping w are one run of them: those before the first that
// starts at or after w's end, back to the last that ends after w's start.
// Their span overlaps no other (a window left of the run ends at or
// before the run's first start, one right of it starts at or after w's
// end or the run's last end), but the neighbours are checked against the
// span anyway until none overlaps, as the transitive rule says. O(log n +
// merged) for n windows of the key; it was a scan of all of them with a
// map per call (13% of the main job's CPU, its Sessions stage's 60 000
// values).
func (c *Core) mergeCandidates(key []byte, w Window) (Window, []*entry) {
	kw := c.keyWindows[string(key)]
	if len(kw) == 0 {
		return w, nil
	}
	hi := sort.Search(len(kw), func(i int) bool { return kw[i].win.Start >= w.End })
	lo := hi
	for lo > 0 && (kw[lo-1].win == w || kw[lo-1].win.intersects(w)) {
		lo--
	}
	// A window equal to w at hi (an empty window starts at its end).
	for hi < len(kw) && kw[hi].win == w {
		hi++
	}
	if lo == hi {
		return w, nil
	}
	for i := lo; i < hi; i++ {
		w = w.span(kw[i].win)
	}
	for {
		switch {
		case lo > 0 && kw[lo-1].win.intersects(w):
			lo--
			w = w.span(kw[lo].win)
		case hi < len(kw) && kw[hi].win.intersects(w):
			w = w.span(kw[hi].win)
			hi++
		default:
			out := append([]*entry(nil), kw[lo:hi]...)
			sort.Slice(out, func(i, j int) bool { return out[i].win.less(out[j].win) })
			return w, out
		}
	}
}

// keyWins is one key's live entries of a merging strategy, sorted by
// window start, then end (disjoint windows: by end too). Lookups are
// binary searches; insert and remove move the tail (a key has few live
// sessions at once).
type keyWins []*entry

// find returns the index of window w in kw, or where it would go.
func (kw keyWins) find(w Window) (int, bool) {
	i := sort.Search(len(kw), func(i int) bool {
		x := kw[i].win
		return x.Start > w.Start || (x.Start == w.Start && x.End >= w.End)
	})
	return i, i < len(kw) && kw[i].win == w
}

// insert returns kw with e in its place (replacing the entry of e's
// window, if there is one).
func (kw keyWins) insert(e *entry) keyWins {
	i, ok := kw.find(e.win)
	if ok {
		kw[i] = e
		return kw
	}
	return slices.Insert(kw, i, e)
}

// remove returns kw without the entry of window w.
func (kw keyWins) remove(w Window) keyWins {
	if i, ok := kw.find(w); ok {
		return slices.Delete(kw, i, i+1)
	}
	return kw
}

// merge returns the entry of (key, win), win the window merged from the
// entries merged (in window order, as mergeCandidates returns them; none:
// a new entry, isNew=true, not yet indexed). The survivor is the entry of
// merged with the most values (Total; the first on a tie): it keeps its
// values and storage window, the others' values move into it, before its
// own (prepended) for windows ordered before it, after them otherwise.
// If the survivor's window grows, it is unindexed (isNew=true), its old
// meta deleted, and its meta is that of a new entry of win that absorbed
// every merged entry: the trigger state starts afresh, as a new window's.
func (c *Core) merge(key []byte, win Window, merged []*entry) (ent *entry, isNew bool, err error) {
	if len(merged) == 0 {
		return c.newEntry(key, win), true, nil
	}
	si := 0
	for i, o := range merged {
		if o.m.Total > merged[si].m.Total {
			si = i
		}
	}
	s := merged[si]
	if s.win != win {
		c.unindex(s)
		if err := c.st.Delete(metaKey(s.win, s.key)); err != nil {
			return nil, false, err
		}
		old := s.m
		s.win = win
		s.m = meta{MinTs: mtime.MaxTimestamp, MaxTs: mtime.MinTimestamp, Ext: true, SW: old.SW, Lo: old.Lo, Seq: old.Seq}
		s.m.absorbCounts(&old)
		isNew = true
	}
	// The values of the entries before s, read first: their number decides
	// where s's first value moves.
	var keys, vals [][]byte
	for _, o := range merged[:si] {
		k, v, err := c.values(o)
		if err != nil {
			return nil, false, err
		}
		keys, vals = append(keys, k...), append(vals, v...)
	}
	if s.m.Lo < uint64(len(vals)) {
		if err := c.rebase(s); err != nil {
			return nil, false, err
		}
	}
	s.m.Lo -= uint64(len(vals))
	for i, v := range vals {
		if err := c.st.Set(valueKey(s.m.SW, s.key, s.m.Lo+uint64(i)), v); err != nil {
			return nil, false, err
		}
		if err := c.st.Delete(keys[i]); err != nil {
			return nil, false, err
		}
	}
	for i, o := range merged {
		if i == si {
			continue
		}
		c.unindex(o)
		if i > si {
			if err := c.appendValues(s, o); err != nil {
				return nil, false, err
			}
		}
		s.m.absorbCounts(&o.m)
		if err := c.st.Delete(metaKey(o.win, o.key)); err != nil {
			return nil, false, err
		}
	}
	return s, isNew, nil
}

// absorbCounts adds the counts of o, an entry merged into m's.
func (m *meta) absorbCounts(o *meta) {
	m.Pending += o.Pending
	m.Total += o.Total
	m.MinTs = min(m.MinTs, o.MinTs)
	m.MaxTs = max(m.MaxTs, o.MaxTs)
	m.Fired = max(m.Fired, o.Fired)
	m.NonSpec = max(m.NonSpec, o.NonSpec)
}

// appendValues moves o's values after into's, in order. o's storage
// window is not into's (storage windows of live entries are disjoint), so
// no key is both read and written.
func (c *Core) appendValues(into, o *entry) error {
	keys, vals, err := c.values(o)
	if err != nil {
		return err
	}
	for i, v := range vals {
		if err := c.st.Set(valueKey(into.m.SW, into.key, into.m.Seq), v); err != nil {
			return err
		}
		into.m.Seq++
		if err := c.st.Delete(keys[i]); err != nil {
			return err
		}
	}
	return nil
}

// rebase renumbers e's values from seqMid on (an entry stored before
// entries had Lo, whose values start at 0, when values must be prepended).
func (c *Core) rebase(e *entry) error {
	keys, vals, err := c.values(e)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := c.st.Delete(k); err != nil {
			return err
		}
	}
	e.m.Lo, e.m.Seq, e.m.Ext = seqMid, seqMid, true
	for _, v := range vals {
		if err := c.st.Set(valueKey(e.m.SW, e.key, e.m.Seq), v); err != nil {
			return err
		}
		e.m.Seq++
	}
	return nil
}

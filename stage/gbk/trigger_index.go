package gbk

import (
	"container/heap"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// trigIndex says which (key, window) entries an Advance must evaluate
// under a non-default trigger, instead of every open one. At
// Advance(prev → wm) with processing time now, an entry's trigger can
// fire only if one of these holds (the candidates):
//
//	(a) its window's end passes: prev ≤ w.MaxTimestamp() < wm (the on-time
//	    firing; EndOfWindow turns from early to late)
//	(b) its window expires: expiry(w) < wm (the GC-time pane, deletion)
//	(c) an armed processing-time deadline passed: min fireAt ≤ now
//	(d) it was hot after its last evaluation: shouldFire with the input
//	    watermark and processing time of then, at an Advance (an armed
//	    synchronized processing-time node, a repeated AfterEndOfWindow
//	    past the end)
//
// because shouldFire depends on nothing else that an Advance changes: for a
// fixed side of the end of the window it is monotone in the processing
// time, which only ProcTime nodes read, and counts change only with
// elements, which AddFire evaluates at once. A Load marks every entry hot
// (one full visit after a restore or an abort).
//
// Windows are kept in two min-heaps, by max timestamp until the watermark
// passes it, then by expiry; deadlines in a min-heap of (fireAt, entry).
// Stale heap entries (a window no longer open, an entry whose deadline
// moved or that was merged or deleted) are dropped as they surface. Cost
// of an Advance: O((w + d) log n + c log c) for w windows passing an end
// or expiring, d deadlines passing, n the heaps' sizes, c candidates;
// before the index it visited every open entry (BenchmarkTriggeredAdvance).
type trigIndex struct {
	ends, expiries winHeap
	// queued: the window is in ends or expiries (once).
	queued    map[Window]bool
	deadlines ptHeap
	hot       map[*entry]bool
}

func newTrigIndex() *trigIndex {
	return &trigIndex{
		ends:     winHeap{key: func(w Window, _ Strategy) mtime.Time { return w.MaxTimestamp() }},
		expiries: winHeap{key: func(w Window, s Strategy) mtime.Time { return s.expiry(w) }},
		queued:   map[Window]bool{},
		hot:      map[*entry]bool{},
	}
}

// addWindow queues a window that just got its first entry: by its end if
// the input watermark wm has not passed it, else by its expiry.
func (x *trigIndex) addWindow(w Window, wm mtime.Time, s Strategy) {
	if x.queued[w] {
		return
	}
	x.queued[w] = true
	if w.MaxTimestamp() >= wm {
		heap.Push(&x.ends, winItem{w: w, at: w.MaxTimestamp()})
	} else {
		heap.Push(&x.expiries, winItem{w: w, at: s.expiry(w)})
	}
}

// candidates pops the windows and deadlines Advance(prev → wm) at
// processing time now reaches and returns the live candidate entries, hot
// ones included, in firing order (window, then key). c.windows is the
// live index.
func (c *Core) candidates(prev, wm mtime.Time) []*entry {
	x := c.ti
	set := map[*entry]bool{}
	addWindow := func(w Window) {
		if ws := c.windows[w]; ws != nil {
			for _, e := range ws.entries {
				set[e] = true
			}
		}
	}
	for len(x.ends.items) > 0 && x.ends.items[0].at < wm {
		it := heap.Pop(&x.ends).(winItem)
		if c.windows[it.w] == nil {
			delete(x.queued, it.w)
			continue
		}
		addWindow(it.w)
		heap.Push(&x.expiries, winItem{w: it.w, at: c.strat.expiry(it.w)})
	}
	for len(x.expiries.items) > 0 && x.expiries.items[0].at < wm {
		it := heap.Pop(&x.expiries).(winItem)
		delete(x.queued, it.w)
		addWindow(it.w)
	}
	for {
		it, ok := x.deadlines.peekLive(c)
		if !ok || it.at > c.now {
			break
		}
		heap.Pop(&x.deadlines)
		set[it.e] = true
	}
	for e := range x.hot {
		set[e] = true
	}
	out := make([]*entry, 0, len(set))
	for e := range set {
		if c.live(e) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].win != out[j].win {
			return out[i].win.less(out[j].win)
		}
		return string(out[i].key) < string(out[j].key)
	})
	return out
}

// live says whether e is still the indexed entry of its (key, window).
func (c *Core) live(e *entry) bool {
	ws := c.windows[e.win]
	return ws != nil && ws.entries[string(e.key)] == e
}

// track records e's deadline and hotness after an evaluation (AddFire,
// Advance, a merge): (c) and (d) of trigIndex.
func (c *Core) track(e *entry) {
	x := c.ti
	if x == nil {
		return
	}
	at := int64(0)
	if !e.m.Closed {
		for _, s := range e.m.Trig {
			if !s.finished && s.fireAt != 0 && (at == 0 || s.fireAt < at) {
				at = s.fireAt
			}
		}
	}
	if at != e.ptAt {
		e.ptAt = at
		if at != 0 {
			heap.Push(&x.deadlines, ptItem{at: at, e: e})
		}
	}
	ctx := triggerCtx{eow: e.win.MaxTimestamp() < c.wm, now: c.now, merging: c.strat.Merging()}
	if !e.m.Closed && len(e.m.Trig) == c.strat.Trigger.nodes() && c.strat.Trigger.shouldFire(e.m.Trig, ctx) {
		x.hot[e] = true
	} else {
		delete(x.hot, e)
	}
}

type winItem struct {
	w  Window
	at mtime.Time
}

// winHeap is a min-heap of windows by at, then window order.
type winHeap struct {
	key   func(Window, Strategy) mtime.Time
	items []winItem
}

func (h *winHeap) Len() int { return len(h.items) }
func (h *winHeap) Less(i, j int) bool {
	if h.items[i].at != h.items[j].at {
		return h.items[i].at < h.items[j].at
	}
	return h.items[i].w.less(h.items[j].w)
}
func (h *winHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *winHeap) Push(v any)    { h.items = append(h.items, v.(winItem)) }
func (h *winHeap) Pop() any {
	n := len(h.items) - 1
	v := h.items[n]
	h.items = h.items[:n]
	return v
}

type ptItem struct {
	at int64
	e  *entry
}

// ptHeap is a min-heap of processing-time deadlines (ms).
type ptHeap struct{ items []ptItem }

func (h *ptHeap) Len() int           { return len(h.items) }
func (h *ptHeap) Less(i, j int) bool { return h.items[i].at < h.items[j].at }
func (h *ptHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *ptHeap) Push(v any)         { h.items = append(h.items, v.(ptItem)) }
func (h *ptHeap) Pop() any {
	n := len(h.items) - 1
	v := h.items[n]
	h.items[n] = ptItem{}
	h.items = h.items[:n]
	return v
}

// peekLive drops stale tops (the entry is gone, or its deadline moved) and
// returns the least live deadline.
func (h *ptHeap) peekLive(c *Core) (ptItem, bool) {
	for len(h.items) > 0 {
		it := h.items[0]
		if c.live(it.e) && it.e.ptAt == it.at {
			return it, true
		}
		heap.Pop(h)
	}
	return ptItem{}, false
}

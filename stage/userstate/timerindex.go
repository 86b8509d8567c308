package userstate

import "container/heap"

// timerIndex orders a task's pending timers (Task): event- and
// processing-time timers by (fire, key), every timer by hold. Entries of
// timers replaced, cleared or fired (timer.dead) stay in the heaps until
// they reach a top (peek drops them) or compact rebuilds the heaps, so
// that a write is one push, O(log n).
type timerIndex struct {
	event, proc, holds timerHeap
}

// rebuild makes the heaps hold exactly the live timers. O(n).
func (x *timerIndex) rebuild(live map[string]*timer) {
	x.event = timerHeap{less: byFire}
	x.proc = timerHeap{less: byFire}
	x.holds = timerHeap{less: byHold}
	for _, tm := range live {
		if tm.processing {
			x.proc.items = append(x.proc.items, tm)
		} else {
			x.event.items = append(x.event.items, tm)
		}
		x.holds.items = append(x.holds.items, tm)
	}
	heap.Init(&x.event)
	heap.Init(&x.proc)
	heap.Init(&x.holds)
}

// push indexes a new live timer.
func (x *timerIndex) push(tm *timer) {
	if x.holds.less == nil {
		x.rebuild(nil)
	}
	if tm.processing {
		heap.Push(&x.proc, tm)
	} else {
		heap.Push(&x.event, tm)
	}
	heap.Push(&x.holds, tm)
}

// compact rebuilds the heaps from live when stale entries outnumber the
// live ones (plus a slack of 64), so that the heaps stay O(n) in size.
// Amortized O(1) per write: a rebuild costs O(n) after more than n writes.
func (x *timerIndex) compact(live map[string]*timer) {
	if len(x.holds.items) > 2*len(live)+64 {
		x.rebuild(live)
	}
}

func byFire(a, b *timer) bool {
	if a.fire != b.fire {
		return a.fire < b.fire
	}
	return a.key < b.key
}

func byHold(a, b *timer) bool {
	if a.hold != b.hold {
		return a.hold < b.hold
	}
	return a.key < b.key
}

// timerHeap is a min-heap of timers under less (container/heap).
type timerHeap struct {
	less  func(a, b *timer) bool
	items []*timer
}

func (h *timerHeap) Len() int           { return len(h.items) }
func (h *timerHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *timerHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *timerHeap) Push(v any)         { h.items = append(h.items, v.(*timer)) }
func (h *timerHeap) Pop() any {
	n := len(h.items) - 1
	v := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	return v
}

// peek returns the least live timer, dropping stale entries above it; nil
// when none is left.
func (h *timerHeap) peek() *timer {
	for len(h.items) > 0 {
		if tm := h.items[0]; !tm.dead {
			return tm
		}
		heap.Pop(h)
	}
	return nil
}

// pop removes the top (call after peek returned it).
func (h *timerHeap) pop() { heap.Pop(h) }

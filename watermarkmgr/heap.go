package watermarkmgr

// partHeap is an indexed binary heap of source partition ids ordered by the
// partitions' watermarks (mtime.Time, milliseconds since the Unix epoch).
// With maxFirst == false the root is the partition with the lowest watermark,
// with maxFirst == true the one with the highest; ties go to the lower
// partition id so that the root is deterministic.
//
// The heap does not own the partition state: every method takes the
// manager's parts slice, and each element's position is kept in
// parts[id].pos so that fix and remove of a given partition cost O(log n).
// A partition is in at most one heap at a time (the manager's active or idle
// heap), so a single pos field suffices; pos is -1 when in none.
type partHeap struct {
	ids      []int32
	maxFirst bool
}

func (h *partHeap) len() int { return len(h.ids) }

// top returns the root partition id. Must not be called on an empty heap.
func (h *partHeap) top() int32 { return h.ids[0] }

func (h *partHeap) less(parts []partition, i, j int) bool {
	a, b := h.ids[i], h.ids[j]
	wa, wb := parts[a].wm, parts[b].wm
	if wa != wb {
		if h.maxFirst {
			return wa > wb
		}
		return wa < wb
	}
	return a < b
}

func (h *partHeap) swap(parts []partition, i, j int) {
	h.ids[i], h.ids[j] = h.ids[j], h.ids[i]
	parts[h.ids[i]].pos = int32(i)
	parts[h.ids[j]].pos = int32(j)
}

// push adds partition id, whose pos must be -1. O(log n).
func (h *partHeap) push(parts []partition, id int32) {
	h.ids = append(h.ids, id)
	i := len(h.ids) - 1
	parts[id].pos = int32(i)
	h.up(parts, i)
}

// remove takes partition id, which must be in h, out of the heap. O(log n).
func (h *partHeap) remove(parts []partition, id int32) {
	i := int(parts[id].pos)
	n := len(h.ids) - 1
	if i != n {
		h.swap(parts, i, n)
	}
	h.ids = h.ids[:n]
	parts[id].pos = -1
	if i != n {
		if !h.down(parts, i) {
			h.up(parts, i)
		}
	}
}

// fix restores the heap order after parts[id].wm changed. O(log n).
func (h *partHeap) fix(parts []partition, id int32) {
	i := int(parts[id].pos)
	if !h.down(parts, i) {
		h.up(parts, i)
	}
}

func (h *partHeap) up(parts []partition, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(parts, i, p) {
			return
		}
		h.swap(parts, i, p)
		i = p
	}
}

// down sifts element i down and reports whether it moved.
func (h *partHeap) down(parts []partition, i0 int) bool {
	i, n := i0, len(h.ids)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(parts, r, l) {
			c = r
		}
		if !h.less(parts, c, i) {
			break
		}
		h.swap(parts, i, c)
		i = c
	}
	return i > i0
}

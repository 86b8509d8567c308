package sourcehead

import "sort"

// Pause returns the partitions to hold for watermark alignment (seed 002,
// FLIP-217), with Min the minimum of GroupMin and the watermarks of this
// head's partitions that count (a record, not idle):
//
//	held(p) ⇔ hasRecord(p) ∧ (wm(p) − Min > MaxDrift ∨ unknown)
//	unknown ⇔ ∃ q of this head: ¬hasRecord(q) ∧ ¬caughtUp(q) ∧ ¬done(q) ∧ ¬Partition.Idle(q)
//
// unknown: one of the head's partitions has records to read (no partition
// EOF yet) but none read yet, so its event time is unknown, and the others
// wait for its first record, for its end (an empty partition does not hold
// the group: seed 002's hasReceivedEvent), or its idleness. Without it a
// partition whose first fetch came late let the others run to their end
// (TestKafkaSourceAlignment in a CI run: partition 0 read all its 600 s
// before partition 1's first record came, 30 s into the topic). A held
// partition gets no record, so it is never idle while held (Idle): it is
// released when the group catches up. Nil without alignment.
func (h *Head) Pause() []int32 {
	if h.cfg.Strategy.AlignmentGroup == "" || h.cfg.GroupMin == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	local := make(map[int32]bool, len(h.mu.parts))
	for p := range h.mu.parts {
		local[p] = true
	}
	gmin, ok := h.cfg.GroupMin(local)
	now := h.cfg.Clock()
	for p, part := range h.mu.parts {
		if _, seen := part.MaxEventTime(); seen && !part.Idle(now) && !h.mu.done[p] {
			if wm := part.Watermark(); !ok || wm < gmin {
				gmin, ok = wm, true
			}
		}
	}
	unknown := false
	for p, part := range h.mu.parts {
		if _, seen := part.MaxEventTime(); !seen && !h.mu.done[p] && !h.caughtUpLocked(p) && !part.Idle(now) {
			unknown = true
		}
	}
	was := h.mu.held
	h.mu.held = map[int32]bool{}
	h.mu.drift = map[int32]int64{}
	var out []int32
	for p, part := range h.mu.parts {
		if _, seen := part.MaxEventTime(); seen && !h.mu.done[p] && (ok || unknown) {
			d := int64(0)
			if ok {
				d = int64(part.Watermark() - gmin)
			}
			h.mu.drift[p] = d
			if unknown || d > h.cfg.Strategy.MaxDrift.Milliseconds() {
				h.mu.held[p] = true
				out = append(out, p)
			}
		}
		if h.mu.held[p] != was[p] {
			h.mu.changed[p] = true
			h.log.Info("kafkasource: alignment: a partition is held or released", "partition", p, "held", h.mu.held[p], "watermark", int64(part.Watermark()), "group_min", int64(gmin), "drift_ms", h.mu.drift[p], "max_drift", h.cfg.Strategy.MaxDrift, "awaiting_first_record", unknown)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

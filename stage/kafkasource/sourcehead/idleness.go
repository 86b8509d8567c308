package sourcehead

import (
	"fmt"
	"sort"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/kafkasource"
)

// Idle says partition p is idle (see Head: Partition.Idle(now), not held
// for alignment, reachable, and Reading.Quiet since its idleness deadline).
func (h *Head) Idle(p int32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.idleLocked(p, h.cfg.Clock()) {
		return false // a backlog, records alignment holds back, no leader, or records in the log not read: never idle
	}
	h.mu.announced[p] = true
	return true
}

// idleLocked is Head's rule for partition p at wall-clock now:
//
//	Partition.Idle(now) ∧ ¬done ∧ ¬held ∧ ¬unreachable ∧ Reading.Quiet(IdleAt)
//
// Must be called holding h.mu.
func (h *Head) idleLocked(p int32, now time.Time) bool {
	part, rd := h.mu.parts[p], h.mu.reading[p]
	if part == nil || rd == nil || h.mu.done[p] || h.mu.held[p] || h.mu.unreachable[p] || !part.Idle(now) {
		return false
	}
	at, _ := part.IdleAt()
	return rd.Quiet(at)
}

// LogEndsWanted implements step.LogEnds: the partitions past their
// idleness deadline whose consumer librdkafka reports at their end, and
// which alignment does not hold, nor an outage: those whose idleness only
// a ListOffsets answer asked after the deadline can confirm (Reading.Quiet),
// and the idle ones, so that records written to an idle partition that its
// consumer is not handed (a transaction opened on it) end its idleness;
// for a LimitedDelay source, every caught-up partition (its watermark
// follows the wall clock from the answers: quietLocked). Also those past
// their deadline that have had a record and no partition EOF since: they
// are not idle whatever the answer, which only says why, for the
// operator's page (records past the consumer's position: Unread, or none:
// Reading.Unconfirmed, a fetch not answered or throttled). Sorted.
func (h *Head) LogEndsWanted() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.drained {
		return nil
	}
	now := h.cfg.Clock()
	var out []int32
	for p, part := range h.mu.parts {
		rd := h.mu.reading[p]
		if rd == nil || h.mu.done[p] || h.mu.held[p] || h.mu.unreachable[p] {
			continue
		}
		idleDue := part.Idle(now)
		due := idleDue || h.cfg.Strategy.Kind == kafkasource.LimitedDelay // a limited delay follows the clock only on answers
		_, read := rd.Position()
		if rd.CaughtUp() && due || !rd.CaughtUp() && read && idleDue {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// SetLogEnd implements step.LogEnds: the broker's answer for partition p
// (high watermark and last stable offset, Kafka offsets) to a ListOffsets
// request sent at wall-clock asked. An answer showing records past the
// consumer's position (Reading.Unread) makes an idle partition non-idle at
// once: its next report says so (Wake), and, if librdkafka says its
// consumer is at its end (CaughtUp), it is logged once per spell.
func (h *Head) SetLogEnd(p int32, high, stable int64, asked time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rd := h.mu.reading[p]
	if rd == nil {
		return
	}
	rd.End(kafkasource.LogEnd{High: high, Stable: stable, Asked: asked})
	u, unread := rd.Unread()
	if why := u.Because(h.mu.held[p]); unread && why != h.mu.unreadShown[p] || !unread && h.mu.unreadShown[p] != "" {
		// The reason goes out in p's next report (Source), for the
		// operator's page: Wake asks for an attempt.
		h.mu.changed[p] = true
		if h.mu.unreadShown[p] = ""; unread {
			h.mu.unreadShown[p] = why
		}
	}
	if !unread {
		delete(h.mu.unreadLogged, p)
		return
	}
	if h.mu.announced[p] {
		delete(h.mu.announced, p)
		h.mu.changed[p] = true // its next report says it is not idle
	}
	if !h.mu.unreadLogged[p] && rd.CaughtUp() {
		// Logged when librdkafka says the consumer is at its end: a
		// partition not caught up with records past its position is a
		// backlog or a fetch not answered yet (at 128 partitions read
		// from a backlog, most of them at some point), which its
		// reports show without a line each.
		h.mu.unreadLogged[p] = true
		h.log.Warn("kafkasource: a partition holds records it cannot read yet: it holds the watermark, never idle, until they are read", "partition", p, "because", u.Because(false))
	}
}

// Rewound implements step.LogEnds: partition p's consumer was sought back
// (a task side inputs hold back): its EOF is stale, so p is not caught up
// until a new one comes.
func (h *Head) Rewound(p int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rd := h.mu.reading[p]; rd != nil {
		rd.Rewind()
	}
}

// SetReachable implements step.Reachability: a partition whose leader is
// gone (a broker died, a leader election runs) is not idle however long it
// stays quiet: what its producers write meanwhile waits in their buffers
// and comes with the event times it was written at, so a watermark moved
// on by idling it out would drop it all as late. When it is reachable
// again, its idleness clock starts afresh (Partition.Touch), giving the
// held-back records an idleness timeout to arrive. (Kafka-aware
// idleness: found by the 3-broker failover scenario at 1 000 records/s,
// where 887 windows missed the records written while partition 0 had no
// leader for 11 s, against an idleness of 5 s.)
func (h *Head) SetReachable(p int32, reachable bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	part := h.mu.parts[p]
	if part == nil {
		return
	}
	if !reachable {
		if !h.mu.unreachable[p] {
			h.mu.unreachable[p] = true
			if h.mu.announced[p] {
				h.mu.changed[p] = true // its next report says it is not idle
				delete(h.mu.announced, p)
			}
			h.log.Warn("kafkasource: a partition cannot be fetched (no leader, or its broker is down): it holds the watermark, never idle, until it can", "partition", p)
		}
		return
	}
	if h.mu.unreachable[p] {
		delete(h.mu.unreachable, p)
		part.Touch(h.cfg.Clock())
		h.log.Info("kafkasource: a partition can be fetched again: its idleness clock starts afresh", "partition", p)
	}
}

// ReachedEnd records that partition p's consumer has caught up (no
// backlog: p may now become idle), and marks partition p of a bounded read
// done once the consumer has reached the end offset p had at the start.
func (h *Head) ReachedEnd(p int32, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rd := h.mu.reading[p]; rd != nil {
		rd.EOF(offset)
	}
	end, ok := h.endOf(p)
	if !ok || offset < end {
		return
	}
	if h.mu.parts[p] != nil && !h.mu.done[p] {
		h.mu.done[p] = true
		if _, known := h.cfg.Ends[p]; !known {
			h.log.Warn("kafkasource: bounded read: a partition added after the job started is not read (a bounded read is the topic as it was at the start)", "partition", p)
			return
		}
		h.log.Info("kafkasource: bounded read: partition read to its end", "partition", p, "end_offset", end)
	}
}

// endOf is the end offset of partition p of a bounded read (HeadConfig.Ends:
// 0 for a partition added after the start), and false for an unbounded one.
func (h *Head) endOf(p int32) (int64, bool) {
	if h.cfg.Ends == nil {
		return 0, false
	}
	return h.cfg.Ends[p], true
}

// Wake returns the partitions that went idle and have not been reported
// idle yet, those a bounded read finished and has not reported, those
// whose reason for not being idle past their deadline changed
// (notIdleLocked: their report says it), and, of a
// LimitedDelay source, the quiet partitions whose watermark moved
// LimitedDelayReport or more since Wake last returned them (or that it has
// not returned since their assignment or an abort), sorted.
func (h *Head) Wake() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock()
	var out []int32
	for p, part := range h.mu.parts {
		// A new reason to show for not being idle (or none now) goes
		// out in a report.
		reason := false
		if why := h.notIdleLocked(p, now); why != h.mu.notIdleShown[p] {
			h.showNotIdleLocked(p, why)
			reason = true
		}
		if h.mu.changed[p] {
			delete(h.mu.changed, p)
			out = append(out, p)
			continue
		}
		if h.mu.done[p] || h.mu.drained {
			if !h.mu.reported[p] || reason {
				out = append(out, p)
			}
			continue
		}
		if !h.mu.announced[p] && h.idleLocked(p, now) {
			h.log.Info("kafkasource: a partition is idle (no record for its idleness timeout, and the broker holds nothing past its consumer's position): it stops holding the watermark until its next record", "partition", p, "idleness", h.cfg.Strategy.Idleness)
			out = append(out, p)
			continue
		}
		if reason {
			out = append(out, p)
			continue
		}
		if at, quiet := h.quietLocked(p); h.cfg.Strategy.Kind == kafkasource.LimitedDelay && quiet {
			// A quiet partition's watermark follows the wall clock: report
			// it every LimitedDelayReport of movement.
			w := part.WatermarkAt(at, true)
			if last, ok := h.mu.woke[p]; !ok || w-last >= mtime.Time(LimitedDelayReport.Milliseconds()) {
				h.mu.woke[p] = w
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Source describes partition p for its reports: the last event time, the
// idleness in force (alignment is not built yet: its fields stay unset).
func (h *Head) Source(p int32) *pb.SourcePartition {
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := &pb.SourcePartition{Topic: h.cfg.Topic, IdlenessTimeoutMillis: h.cfg.Strategy.Idleness.Milliseconds(),
		AlignmentGroup: h.cfg.Strategy.AlignmentGroup, AlignmentHeld: h.mu.held[p], DriftFromGroupMinMillis: h.mu.drift[p]}
	if part := h.mu.parts[p]; part != nil {
		if ts, ok := part.LastEventTime(); ok {
			sp.HasLastEventTime, sp.LastEventTimeMillis = true, int64(ts)
		}
	}
	if rd := h.mu.reading[p]; rd != nil && !h.mu.done[p] && !h.mu.drained {
		sp.UnreadBecause = h.mu.unreadShown[p]
		sp.NotIdleBecause = h.mu.notIdleShown[p].String()
	}
	return sp
}

// notIdle is why a partition past its idleness deadline is not idle, for
// a cause other than unread records (notIdleLocked); the zero value: none.
// Compared at every Wake, formatted only for a report (String).
type notIdle struct {
	// unreachable: its leader cannot be fetched from (SetReachable).
	unreachable bool
	// unconfirmed: no partition EOF since its latest record, the broker
	// showing high at position (Reading.Unconfirmed).
	unconfirmed    bool
	position, high int64
}

// String ends the page's sentence "partition P of topic T is not idle
// though it has had no record for its idleness timeout, because …"; "" for
// none.
func (n notIdle) String() string {
	switch {
	case n.unreachable:
		return notIdleUnreachable
	case n.unconfirmed:
		return fmt.Sprintf("its consumer has not confirmed the end of the log (position %d, high watermark %d, no partition EOF since its latest record: a fetch not answered yet, or throttled by a quota)", n.position, n.high)
	}
	return ""
}

// notIdleUnreachable is notIdle's reason for an unreachable partition.
const notIdleUnreachable = "its leader cannot be fetched from (no leader, or its broker is down)"

// notIdleLocked says why partition p, past its idleness deadline
// (Partition.Idle), is not idle, when the cause is not records in its log
// past its consumer's position (SetLogEnd's unreadShown): its leader
// cannot be fetched from (SetReachable), or its consumer has not confirmed
// the end of the log the broker shows at its position
// (Reading.Unconfirmed). None when p is not past its deadline, is idle,
// done, held by alignment (the page shows that on its own), or for any
// other cause. Must be called holding h.mu.
func (h *Head) notIdleLocked(p int32, now time.Time) notIdle {
	part, rd := h.mu.parts[p], h.mu.reading[p]
	if part == nil || rd == nil || h.mu.done[p] || h.mu.drained || h.mu.held[p] || !part.Idle(now) {
		return notIdle{}
	}
	if h.mu.unreachable[p] {
		return notIdle{unreachable: true}
	}
	at, _ := part.IdleAt()
	if pos, high, ok := rd.Unconfirmed(at); ok {
		return notIdle{unconfirmed: true, position: pos, high: high}
	}
	return notIdle{}
}

// showNotIdleLocked makes why the reason p's reports give for not being
// idle (Source). Not logged: an unreachable partition is logged by
// SetReachable, and one whose EOF is late is common in a backlog read
// across many partitions (the page says it). Must be called holding h.mu.
func (h *Head) showNotIdleLocked(p int32, why notIdle) {
	if why == (notIdle{}) {
		delete(h.mu.notIdleShown, p)
		return
	}
	h.mu.notIdleShown[p] = why
}

// quietLocked says partition p has nothing left to read that will become
// readable, as of at: the broker's latest ListOffsets answer (asked at at)
// shows its log ending at the consumer's position (Reading.QuietAt), and it
// is not held back by alignment, reachable and not done. A LimitedDelay
// watermark (Hold, Wake) follows the wall clock only from it, as idleness
// (idleLocked) goes idle only from Reading.Quiet: what keeps a partition
// from being idle keeps its limited delay from moving. Must be called
// holding h.mu.
func (h *Head) quietLocked(p int32) (at time.Time, quiet bool) {
	rd := h.mu.reading[p]
	if rd == nil || h.mu.held[p] || h.mu.unreachable[p] || h.mu.done[p] {
		return time.Time{}, false
	}
	return rd.QuietAt()
}

// caughtUpLocked says partition p has no backlog: a partition EOF at or
// past the offset after its latest record (or any EOF, before a record).
// Must be called holding h.mu.
func (h *Head) caughtUpLocked(p int32) bool {
	rd := h.mu.reading[p]
	return rd != nil && rd.CaughtUp()
}

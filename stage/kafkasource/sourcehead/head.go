package sourcehead

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/kafkasource"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// HeadConfig configures the head of one Kafka source stage in one
// instance.
type HeadConfig struct {
	// Stage names the stage and Topic the user's topic it reads, in logs
	// and errors. Required.
	Stage, Topic string
	// Strategy is the source's watermark strategy (seed 002). Required
	// (validated).
	Strategy kafkasource.Strategy
	// Encode makes the stage's element of one record: KV<key, value> at
	// event time ts, in the global window, encoded with the head output's
	// wire coder. Required.
	Encode func(key, value []byte, ts mtime.Time) ([]byte, error)
	// Clock is the wall clock of idleness and of the far-future check.
	// Default time.Now.
	Clock func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Timestamp, if set, gives a record's event time instead of its Kafka
	// timestamp (kafkaio.WithTimestampFn). A record it fails on (an error
	// or a panic) is no element: it is counted (BadRecords), logged once
	// per source with its partition and offset, and written as it was to
	// DeadLetterTopic if set, in the attempt's transaction.
	Timestamp func(r step.In) (time.Time, error)
	// DeadLetterTopic: see Timestamp. Empty: none.
	DeadLetterTopic string
	// BadRecords, if set, is told the partition of every such record once
	// the transaction that skipped it has committed (for /metrics).
	BadRecords func(p int32, n int)
	// GroupMin, for a source in a watermark alignment group
	// (Strategy.AlignmentGroup), is the group's minimum elsewhere: over the
	// reported, non-idle partitions with a record of every source stage of
	// the group, every instance's (from the report topic), leaving out this
	// stage's partitions in local (the head's own, whose watermarks it
	// knows fresher); ok false when none counts. The head takes the
	// minimum of it and its own partitions'. Nil without alignment.
	GroupMin func(local map[int32]bool) (min mtime.Time, ok bool)
	// Ends, for a bounded source, are the end offsets of the partitions
	// when the job started (log end offsets): partition p is done once its
	// consumer has reached Ends[p] (ReachedEnd), and its watermark is then
	// the end of time; its records at or past Ends[p] are skipped. A
	// partition missing from Ends was added after the job started: its end
	// offset then was 0 (it did not exist), so none of its records is read
	// and it is done at its first partition EOF (a bounded read is the
	// topic as it was at the start; Flink's bounded KafkaSource does not
	// discover partitions either). Nil: unbounded. The loop must be asked
	// for partition EOF events.
	Ends map[int32]int64
}

// LimitedDelayReport is how far (event time, which here moves with the
// wall clock) a quiet LimitedDelay partition's watermark moves between the
// attempts Wake asks for to report it: at most one transaction a second
// per source stage and instance for partitions that are caught up and
// quiet, and a window closes at most this much later than its end plus
// the delay (plus a commit). Prism's estimator moves at every checkpoint
// of its partition (every 200 ms plus a poll).
const LimitedDelayReport = time.Second

// FutureSkew is how far ahead of the wall clock a record's event time may
// be before it is logged (once per source): a producer clock that runs
// ahead, or a timestamp in the wrong unit, holds its partition's watermark
// ahead of the others (seed 002).
const FutureSkew = time.Minute

// Head is the head of a Kafka source stage (step.Head): each task is one
// partition of the user's topic; each record becomes one element,
// KV<key, value> at the record's Kafka timestamp (CreateTime or
// LogAppendTime, as the topic says), and the partition's watermark
// generator (Partition) says how far the task's output watermark may go:
//
//	Hold(p) = Partition.WatermarkAt(at(p), true)   if quiet(p)   (a LimitedDelay source)
//	        = Partition.WatermarkAt(now, false)     otherwise
//	Idle(p) ⇔ Partition.Idle(now) ∧ ¬held(p) ∧ ¬unreachable(p) ∧ Reading.Quiet(IdleAt(p))
//	quiet(p) ⇔ Reading.QuietAt() ∧ ¬held(p) ∧ ¬unreachable(p) ∧ ¬done(p);  at(p) its answer's Asked
//
// where Reading.Quiet says the consumer reached the partition's end past
// p's latest record (a partition EOF at or after its offset + 1) and a
// ListOffsets answer asked at or after p's idleness deadline (IdleAt)
// shows nothing past that EOF (high watermark ≤ EOF offset): a partition
// with a backlog is never idle (seed 002: "a live-but-lagging partition is
// never mistaken for an idle one"), nor one whose log holds records its
// consumer was not handed (issue 21, section 2: a transaction open past
// the last stable offset, a fetch not answered yet, a fetch paused or
// stopped). Partition.Idle's clock starts when the partition is assigned,
// so a partition that never gets a record still idles out. The stage's
// consumer must deliver partition EOF events, and its loop must ask the
// broker for the log ends LogEndsWanted names (step.LogEnds). Wake asks
// for an attempt when a partition goes idle, so that its idle report goes
// out though it has no record; an idle partition that a later answer shows
// unread records for stops being idle at once (its next report says so).
//
// quiet (quietLocked) is the same notion for a LimitedDelay source, whose
// quiet partition follows the wall clock: its watermark moves to at − d,
// where at is when the broker last confirmed nothing past the consumer's
// position (a ListOffsets answer's Asked), never to now − d on what the
// consumer was handed alone, so a record in the log it cannot read yet
// (an open transaction) is not made late. For every kind but LimitedDelay,
// WatermarkAt is Partition.Watermark() and does not read the clock. Wake
// also asks, for a LimitedDelay source, for an attempt whenever a quiet
// partition's watermark has moved LimitedDelayReport past the one Wake
// last asked for: that report is not idle, it is a watermark.
//
// After a restore the generator starts afresh (its largest event time is
// not checkpointed): the task's output watermark, max(previous, min(end of
// time, hold)), stays where it was until the partition's records take it
// further, so nothing goes backwards.
type Head struct {
	cfg HeadConfig
	log *slog.Logger

	mu struct {
		sync.Mutex
		parts map[int32]*kafkasource.Partition
		// announced[p]: the attempt that made p idle has been run (Wake
		// asks once per quiet spell).
		announced map[int32]bool
		// done[p]: a bounded source's partition p has been read to its end;
		// reported says that an attempt has reported it since.
		done, reported map[int32]bool
		// reading[p] is where p's consumer stands against the end of p's
		// log (its EOFs, its records, the broker's ListOffsets answers):
		// Reading.Quiet says when p may be idle.
		reading map[int32]*kafkasource.Reading
		// unreadLogged[p]: the partition's unread records were logged
		// (once per spell).
		unreadLogged map[int32]bool
		// unreadShown[p] is the reason p's reports give for its unread
		// records (Source); "" none.
		unreadShown map[int32]string
		// held are the partitions the last Pause held for alignment, with
		// their drift from the group minimum (ms).
		held  map[int32]bool
		drift map[int32]int64
		// changed are the partitions whose held flag changed since Wake
		// last asked for an attempt (their report says so).
		changed map[int32]bool
		// drained: the application is draining (Drain): every partition is
		// done, as a bounded read's at its end.
		drained bool
		// unreachable are the partitions the consumer cannot fetch (their
		// leader is gone: SetReachable): never idle.
		unreachable map[int32]bool
		// woke[p], for a LimitedDelay source, is the watermark of p that
		// Wake last asked an attempt for (absent: none since the
		// assignment or the last abort).
		woke map[int32]mtime.Time
		// committed[p] is p's generator's event-time progress as of the
		// last commit (absent: none since the assignment, no record seen):
		// Aborted puts it back.
		committed map[int32]kafkasource.Progress
	}
	futureLogged bool
	// bad are the records of the current attempt Timestamp failed on, in
	// order; badLogged says one was logged.
	bad       []badRecord
	badLogged bool
}

// badRecord is a record whose event time Timestamp could not give.
type badRecord struct {
	p          int32
	key, value []byte
}

var (
	_ step.Head         = (*Head)(nil)
	_ step.Drainer      = (*Head)(nil)
	_ step.LogEnds      = (*Head)(nil)
	_ step.Reachability = (*Head)(nil)
)

// Drain implements step.Drainer: the source reads no more records, and
// every partition's watermark goes to the end of time (as a bounded read's
// at its end), reported at the next attempt (Wake).
func (h *Head) Drain() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.drained = true
	h.log.Info("kafkasource: draining: no more records are read; every partition reports the end of time", "partitions", len(h.mu.parts))
	return true
}

// NewHead returns the head; a bad strategy is an error naming the stage.
func NewHead(cfg HeadConfig) (*Head, error) {
	if cfg.Stage == "" || cfg.Topic == "" || cfg.Encode == nil {
		return nil, fmt.Errorf("kafkasource: HeadConfig needs Stage, Topic and Encode")
	}
	if err := cfg.Strategy.Validate(); err != nil {
		return nil, fmt.Errorf("kafkasource: stage %s (topic %s): %w", cfg.Stage, cfg.Topic, err)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Head{cfg: cfg, log: cfg.Logger.With("stage", cfg.Stage, "topic", cfg.Topic)}
	h.mu.parts = map[int32]*kafkasource.Partition{}
	h.mu.announced = map[int32]bool{}
	h.mu.done = map[int32]bool{}
	h.mu.committed = map[int32]kafkasource.Progress{}
	h.mu.reported = map[int32]bool{}
	h.mu.reading = map[int32]*kafkasource.Reading{}
	h.mu.unreadLogged = map[int32]bool{}
	h.mu.unreadShown = map[int32]string{}
	h.mu.held = map[int32]bool{}
	h.mu.drift = map[int32]int64{}
	h.mu.changed = map[int32]bool{}
	h.mu.unreachable = map[int32]bool{}
	h.mu.woke = map[int32]mtime.Time{}
	return h, nil
}

// Assign starts partition p's generator; its idleness clock starts now.
func (h *Head) Assign(_ context.Context, p int32) error {
	part, err := kafkasource.NewPartition(h.cfg.Strategy, h.cfg.Clock())
	if err != nil {
		return fmt.Errorf("kafkasource: stage %s partition %d: %w", h.cfg.Stage, p, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.parts[p] = part
	h.forgetLocked(p)
	h.mu.reading[p] = &kafkasource.Reading{}
	delete(h.mu.committed, p)
	return nil
}

// Revoke drops partition p's generator.
func (h *Head) Revoke(p int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mu.parts, p)
	h.forgetLocked(p)
	delete(h.mu.reading, p)
	delete(h.mu.committed, p)
}

// forgetLocked drops what the head knows of partition p's progress (its
// announcements, a bounded read's end, its last EOF and record) and of its
// alignment. Must be called holding h.mu.
func (h *Head) forgetLocked(p int32) {
	h.forgetProgressLocked(p)
	delete(h.mu.held, p)
	delete(h.mu.drift, p)
	delete(h.mu.changed, p)
	delete(h.mu.unreachable, p)
}

// forgetProgressLocked drops what the head knows of partition p's
// progress: whether it was announced idle, a bounded read's end and its
// report, its last EOF and record (after a rewind they are read again).
// Must be called holding h.mu.
func (h *Head) forgetProgressLocked(p int32) {
	delete(h.mu.announced, p)
	delete(h.mu.done, p)
	delete(h.mu.reported, p)
	if r := h.mu.reading[p]; r != nil {
		r.Rewind()
	}
	delete(h.mu.unreadLogged, p)
	delete(h.mu.unreadShown, p)
	delete(h.mu.woke, p)
}

// Element turns record r of partition p into its element, at its Kafka
// timestamp, and feeds the timestamp to p's generator.
func (h *Head) Element(p int32, r step.In) (step.Work, error) {
	if end, ok := h.endOf(p); ok && r.Offset >= end {
		return step.Work{}, nil // past a bounded read's end
	}
	now := h.cfg.Clock()
	ts := mtime.Time(r.Timestamp)
	if h.cfg.Timestamp != nil {
		var err error
		if ts, err = h.eventTime(r); err != nil {
			h.bad = append(h.bad, badRecord{p: p, key: r.Key, value: r.Value})
			if !h.badLogged {
				h.badLogged = true
				h.log.Warn("kafkasource: the timestamp function failed on a record: it is skipped, counted on /metrics, and written to the dead-letter topic if there is one; logged once per source",
					"partition", p, "offset", r.Offset, "err", err, "dead_letter_topic", h.cfg.DeadLetterTopic)
			}
			return step.Work{}, nil
		}
	}
	if !h.futureLogged && ts.ToTime().After(now.Add(FutureSkew)) {
		h.futureLogged = true
		h.log.Warn("kafkasource: a record's timestamp is more than a minute ahead of the wall clock (a producer clock running ahead, or a timestamp in the wrong unit?): it holds its partition's watermark ahead of the others; logged once per source",
			"partition", p, "offset", r.Offset, "timestamp_ms", r.Timestamp, "now_ms", now.UnixMilli())
	}
	h.mu.Lock()
	part := h.mu.parts[p]
	if part != nil {
		part.Observe(ts, now)
		delete(h.mu.announced, p)
		if rd := h.mu.reading[p]; rd != nil {
			rd.Record(r.Offset) // idle only after an EOF past it
		}
		delete(h.mu.unreadShown, p) // reading again: this attempt's report drops the reason
	}
	h.mu.Unlock()
	if part == nil {
		return step.Work{}, fmt.Errorf("kafkasource: stage %s: a record of partition %d, which is not assigned", h.cfg.Stage, p)
	}
	e, err := h.cfg.Encode(r.Key, r.Value, ts)
	if err != nil {
		return step.Work{}, fmt.Errorf("kafkasource: topic %s partition %d offset %d: %w", h.cfg.Topic, p, r.Offset, err)
	}
	return step.Work{Elements: [][]byte{e}}, nil
}

// eventTime is Timestamp of record r, a panic turned into an error.
func (h *Head) eventTime(r step.In) (ts mtime.Time, err error) {
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("the timestamp function panicked: %v", x)
		}
	}()
	t, err := h.cfg.Timestamp(r)
	if err != nil {
		return 0, err
	}
	return mtime.FromTime(t), nil
}

// Advance implements step.Head: a source has no input watermark to act on.
func (h *Head) Advance(int32, mtime.Time) (step.Work, error) { return step.Work{}, nil }

// Results implements step.Head: nothing comes back to a source.
func (h *Head) Results(*step.Bundle) (step.Work, error) { return step.Work{}, nil }

// Hold is partition p's watermark (Partition.WatermarkAt(now, quiet(p)):
// Partition.Watermark but for a LimitedDelay source; mtime.MinTimestamp if
// p is not assigned; the end of time once a bounded read of p is done).
func (h *Head) Hold(p int32) mtime.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.done[p] || h.mu.drained && h.mu.parts[p] != nil {
		h.mu.reported[p] = true
		return mtime.MaxTimestamp
	}
	if part := h.mu.parts[p]; part != nil {
		if at, quiet := h.quietLocked(p); quiet {
			return part.WatermarkAt(at, true)
		}
		return part.WatermarkAt(h.cfg.Clock(), false)
	}
	return mtime.MinTimestamp
}

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
// follows the wall clock from the answers: quietLocked). Sorted.
func (h *Head) LogEndsWanted() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.drained {
		return nil
	}
	now := h.cfg.Clock()
	var out []int32
	for p, part := range h.mu.parts {
		due := part.Idle(now) || h.cfg.Strategy.Kind == kafkasource.LimitedDelay // a limited delay follows the clock only on answers
		if rd := h.mu.reading[p]; rd != nil && rd.CaughtUp() && due && !h.mu.done[p] && !h.mu.held[p] && !h.mu.unreachable[p] {
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
// once: its next report says so (Wake), and it is logged once per spell.
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
	if !h.mu.unreadLogged[p] {
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
// idle yet, those a bounded read finished and has not reported, and, of a
// LimitedDelay source, the quiet partitions whose watermark moved
// LimitedDelayReport or more since Wake last returned them (or that it has
// not returned since their assignment or an abort), sorted.
func (h *Head) Wake() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock()
	var out []int32
	for p, part := range h.mu.parts {
		if h.mu.changed[p] {
			delete(h.mu.changed, p)
			out = append(out, p)
			continue
		}
		if h.mu.done[p] || h.mu.drained {
			if !h.mu.reported[p] {
				out = append(out, p)
			}
			continue
		}
		if !h.mu.announced[p] && h.idleLocked(p, now) {
			h.log.Info("kafkasource: a partition is idle (no record for its idleness timeout, and the broker holds nothing past its consumer's position): it stops holding the watermark until its next record", "partition", p, "idleness", h.cfg.Strategy.Idleness)
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
	}
	return sp
}

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

// Prepare writes the attempt's bad records to the dead-letter topic, as
// they were.
func (h *Head) Prepare(produce step.ProduceFunc) error {
	if h.cfg.DeadLetterTopic == "" {
		return nil
	}
	for _, b := range h.bad {
		if err := produce(h.cfg.DeadLetterTopic, step.AnyPartition, b.key, b.value); err != nil {
			return fmt.Errorf("kafkasource: dead-letter topic %s: %w", h.cfg.DeadLetterTopic, err)
		}
	}
	return nil
}

// Committed counts the attempt's bad records and keeps every partition's
// event-time progress as of this commit (for Aborted).
func (h *Head) Committed() error {
	h.mu.Lock()
	for p, part := range h.mu.parts {
		h.mu.committed[p] = part.Progress()
	}
	h.mu.Unlock()
	if h.cfg.BadRecords != nil {
		n := map[int32]int{}
		for _, b := range h.bad {
			n[b.p]++
		}
		for p, c := range n {
			h.cfg.BadRecords(p, c)
		}
	}
	h.bad = nil
	return nil
}

// Aborted implements step.Head: the generators of ps go back to their
// event-time progress as of the last commit (Partition.Rewind: the
// attempt's records are read again, and a watermark computed from them
// before they are output again would run ahead of them: a task woken
// without its records, or whose retry reads fewer of them, would report
// it, and downstream windows would drop them as late), an idle partition
// is announced again, and a bounded partition is done again only when its
// consumer reaches the end again (its records are read again first).
func (h *Head) Aborted(ps []int32) error {
	h.bad = nil
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range ps {
		if part := h.mu.parts[p]; part != nil {
			part.Rewind(h.mu.committed[p])
		}
		h.forgetProgressLocked(p) // rewound: its records are to read again, the EOF is stale
	}
	return nil
}

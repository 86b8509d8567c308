package sourcehead

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/recordtime"
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
	// Encode makes the stage's element of record r of partition r.Task
	// at event time ts (its Kafka timestamp, or Timestamp's): KV<key,
	// value>, or the whole record (kafkaio.ReadRecords), in the global
	// window, encoded with the head output's wire coder. A nil key or
	// value in r is Kafka's null, an empty one empty. Required.
	Encode func(r step.In, ts mtime.Time) ([]byte, error)
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
		// notIdleShown[p] is the reason p's reports give for not being
		// idle past its idleness deadline, other than unread records
		// (notIdleLocked, Source); absent: none. Wake asks for a report when
		// the reason changes.
		notIdleShown map[int32]notIdle
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

// badRecord is a record whose event time Timestamp could not give, as
// it was read: its Kafka timestamp (ms; 0: none) and headers too.
type badRecord struct {
	p          int32
	key, value []byte
	timestamp  int64
	headers    []step.Header
}

var (
	_ step.Head           = (*Head)(nil)
	_ step.Drainer        = (*Head)(nil)
	_ step.LogEnds        = (*Head)(nil)
	_ step.Reachability   = (*Head)(nil)
	_ step.WatermarkAhead = (*Head)(nil)
	_ step.RecordPreparer = (*Head)(nil)
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
	h.mu.notIdleShown = map[int32]notIdle{}
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
	delete(h.mu.notIdleShown, p)
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
			h.bad = append(h.bad, badRecord{p: p, key: r.Key, value: r.Value, timestamp: r.Timestamp, headers: r.Headers})
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
		delete(h.mu.unreadShown, p) // reading again: this attempt's report drops the reasons
		delete(h.mu.notIdleShown, p)
	}
	h.mu.Unlock()
	if part == nil {
		return step.Work{}, fmt.Errorf("kafkasource: stage %s: a record of partition %d, which is not assigned", h.cfg.Stage, p)
	}
	e, err := h.cfg.Encode(r, ts)
	if err != nil {
		return step.Work{}, fmt.Errorf("kafkasource: topic %s partition %d offset %d: %w", h.cfg.Topic, p, r.Offset, err)
	}
	return step.Work{Elements: [][]byte{e}}, nil
}

// WatermarkWith implements step.WatermarkAhead: partition p's watermark
// once it has taken a record of Kafka timestamp ts (ms since the Unix
// epoch), from its generator (kafkasource.Partition.WatermarkWith). ok is
// false if p is not assigned or done, or its event time is not the Kafka
// timestamp (Config.Timestamp: a user's function, not called while
// polling), or its kind's watermark does not follow its records
// (NoWatermarks, LimitedDelay).
func (h *Head) WatermarkWith(p int32, ts int64) (mtime.Time, bool) {
	if h.cfg.Timestamp != nil {
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	part := h.mu.parts[p]
	if part == nil || h.mu.done[p] || h.mu.drained {
		return 0, false
	}
	return part.WatermarkWith(mtime.Time(ts))
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

// Prepare implements step.Head: the source's records to commit are its
// dead letters (PrepareRecords).
func (h *Head) Prepare(step.ProduceFunc) error { return nil }

// PrepareRecords implements step.RecordPreparer: the attempt's bad records
// for the dead-letter topic (none without one), as they were read: key,
// value, headers and Kafka timestamp (recordtime.For: the time of writing
// if it had none, or one the dead-letter topic would refuse).
func (h *Head) PrepareRecords() []step.Record {
	if h.cfg.DeadLetterTopic == "" {
		return nil
	}
	out := make([]step.Record, 0, len(h.bad))
	now := h.cfg.Clock()
	for _, b := range h.bad {
		r := step.Record{Topic: h.cfg.DeadLetterTopic, Partition: step.AnyPartition, Key: b.key, Value: b.value, Headers: b.headers}
		r.Timestamp, _ = recordtime.For(mtime.Time(b.timestamp), now, recordtime.DefaultTimestampAfterMax)
		out = append(out, r)
	}
	return out
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

package kafkasource

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage"
)

// HeadConfig configures the head of one Kafka source stage in one
// instance. The stage's loop must ask for partition EOF events
// (enable.partition.eof), bounded or not: they say where a partition is
// caught up (ReachedEnd), which a bounded read's end and idleness need.
type HeadConfig struct {
	// Stage names the stage and Topic the user's topic it reads, in logs
	// and errors. Required.
	Stage, Topic string
	// Strategy is the source's watermark strategy (seed 002). Required
	// (validated).
	Strategy Strategy
	// Encode makes the stage's element of one record: KV<key, value> at
	// event time ts, in the global window, encoded with the head output's
	// wire coder. Required.
	Encode func(key, value []byte, ts mtime.Time) ([]byte, error)
	// Clock is the wall clock of idleness and of the far-future check.
	// Default time.Now.
	Clock func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Ends, for a bounded source, are the end offsets of the partitions
	// when the job started (log end offsets): partition p is done once its
	// consumer has reached Ends[p] (ReachedEnd), and its watermark is then
	// the end of time; its records at or past Ends[p] are skipped. A
	// partition missing from Ends (added later) is read unbounded. Nil:
	// unbounded.
	Ends map[int32]int64
}

// FutureSkew is how far ahead of the wall clock a record's event time may
// be before it is logged (once per source): a producer clock that runs
// ahead, or a timestamp in the wrong unit, holds its partition's watermark
// ahead of the others (seed 002).
const FutureSkew = time.Minute

// Head is the head of a Kafka source stage (stage.Head): each task is one
// partition of the user's topic; each record becomes one element,
// KV<key, value> at the record's Kafka timestamp (CreateTime or
// LogAppendTime, as the topic says), and the partition's watermark
// generator (Partition) says how far the task's output watermark may go:
// Hold(p) = Partition.Watermark(); Idle(p) = Partition.Idle(now), whose
// clock starts when the partition is assigned, so a partition that never
// gets a record still idles out, and only once p is caught up: its
// consumer has reached the partition's end (a partition EOF) after its
// latest record. A partition with a backlog is not idle however long it
// has gone without a record (its records wait behind another partition's
// in the consumer, or the stage is slow): idle, it would leave the
// minimum, and its unread records would come in behind a watermark that
// has moved on, late (seed 002: a live-but-lagging partition is never
// mistaken for an idle one). Wake asks for an attempt when a partition
// goes idle, so that its idle report goes out though it has no record.
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
		parts map[int32]*Partition
		// announced[p]: the attempt that made p idle has been run (Wake
		// asks once per quiet spell).
		announced map[int32]bool
		// done[p]: a bounded source's partition p has been read to its end;
		// reported says that an attempt has reported it since.
		done, reported map[int32]bool
		// eof[p] is the offset of p's latest partition EOF since its
		// assignment or the last abort (absent: none yet); next[p] the
		// offset after its latest record. p is caught up iff
		// eof[p] >= next[p].
		eof, next map[int32]int64
	}
	futureLogged bool
}

var _ stage.Head = (*Head)(nil)

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
	h.mu.parts = map[int32]*Partition{}
	h.mu.announced = map[int32]bool{}
	h.mu.done = map[int32]bool{}
	h.mu.reported = map[int32]bool{}
	h.mu.eof = map[int32]int64{}
	h.mu.next = map[int32]int64{}
	return h, nil
}

// Assign starts partition p's generator; its idleness clock starts now.
func (h *Head) Assign(_ context.Context, p int32) error {
	part, err := NewPartition(h.cfg.Strategy, h.cfg.Clock())
	if err != nil {
		return fmt.Errorf("kafkasource: stage %s partition %d: %w", h.cfg.Stage, p, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.parts[p] = part
	h.forget(p)
	return nil
}

// forget drops what the head knows of partition p's progress: announced,
// done, reported, and where its consumer is. Locks: h.mu.
func (h *Head) forget(p int32) {
	delete(h.mu.announced, p)
	delete(h.mu.done, p)
	delete(h.mu.reported, p)
	delete(h.mu.eof, p)
	delete(h.mu.next, p)
}

// Revoke drops partition p's generator.
func (h *Head) Revoke(p int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mu.parts, p)
	h.forget(p)
}

// Element turns record r of partition p into its element, at its Kafka
// timestamp, and feeds the timestamp to p's generator.
func (h *Head) Element(p int32, r stage.In) (stage.Work, error) {
	if end, ok := h.cfg.Ends[p]; ok && r.Offset >= end {
		return stage.Work{}, nil // past a bounded read's end
	}
	now := h.cfg.Clock()
	ts := mtime.Time(r.Timestamp)
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
		h.mu.next[p] = r.Offset + 1
	}
	h.mu.Unlock()
	if part == nil {
		return stage.Work{}, fmt.Errorf("kafkasource: stage %s: a record of partition %d, which is not assigned", h.cfg.Stage, p)
	}
	e, err := h.cfg.Encode(r.Key, r.Value, ts)
	if err != nil {
		return stage.Work{}, fmt.Errorf("kafkasource: topic %s partition %d offset %d: %w", h.cfg.Topic, p, r.Offset, err)
	}
	return stage.Work{Elements: [][]byte{e}}, nil
}

// Advance implements stage.Head: a source has no input watermark to act on.
func (h *Head) Advance(int32, mtime.Time) (stage.Work, error) { return stage.Work{}, nil }

// Results implements stage.Head: nothing comes back to a source.
func (h *Head) Results(*stage.Bundle) (stage.Work, error) { return stage.Work{}, nil }

// Hold is partition p's watermark (Partition.Watermark; mtime.MinTimestamp
// if p is not assigned; the end of time once a bounded read of p is done).
func (h *Head) Hold(p int32) mtime.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.done[p] {
		h.mu.reported[p] = true
		return mtime.MaxTimestamp
	}
	if part := h.mu.parts[p]; part != nil {
		return part.Watermark()
	}
	return mtime.MinTimestamp
}

// Idle is Partition.Idle(now) of partition p, once p is caught up (its
// consumer has reached its end after its latest record); false for a
// partition with records still to read.
func (h *Head) Idle(p int32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	part := h.mu.parts[p]
	if part == nil || h.mu.done[p] || !h.caughtUp(p) || !part.Idle(h.cfg.Clock()) {
		return false
	}
	h.mu.announced[p] = true
	return true
}

// caughtUp says partition p's consumer has reached the partition's end
// since its latest record: a partition EOF at or after the offset that
// follows it. Locks: h.mu.
func (h *Head) caughtUp(p int32) bool {
	eof, ok := h.mu.eof[p]
	return ok && eof >= h.mu.next[p]
}

// ReachedEnd records that partition p's consumer has reached offset, the
// partition's end as the broker knew it (a partition EOF): p is caught up
// unless a record at or past offset follows. A bounded read's partition is
// done once offset reaches the end offset p had at the start.
func (h *Head) ReachedEnd(p int32, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.parts[p] == nil {
		return
	}
	h.mu.eof[p] = offset
	end, ok := h.cfg.Ends[p]
	if !ok || offset < end {
		return
	}
	if !h.mu.done[p] {
		h.mu.done[p] = true
		h.log.Info("kafkasource: bounded read: partition read to its end", "partition", p, "end_offset", end)
	}
}

// Wake returns the partitions that went idle (caught up, and quiet for
// the idleness) and have not been reported idle yet, and those a bounded
// read finished and has not reported, sorted.
func (h *Head) Wake() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock()
	var out []int32
	for p, part := range h.mu.parts {
		if h.mu.done[p] {
			if !h.mu.reported[p] {
				out = append(out, p)
			}
			continue
		}
		if !h.mu.announced[p] && h.caughtUp(p) && part.Idle(now) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Prepare implements stage.Head: no state.
func (h *Head) Prepare(stage.ProduceFunc) error { return nil }

// Committed implements stage.Head.
func (h *Head) Committed() error { return nil }

// Aborted implements stage.Head: the generators keep what they saw (an
// event time seen again after the rewind changes nothing: the watermark
// is a maximum), an idle partition is announced again, and a partition is
// caught up (so may be idle), or a bounded one done, only when its
// consumer reaches the end again (its records are read again first; a
// seek makes librdkafka report the partition EOF again).
func (h *Head) Aborted(ps []int32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range ps {
		h.forget(p)
	}
	return nil
}

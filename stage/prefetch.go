package stage

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/step"
)

// This file is the poll during a commit: while an attempt is decided and
// its transaction committed (Loop.commit) on a goroutine of its own, the
// loop's goroutine polls the consumer for the next attempt and keeps what
// it gets (Loop.ahead) for the next poll, which takes it first, in order,
// as if it had polled it then. The loop's goroutine spent a third of a
// source stage's time polling (issue 24: at 10 M records, 37% of the
// windowed sum's source stage loop, the bundle 51%, the transaction 6-8%),
// one after the other, while the harness ran the bundle on its own
// goroutines; with Config.PollDuringCommit the two overlap. Measured on
// 2 cores shared with the broker it gains nothing (the windowed sum at
// 3 M and 10 M records: 1.08 and 1.06 times the wall time; the source
// stage's polls fell from 39% to 11% of its loop and its bundles grew
// from 46% to 72-75%, slower by what the polls saved): it is off by
// default, for an instance with cores to spare.
//
// What keeps it the loop it was: the prefetch only calls Poll and keeps
// the events, it never touches the head, the tasks or the step, which the
// commit's goroutine owns until it returns. A rebalance callback, which
// the client runs inside Poll, first waits for the commit (joinCommit), so
// a task is assigned or revoked between two attempts as before. Every
// event keeps the task that owned its partition when it was polled (as
// poll's records do): a partition the attempt's failure rewinds, or a
// rebalance revokes and assigns again, has a new task, and its prefetched
// records and end-of-partition events are dropped, stale (the consumer
// reads them again from the position the rewind sought). A partition that
// side inputs hold back (holdBlocked) is sought back to its held record:
// its prefetched events are dropped too (dropAhead).
//
// What the rest of the package calls "the loop's goroutine" is the loop's
// one thread of control: during a commit, the commit's goroutine (started
// after the loop's last write, joined through a channel before the loop's
// next read), so no state of the loop's takes a lock for it. Until the
// join the prefetch calls only the consumer's Poll, reads the tasks map
// (which only the rebalance callback and the rewind change, neither
// during a commit) and writes its own slice and Loop.ahead's counters,
// which the commit does not read.

// prefetchWait is the longest one Poll of the prefetch waits, in
// milliseconds: the commit's end is noticed within it.
const prefetchWait = 2

// aheadEvent is an event polled during a commit: owner is the task that
// owned its partition then (nil for an event of no partition).
type aheadEvent struct {
	ev    kafka.Event
	owner *step.Task
}

// aheadState is the prefetch's state (Loop.ahead).
type aheadState struct {
	// events are the events polled during the last commit and not yet
	// taken by poll, in the order polled; records counts their records.
	events  []aheadEvent
	records int
	// since is when the last prefetch began (zero: none since the last
	// poll): the next poll's commit interval counts from it, so a stage
	// that keeps up commits every interval, not every interval plus a
	// commit.
	since time.Time
	// inflight is the commit under way, nil when none is (joinCommit);
	// joined is its result once a rebalance callback waited for it.
	inflight chan commitResult
	joined   *commitResult
}

// commitResult is Loop.commit's result.
type commitResult struct {
	blocked map[int32]int64
	err     error
}

// commitPolling is commit (batch and wake as there, no dead letter) with
// the next attempt's records polled while it runs (see the file's
// comment), or commit alone when the stage polls serially: without
// Config.PollDuringCommit,
// while it looks for a failing record (isolate: one attempt's records
// are its batch, no more) and once a drain was asked for.
func (l *Loop) commitPolling(ctx context.Context, batch []*kafka.Message, wake []int32) (map[int32]int64, error) {
	if !l.cfg.PollDuringCommit || l.isolate != nil || l.drainRequested.Load() {
		return l.commit(ctx, batch, wake, nil)
	}
	done := make(chan commitResult, 1)
	l.ahead.inflight, l.ahead.joined = done, nil
	go func() {
		blocked, err := l.commit(ctx, batch, wake, nil)
		done <- commitResult{blocked, err}
	}()
	if l.ahead.since.IsZero() {
		l.ahead.since = time.Now()
	}
	r := l.prefetch(ctx, done)
	return r.blocked, r.err
}

// prefetch polls until the commit sends its result on done, or a
// rebalance callback took it (joinCommit), and returns that result. It
// stops polling, and waits, once it holds MaxBatchRecords records, or
// when ctx is done or a rebalance failed. The events join Loop.ahead
// once the commit returned: until then the commit's goroutine may read
// it (positions, aheadOffset).
func (l *Loop) prefetch(ctx context.Context, done chan commitResult) commitResult {
	var got []aheadEvent
	records := l.ahead.records
	defer func() {
		l.ahead.events = append(l.ahead.events, got...)
		l.stats.polledDuringCommit.Add(uint64(records - l.ahead.records))
		l.ahead.records = records
	}()
	for {
		if l.ahead.inflight == nil {
			return *l.ahead.joined // a rebalance callback waited for it
		}
		if records >= l.cfg.MaxBatchRecords || ctx.Err() != nil || l.rebalanceErr != nil {
			return l.joinCommit()
		}
		select {
		case r := <-done:
			l.ahead.inflight = nil
			return r
		default:
		}
		ev := l.consumer.Poll(prefetchWait)
		if ev == nil {
			continue
		}
		var owner *step.Task
		switch e := ev.(type) {
		case *kafka.Message:
			owner = l.tasks[e.TopicPartition.Partition]
			records++
		case kafka.PartitionEOF:
			owner = l.tasks[e.Partition]
		}
		got = append(got, aheadEvent{ev: ev, owner: owner})
	}
}

// joinCommit waits for the commit under way, if any, and keeps its result
// for prefetch (Loop.ahead.joined). The rebalance callback calls it
// before it changes the tasks.
func (l *Loop) joinCommit() commitResult {
	if l.ahead.inflight != nil {
		r := <-l.ahead.inflight
		l.ahead.inflight, l.ahead.joined = nil, &r
	}
	if l.ahead.joined == nil {
		return commitResult{}
	}
	return *l.ahead.joined
}

// nextAhead returns the first prefetched event not yet taken, with the
// task that owned its partition when it was polled; ok is false when
// none is left. An event whose partition's task changed since (a
// rewind, a rebalance) is dropped: the consumer delivers that
// partition's records again from where its new task starts.
func (l *Loop) nextAhead() (ev kafka.Event, owner *step.Task, ok bool) {
	for len(l.ahead.events) > 0 {
		a := l.ahead.events[0]
		l.ahead.events[0] = aheadEvent{}
		l.ahead.events = l.ahead.events[1:]
		p, of := int32(0), false
		switch e := a.ev.(type) {
		case *kafka.Message:
			l.ahead.records--
			p, of = e.TopicPartition.Partition, true
		case kafka.PartitionEOF:
			p, of = e.Partition, true
		}
		if of && (a.owner == nil || l.tasks[p] != a.owner) {
			continue
		}
		if len(l.ahead.events) == 0 {
			l.ahead.events = nil // let the backing array go
		}
		return a.ev, a.owner, true
	}
	return nil, nil, false
}

// dropAhead drops the prefetched records and end-of-partition events of
// partitions ps: the loop just sought them back.
func (l *Loop) dropAhead(ps ...int32) {
	if len(l.ahead.events) == 0 {
		return
	}
	drop := map[int32]bool{}
	for _, p := range ps {
		drop[p] = true
	}
	kept := l.ahead.events[:0]
	for _, a := range l.ahead.events {
		switch e := a.ev.(type) {
		case *kafka.Message:
			if drop[e.TopicPartition.Partition] {
				l.ahead.records--
				continue
			}
		case kafka.PartitionEOF:
			if drop[e.Partition] {
				continue
			}
		}
		kept = append(kept, a)
	}
	clear(l.ahead.events[len(kept):])
	l.ahead.events = kept
}

// unreadAhead puts the paused partitions tps back to their first
// prefetched record, if they have one, and drops their prefetched events,
// so that a pause (a watermark alignment group's) holds from the record
// after the last one processed, not after the last one prefetched.
func (l *Loop) unreadAhead(tps []kafka.TopicPartition) error {
	var back []kafka.TopicPartition
	for _, tp := range tps {
		if off, ok := l.aheadOffset(tp.Partition); ok {
			tp.Offset = kafka.Offset(off)
			back = append(back, tp)
		}
	}
	if len(back) == 0 {
		return nil
	}
	sought, err := l.consumer.SeekPartitions(back)
	if err != nil {
		return fmt.Errorf("seek back to the first record polled during the commit: %w", err)
	}
	var drop []int32
	for _, tp := range sought {
		if tp.Error != nil {
			// Kept, and processed: past the pause by what the commit's
			// poll took, never lost.
			l.log.Warn("stage: paused partition not sought back to its first record polled during the commit", "partition", tp.Partition, "err", tp.Error)
			continue
		}
		drop = append(drop, tp.Partition)
		if le, ok := l.head.(step.LogEnds); ok {
			le.Rewound(tp.Partition) // before records its last EOF was past
		}
	}
	l.dropAhead(drop...)
	return nil
}

// aheadOffset is the offset of partition p's first prefetched record
// still to be taken, if any: where its task's next record is when the
// consumer's position is already past it.
func (l *Loop) aheadOffset(p int32) (int64, bool) {
	for _, a := range l.ahead.events {
		if m, ok := a.ev.(*kafka.Message); ok && m.TopicPartition.Partition == p && l.tasks[p] == a.owner {
			return int64(m.TopicPartition.Offset), true
		}
	}
	return 0, false
}

// forgetAhead drops every prefetched event: the clients are reopened.
func (l *Loop) forgetAhead() {
	l.ahead = aheadState{}
}

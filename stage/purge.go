package stage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// This file is what keeps an internal input topic from losing or hoarding
// records (issue 23): the purge of what the stage's commits consumed, and
// the error for a committed offset the broker no longer holds.

// ErrOffsetOutOfRange: a task's next offset on the stage's internal input
// topic is below the partition's log start: records the stage had not
// consumed were deleted (a retention the topic was given by hand, or a
// DeleteRecords that was not the runner's purge) and are lost. The error
// names the topic, the partition, the committed offset and the log start.
// Not retryable: the application's input must be replayed into a new
// application (another --application_id). Internal topics are read with
// auto.offset.reset kafkaclient.InternalOffsetReset ("error"), so the
// consumer stops instead of skipping to the log start (before: it skipped
// with a log line). A task with nothing committed starts at the log start,
// wherever it is: no error. It is kafkaclient.ErrOffsetOutOfRange, which a
// side input's reader returns too (stage/sideinput).
var ErrOffsetOutOfRange = kafkaclient.ErrOffsetOutOfRange

// purgeTimeout bounds one DeleteRecords request of purgeCommitted.
const purgeTimeout = 30 * time.Second

// purgeAnswer is one DeleteRecords request's result: per partition the log
// start offset the broker answered (the low watermark), and the errors.
type purgeAnswer struct {
	low map[int32]int64
	err error
}

// purgeState is purgeCommitted's state, owned by the loop's goroutine.
type purgeState struct {
	// committed[p] is the offset the loop's last committed transaction gave
	// task p (its next record's: every record before it is consumed and
	// its results committed), absent for a task without one since its
	// assignment.
	committed map[int32]int64
	// deleted[p] is the log start of partition p as the last purge
	// answered it.
	deleted map[int32]int64
	// admin is the purge's admin client (nil until first needed);
	// answers carries a request's answer; busy says one is in flight.
	admin   *kafka.AdminClient
	answers chan purgeAnswer
	busy    bool
	// asked is when the last request was sent (or the loop created: the
	// first purge comes one interval after the start); failed when a
	// failure was last logged.
	asked, failed time.Time
}

// noteCommitted records the offsets of a committed transaction for the
// next purge (Config.PurgeInterval > 0).
func (l *Loop) noteCommitted(offs map[int32]int64) {
	if l.cfg.PurgeInterval <= 0 {
		return
	}
	if l.purge.committed == nil {
		l.purge.committed = map[int32]int64{}
	}
	for p, o := range offs {
		l.purge.committed[p] = max(l.purge.committed[p], o)
	}
}

// purgeCommitted (called by the loop before each poll) applies the answer
// of a purge that came since the last call and, once Config.PurgeInterval
// has passed since the last request and none is in flight, deletes the
// records of the stage's input topic below the offsets its commits gave
// its tasks (DeleteRecords up to purgeState.committed, for the partitions
// whose committed offset passed what the last purge deleted): Kafka
// Streams' purge of its repartition topics after commits
// (repartition.purge.interval.ms, KIP-811; default 30 s there and here,
// runner.Options.PurgeInterval). Called each iteration, not only after a
// commit, so the last commits of a stream that stopped are purged too. Only the stage's
// consumer group reads the topic (the runner sets PurgeInterval for such
// topics only), and a committed offset is never taken back, so what is
// deleted is consumed for good: exactly once holds, and a task assigned
// later starts at its committed offset, at or after the new log start.
// The request runs on a goroutine of its own with an admin client of its
// own, off the loop's path (as askLogEnds' do); a failure is logged (at
// most every 30 s) and never fails the stage: the records stay until the
// next purge.
func (l *Loop) purgeCommitted(ctx context.Context) {
	if l.cfg.PurgeInterval <= 0 {
		return
	}
	ps := &l.purge
	if ps.busy {
		select {
		case a := <-ps.answers:
			ps.busy = false
			l.applyPurge(a)
		default:
		}
	}
	if ps.busy || time.Since(ps.asked) < l.cfg.PurgeInterval {
		return
	}
	topic := l.cfg.Spec.InputTopic
	var want []kafka.TopicPartition
	for _, p := range slices.Sorted(maps.Keys(ps.committed)) {
		if o := ps.committed[p]; o > ps.deleted[p] {
			want = append(want, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)})
		}
	}
	if len(want) == 0 {
		return
	}
	if ps.admin == nil {
		cm := kafkaclient.Base(l.cfg.BootstrapServers, l.cfg.Properties)
		a, err := kafka.NewAdminClient(&cm)
		if err != nil {
			l.applyPurge(purgeAnswer{err: fmt.Errorf("admin client: %w", err)})
			ps.asked = time.Now()
			return
		}
		ps.admin = a
		ps.answers = make(chan purgeAnswer, 1)
	}
	ps.asked, ps.busy = time.Now(), true
	admin, answers := ps.admin, ps.answers
	go func() {
		answers <- deleteRecords(ctx, admin, want)
	}()
}

// deleteRecords deletes the records of each partition of want below its
// offset (DeleteRecords, bounded by purgeTimeout) and returns the log
// starts the broker answered, and the errors, each naming its partition.
func deleteRecords(ctx context.Context, admin *kafka.AdminClient, want []kafka.TopicPartition) purgeAnswer {
	dctx, cancel := context.WithTimeout(ctx, purgeTimeout)
	defer cancel()
	res, err := admin.DeleteRecords(dctx, want, kafka.SetAdminRequestTimeout(purgeTimeout))
	if err != nil {
		return purgeAnswer{err: err}
	}
	a := purgeAnswer{low: map[int32]int64{}}
	var errs []error
	for _, r := range res.DeleteRecordsResults {
		tp := r.TopicPartition
		if tp.Error != nil {
			errs = append(errs, fmt.Errorf("partition %d up to offset %d: %w", tp.Partition, tp.Offset, tp.Error))
			continue
		}
		if r.DeletedRecords != nil {
			a.low[tp.Partition] = int64(r.DeletedRecords.LowWatermark)
		}
	}
	a.err = errors.Join(errs...)
	return a
}

// applyPurge keeps a purge's answer (the log starts it reached) and logs
// its failure, at most every 30 s.
func (l *Loop) applyPurge(a purgeAnswer) {
	ps := &l.purge
	if ps.deleted == nil {
		ps.deleted = map[int32]int64{}
	}
	for p, low := range a.low {
		ps.deleted[p] = max(ps.deleted[p], low)
	}
	if len(a.low) > 0 {
		l.log.Debug("stage: purged the input topic's consumed records", "topic", l.cfg.Spec.InputTopic, "log_starts", a.low)
	}
	if a.err != nil && time.Since(ps.failed) >= 30*time.Second {
		ps.failed = time.Now()
		l.log.Warn("stage: purging the input topic's consumed records failed: they stay until the next purge", "topic", l.cfg.Spec.InputTopic, "every", l.cfg.PurgeInterval, "err", a.err)
	}
}

// forgetPurge drops revoked task p from the purge: its next owner purges
// its partition.
func (l *Loop) forgetPurge(p int32) {
	delete(l.purge.committed, p)
	delete(l.purge.deleted, p)
}

// closePurge waits (at most purgeTimeout) for a purge in flight and closes
// its admin client.
func (l *Loop) closePurge() {
	ps := &l.purge
	if ps.admin == nil {
		return
	}
	if ps.busy {
		select {
		case <-ps.answers:
		case <-time.After(purgeTimeout):
			return // left to its goroutine: never closed under it
		}
	}
	ps.admin.Close()
	ps.admin, ps.busy = nil, false
}

// outOfRange returns the error for an offset out of range on the stage's
// internal input topic (the consumer's kafka.ErrAutoOffsetReset under
// kafkaclient.InternalOffsetReset; librdkafka's event names no partition):
// ErrOffsetOutOfRange naming every assigned task whose next offset
// (Loop.next: its committed offset, or its last commit's) is below its
// partition's log start as the broker says it now, with both offsets, and
// librdkafka's text cause.
func (l *Loop) outOfRange(cause error) error {
	topic := l.cfg.Spec.InputTopic
	var lost []string
	for _, p := range slices.Sorted(maps.Keys(l.tasks)) {
		next, ok := l.next[p]
		if !ok {
			continue
		}
		low, _, err := l.consumer.QueryWatermarkOffsets(topic, p, int(partitionCheckTimeout.Milliseconds()))
		if err != nil {
			lost = append(lost, fmt.Sprintf("partition %d at offset %d (its log start could not be read: %v)", p, next, err))
			continue
		}
		if next < low {
			lost = append(lost, fmt.Sprintf("partition %d: committed offset %d is below the log start %d (offsets %d to %d deleted unread)", p, next, low, next, low-1))
		}
	}
	if len(lost) == 0 {
		return fmt.Errorf("%w: stage %s: topic %s: a fetch was out of range and no task's committed offset is below its log start now: %w", ErrOffsetOutOfRange, l.cfg.Spec.Name, topic, cause)
	}
	return fmt.Errorf("%w: stage %s: topic %s: %s: records the stage had not consumed were deleted (retention or DeleteRecords) and are lost; replay the input into a new --application_id (%w)", ErrOffsetOutOfRange, l.cfg.Spec.Name, topic, strings.Join(lost, "; "), cause)
}

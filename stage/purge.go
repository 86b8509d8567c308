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

// deleteRecords is kafkaclient.DeleteRecords of want, bounded by
// purgeTimeout: a partition whose leader refuses connections is not
// asked, and the next purge asks again.
func deleteRecords(ctx context.Context, admin *kafka.AdminClient, want []kafka.TopicPartition) purgeAnswer {
	low, err := kafkaclient.DeleteRecords(ctx, admin, want, purgeTimeout)
	return purgeAnswer{low: low, err: err}
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
// kafkaclient.InternalOffsetReset; librdkafka's event names no partition).
// It judges each assigned task whose next offset (Loop.next: its committed
// offset as this instance last read it, or its last commit's) is below its
// partition's log start as the broker says it now by the group's stable
// committed offset (KIP-447's require_stable: the authority, not this
// instance's view; judgeOutOfRange):
//   - one below the log start: ErrOffsetOutOfRange naming it with both
//     offsets and librdkafka's text cause, not restartable: records no
//     owner consumed were deleted (retention, DeleteRecords), lost;
//   - otherwise the position was stale: another owner took the tasks while
//     this instance could not hear the group (a session timeout: a paused
//     process, a coordinator away), consumed past it and purged the records
//     (the purge deletes only what its owner committed). ErrFenced: the
//     loop restarts its clients and the tasks are restored from what Kafka
//     committed. Before, this failed the instance's job (seen in make soak:
//     "committed offset 3970 is below the log start 3974" on an instance
//     whose tasks were lost 240 ms before, the group at 3974).
//
// Committed offsets that cannot be read are judged stale too (restartable:
// Run's restart bound, 5 in 5 minutes, ends a loop that keeps meeting it).
func (l *Loop) outOfRange(cause error) error {
	topic := l.cfg.Spec.InputTopic
	var parts []rangeCheck
	var tps []kafka.TopicPartition
	var known []int32
	for _, p := range slices.Sorted(maps.Keys(l.tasks)) {
		if _, ok := l.next[p]; ok {
			known = append(known, p)
		}
	}
	// One request, on the loop's own connections (positions' reason).
	var starts map[int32]int64
	admin, err := l.ownAdmin()
	if err == nil && len(known) > 0 {
		starts, err = kafkaclient.LogStarts(context.Background(), admin, topic, known, logStartTimeout)
	}
	for _, p := range known {
		next := l.next[p]
		low, ok := starts[p]
		c := rangeCheck{Partition: p, Next: next, LogStart: low, Committed: -1}
		if !ok {
			c.LogStart, c.Err = -1, err
		} else if next >= low {
			continue
		}
		parts = append(parts, c)
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
	}
	if len(tps) > 0 {
		if got, err := l.committed(l.consumer, tps); err != nil {
			for i := range parts {
				parts[i].Err = errors.Join(parts[i].Err, fmt.Errorf("committed offsets: %w", err))
			}
		} else {
			for _, tp := range got {
				for i := range parts {
					switch {
					case parts[i].Partition != tp.Partition:
					case tp.Error != nil:
						parts[i].Err = errors.Join(parts[i].Err, fmt.Errorf("committed offset: %w", tp.Error))
					default:
						// Nothing committed (OffsetInvalid): the group's
						// first owner reads from offset 0.
						parts[i].Committed = max(int64(tp.Offset), 0)
					}
				}
			}
		}
	}
	lost, stale := judgeOutOfRange(parts)
	if len(lost) > 0 {
		return fmt.Errorf("%w: stage %s: topic %s: %s: records the stage had not consumed were deleted (retention or DeleteRecords) and are lost; replay the input into a new --application_id (%w)", ErrOffsetOutOfRange, l.cfg.Spec.Name, topic, strings.Join(lost, "; "), cause)
	}
	if len(stale) == 0 {
		stale = []string{"no task's offset is below its log start now"}
	}
	l.log.Warn("stage: a fetch was out of range at a position the group has moved past: this instance's tasks moved while it could not hear the group; restarting its clients", "topic", topic, "partitions", strings.Join(stale, "; "), "cause", cause)
	return fmt.Errorf("%w: stage %s: topic %s: a fetch was out of range and the group's committed offsets are not below the log start (%s): this instance's positions were stale (%w)", ErrFenced, l.cfg.Spec.Name, topic, strings.Join(stale, "; "), cause)
}

// rangeCheck is what outOfRange learned of one task's partition: this
// instance's next offset, the log start, the group's stable committed
// offset (0 if the group committed none; -1 until read) and the errors met
// asking (then LogStart or Committed may be unknown, -1).
type rangeCheck struct {
	Partition                 int32
	Next, LogStart, Committed int64
	Err                       error
}

// judgeOutOfRange sorts the partitions of an out-of-range fetch: lost are
// those whose group's committed offset (the authority) is below the log
// start, with the offsets deleted unread; stale the others, which this
// instance saw below the log start but whose committed offset is at or
// past it, or which could not be judged (an error asking: then with the
// error). Pure.
func judgeOutOfRange(parts []rangeCheck) (lost, stale []string) {
	for _, c := range parts {
		switch {
		case c.Err != nil || c.LogStart < 0 || c.Committed < 0:
			stale = append(stale, fmt.Sprintf("partition %d at offset %d: not judged: %v", c.Partition, c.Next, c.Err))
		case c.Committed < c.LogStart:
			lost = append(lost, fmt.Sprintf("partition %d: committed offset %d is below the log start %d (offsets %d to %d deleted unread)", c.Partition, c.Committed, c.LogStart, c.Committed, c.LogStart-1))
		default:
			stale = append(stale, fmt.Sprintf("partition %d: this instance at %d, the group committed %d, log start %d", c.Partition, c.Next, c.Committed, c.LogStart))
		}
	}
	return lost, stale
}

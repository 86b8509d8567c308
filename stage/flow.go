package stage

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// This file is flow control: what the loop reads and when it commits.
// The poll (commit interval, batch bound, an input's end, a head that
// owes work), the head's watermark alignment (pause and resume), the
// tasks woken without records, and a drain.

// Drain asks the loop to drain (Beam's drain; see Drainer): at its next
// iteration it calls the head's Drain, and polls no more records if the
// head says so. Safe from any goroutine; later calls do nothing more.
func (l *Loop) Drain() { l.drainRequested.Store(true) }

// applyDrain carries out a requested drain once, on the loop's goroutine.
func (l *Loop) applyDrain() {
	if !l.drainRequested.Load() || l.drained {
		return
	}
	l.drained = true
	if d, ok := l.head.(step.Drainer); ok {
		l.stopReading = d.Drain()
		l.log.Info("stage: draining", "stop_reading", l.stopReading)
	}
}

// poll collects records for at most CommitInterval or MaxBatchRecords,
// or until the batch holds a record that ends an input (endsInput) and
// the records the consumer already has queued are in the batch too: the
// end of an input is what the stages downstream wait for, and waiting out
// the interval with nothing more to come cost every stage of a bounded
// job a commit interval at its end (7 stages, 0.1 s each). Records of
// partitions revoked meanwhile are dropped. While the loop looks for the
// input record that made a record too large (a batch is one record) or
// fails its bundle (half the failed batch, halved at each failure:
// Loop.isolate, isolateMost).
func (l *Loop) poll(ctx context.Context) ([]*kafka.Message, error) {
	if l.rebalanceErr != nil {
		// Failed during the last commit's poll (prefetch.go): its
		// deadline may be past, so no Poll below would notice.
		return nil, l.rebalanceErr
	}
	if err := l.resumeHeld(); err != nil {
		return nil, err
	}
	l.trace.polling()
	l.startCrossing()
	deadline := time.Now().Add(l.cfg.CommitInterval)
	if !l.ahead.since.IsZero() {
		// Polled during the last commit (prefetch.go): the interval began
		// with it.
		deadline = l.ahead.since.Add(l.cfg.CommitInterval)
		l.ahead.since = time.Time{}
	}
	if o, ok := l.head.(step.Owing); ok && o.Owes() {
		// The next attempt is due now: take only what is fetched already.
		deadline = time.Now().Add(time.Millisecond)
	}
	var batch []*kafka.Message
	// owners[i] is the task that owned batch[i]'s partition when it was
	// polled. A partition revoked and assigned again during the poll has a
	// new task and a position back at its committed offset: its records
	// polled before are stale and would be processed twice.
	var owners []*step.Task
	// ending: the batch holds a record that ends an input; the poll takes
	// what is queued (Poll without waiting) and stops at the first empty
	// answer.
	ending := false
	most := l.cfg.MaxBatchRecords
	if l.isolate != nil {
		// Finding the record that made one too large (tooLargeFound) or
		// fails (bundleFailed).
		most = max(1, min(l.isolateMost, most))
	}
	for len(batch) < most && ctx.Err() == nil {
		// The events polled during the last commit first (prefetch.go),
		// past the deadline too: they are the consumer's next ones.
		ev, owner, ahead := l.nextAhead()
		if !ahead {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			wait := int(left.Milliseconds()) + 1
			if ending {
				wait = 0
			}
			ev = l.consumer.Poll(wait)
		}
		switch e := ev.(type) {
		case nil:
			if ending {
				deadline = time.Now()
			}
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				if ke, ok := e.TopicPartition.Error.(kafka.Error); ok && ke.Code() == kafka.ErrAutoOffsetReset {
					return nil, l.outOfRange(ke)
				}
				l.log.Warn("stage: consume error", "err", e.TopicPartition.Error)
				continue
			}
			if len(batch) == 0 {
				l.stats.firstRecord.CompareAndSwap(0, time.Now().UnixNano())
			}
			l.traceRecord(e.Value)
			if !ahead {
				owner = l.tasks[e.TopicPartition.Partition]
			}
			batch = append(batch, e)
			owners = append(owners, owner)
			ending = ending || l.endsInput(e) || l.makesDue(e) || l.crossesWindowEnd(e)
		case kafka.PartitionEOF:
			if l.tasks[e.Partition] != nil {
				l.head.ReachedEnd(e.Partition, int64(e.Offset))
			}
		case kafka.Error:
			if e.Code() == kafka.ErrAutoOffsetReset {
				// Only under kafkaclient.InternalOffsetReset: an internal
				// topic's records deleted before they were consumed.
				return nil, l.outOfRange(e)
			}
			if e.IsFatal() {
				l.cbMu.Lock()
				l.consumerFatal = true
				l.cbMu.Unlock()
				return nil, fmt.Errorf("stage %s: consumer: %w", l.cfg.Spec.Name, e)
			}
			l.log.Warn("stage: consumer error", "err", e)
		case *kafka.Stats:
			if r, ok := l.head.(step.Reachability); ok {
				if up, err := PartitionsReachable(e.String(), l.cfg.Spec.InputTopic); err == nil {
					for p, ok := range up {
						if l.tasks[p] != nil {
							r.SetReachable(p, ok)
						}
					}
				}
			}
			if lag, err := ConsumerLag(e.String(), l.cfg.Spec.InputTopic); err == nil {
				for p, n := range lag {
					if l.tasks[p] != nil {
						l.status.update(p, func(s *TaskStatus) { s.LagRecords = n })
					}
				}
			}
		}
		if l.rebalanceErr != nil {
			return nil, l.rebalanceErr
		}
	}
	kept := batch[:0]
	for i, m := range batch {
		p := m.TopicPartition.Partition
		if t := l.tasks[p]; t != nil && t == owners[i] {
			kept = append(kept, m)
			if _, ok := l.next[p]; !ok {
				// Nothing committed: the task began at its first record
				// (where a rewind seeks it back to).
				if l.next == nil {
					l.next = map[int32]int64{}
				}
				l.next[p] = int64(m.TopicPartition.Offset)
			}
		}
	}
	return kept, nil
}

// leaveUnread drops batch, polled after the drain stopped reading: its
// records stay unprocessed and uncommitted (a rerun of the application,
// the new version of a drained job, reads them; Beam's drain processes no
// record read after it). A woken task commits Loop.next, which poll set
// to its first record if it had nothing committed: not past them.
func (l *Loop) leaveUnread(batch []*kafka.Message) {
	l.log.Info("stage: draining: records left unread", "records", len(batch))
}

// endsInput reports whether an input record of this stage ends an input
// of one of its tasks, so that poll commits it without waiting out the
// commit interval: any record of a head that says every record does
// (step.EndsInput: an Impulse stage, whose impulse record is the only
// record its input topic ever holds), or, on an internal topic, a batch of
// watermark reports one of which is at the end of time (an upstream task
// is done; reportsEndOfTime). A task reports only a watermark that moved
// (Step: out' > out), so each upstream task reports the end of time once
// (again after its partition moves to another instance): a long-running
// job commits early a bounded number of times, and the commit interval
// still paces its steady flow. Records of users' topics (Spec.RawInput)
// never end an input here, nor do reports the application's runner did
// not write (envelope.FromApplication; the step skips them).
func (l *Loop) endsInput(m *kafka.Message) bool {
	if e, ok := l.head.(step.EndsInput); ok && e.EveryRecordEndsInput() {
		return true
	}
	return !l.cfg.Spec.RawInput && reportsEndOfTime(m.Value) && envelope.FromApplication(m.Headers, l.cfg.Spec.ApplicationID)
}

// makesDue reports whether m, a polled record of task p, is an Envelope
// of watermark reports of the application's runner one of which is at or
// past the input watermark at which the head has work due for p
// (step.Due: a GroupByKey's next window end), so that poll commits it
// without waiting out the commit interval: the pane fires when the
// watermark that makes it due arrives. It is a necessary condition, not a
// sufficient one: p's input watermark is the minimum over its upstream
// partitions, and a report of one of them past the due time may leave
// another behind; such a poll ends early for a commit that fires nothing,
// at most once per upstream transaction reporting past it (each upstream
// instance's transactions come at most every commit interval while it
// keeps up). Element records are told apart without decoding their
// element (envelope.Decode's fast path); reports are decoded once more
// in the step.
func (l *Loop) makesDue(m *kafka.Message) bool {
	d, ok := l.head.(step.Due)
	if !ok || l.cfg.Spec.RawInput {
		return false
	}
	e, rs, err := envelope.Decode(m.Value)
	if err != nil || e != nil || len(rs) == 0 || !envelope.FromApplication(m.Headers, l.cfg.Spec.ApplicationID) {
		return false
	}
	due, ok := d.NextDue(m.TopicPartition.Partition)
	if !ok {
		return false
	}
	for _, r := range rs {
		if r.Core().CommittedWatermark >= due {
			return true
		}
	}
	return false
}

// align pauses the partitions the head asks to pause (Head.Pause) and
// resumes those it no longer lists.
func (l *Loop) align() error {
	want := map[int32]bool{}
	for _, p := range l.head.Pause() {
		if l.tasks[p] != nil {
			want[p] = true
		}
	}
	topic := l.cfg.Spec.InputTopic
	var pause, resume []kafka.TopicPartition
	for p := range want {
		if !l.aligned[p] {
			pause = append(pause, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	for p := range l.aligned {
		if !want[p] && l.tasks[p] != nil {
			resume = append(resume, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	if len(pause) > 0 {
		if err := l.consumer.Pause(pause); err != nil {
			return fmt.Errorf("stage %s: pause partitions ahead of their alignment group: %w", l.cfg.Spec.Name, err)
		}
		// Not read past the pause: records polled during the last
		// commit (prefetch.go) are read again after the resume.
		if err := l.unreadAhead(pause); err != nil {
			return fmt.Errorf("stage %s: pause partitions ahead of their alignment group: %w", l.cfg.Spec.Name, err)
		}
		l.log.Info("stage: paused partitions ahead of their watermark alignment group", "partitions", partitionsOf(pause))
	}
	if len(resume) > 0 {
		if err := l.consumer.Resume(resume); err != nil {
			return fmt.Errorf("stage %s: resume aligned partitions: %w", l.cfg.Spec.Name, err)
		}
		l.log.Info("stage: resumed partitions back within their watermark alignment group", "partitions", partitionsOf(resume))
	}
	for p := range l.tasks {
		paused := want[p]
		l.status.update(p, func(s *TaskStatus) { s.Paused = paused })
	}
	l.aligned = want
	return nil
}

// wakeTasks are the assigned tasks the head wants an attempt for
// (Head.Wake: due processing-time timers) that have no record in batch,
// and every assigned task once after the partition count grew.
func (l *Loop) wakeTasks(batch []*kafka.Message) []int32 {
	var out []int32
	wants := l.head.Wake()
	if l.reportAll {
		l.reportAll = false
		wants = wants[:0:0]
		for p, t := range l.tasks {
			t.ReportAgain() // report the new total even if nothing moved
			wants = append(wants, p)
		}
	}
	for _, p := range wants {
		if l.tasks[p] == nil {
			continue
		}
		in := false
		for _, m := range batch {
			if m.TopicPartition.Partition == p {
				in = true
				break
			}
		}
		if !in {
			out = append(out, p)
		}
	}
	return out
}

// positions returns the offset of the next record to process of each of
// tasks ps (Loop.next: its committed offset, or its last commit's; for a
// task with neither, the log start, where auto.offset.reset=earliest
// starts it; with "latest" or a start time, the consumer's position once
// it fetched, else the task waits): a woken task commits it again with its
// new checkpoint. Not the consumer's position where the loop knows
// better: that counts the records the loop dropped unprocessed (a drain's,
// a reassigned task's stale ones), and committing it skipped them for
// good.
func (l *Loop) positions(ctx context.Context, ps []int32) (map[int32]int64, error) {
	out := map[int32]int64{}
	topic := l.cfg.Spec.InputTopic
	var fromStart []int32
	for _, p := range ps {
		if off, ok := l.next[p]; ok {
			out[p] = off
			continue
		}
		if off, ok := l.aheadOffset(p); ok {
			// Its first record was polled during the last commit
			// (prefetch.go): the consumer's position is past it.
			out[p] = off
			continue
		}
		if l.cfg.Consumer["auto.offset.reset"] == "latest" || !l.cfg.StartAt.IsZero() {
			// Where the consumer started is known once it fetched: its
			// position; before, the task waits for its first record.
			tps := []kafka.TopicPartition{{Topic: &topic, Partition: p}}
			pos, err := l.consumer.Position(tps)
			if err != nil {
				return nil, fmt.Errorf("stage %s: task %d: position for due work: %w", l.cfg.Spec.Name, p, err)
			}
			if len(pos) == 1 && pos[0].Offset >= 0 {
				out[p] = int64(pos[0].Offset)
			}
			continue
		}
		fromStart = append(fromStart, p)
	}
	if len(fromStart) == 0 {
		return out, nil
	}
	// One request for them all, on connections of the loop's own, not the
	// consumer's: there it waited behind the consumer's fetch, up to
	// fetch.wait.max.ms (or a quota's throttle) per task.
	admin, err := l.ownAdmin()
	if err != nil {
		return nil, err
	}
	starts, err := kafkaclient.LogStarts(ctx, admin, topic, fromStart, logStartTimeout)
	if err != nil {
		return nil, fmt.Errorf("stage %s: tasks %v: log start offsets for due work: %w", l.cfg.Spec.Name, fromStart, err)
	}
	maps.Copy(out, starts)
	return out, nil
}

// logStartTimeout bounds one ListOffsets of positions and outOfRange.
const logStartTimeout = 10 * time.Second

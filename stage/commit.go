package stage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// This file is the commit: one attempt decided by the step (step.Step)
// and carried out in one Kafka transaction, its abort, and the records'
// way to the producer.

// commit decides the attempt (Step.Decide: the head and the bundles, no
// Kafka) and carries out its Ready in one transaction: the records, the
// head's state (Ready.State), the offsets with the tasks' checkpoints;
// once the transaction committed, Step.Advance acknowledges the Ready. On
// an error the transaction is aborted, the head's changes dropped
// (Step.Abort) and the error returned; the caller rewinds. It returns the
// tasks side inputs hold back. With dead set, batch is one record set
// aside (step.In.Skip: poison.go's deadLetter) and dead its dead letter,
// produced in the same transaction.
func (l *Loop) commit(ctx context.Context, batch []*kafka.Message, wake []int32, dead *step.Record) (blocked map[int32]int64, err error) {
	ins, touched := inputs(batch)
	if dead != nil {
		ins[0].Skip = true
	}
	began := time.Now()
	for p := range touched {
		l.status.update(p, func(s *TaskStatus) { s.AttemptSince = began })
	}
	// touched grows by the woken tasks below: the deferred calls see them.
	defer func() {
		for p := range touched {
			if l.tasks[p] != nil {
				l.status.update(p, func(s *TaskStatus) { s.AttemptSince = time.Time{} })
			}
		}
	}()
	l.woken = nil
	if len(wake) > 0 {
		if l.woken, err = l.positions(ctx, wake); err != nil {
			return nil, err
		}
		for p := range l.woken {
			touched[p] = true
		}
	}
	inTxn := false
	var decided time.Time
	produced := 0 // the attempt's records, for txnOutlived
	defer func() {
		if err != nil {
			if herr := l.core.Abort(slices.Sorted(maps.Keys(touched))); herr != nil {
				err = errors.Join(err, herr)
			}
			if inTxn {
				err = l.abort(ctx, err)
				// The broker aborts a transaction open past its timeout
				// (txntimeout.go): whatever error the producer met then.
				if o := l.outlivedBy(decided, time.Now(), produced, err); o != nil && ctx.Err() == nil {
					err = o
				}
			}
		}
	}()
	if l.spilled != nil {
		if err := l.spilled.reset(); err != nil {
			return nil, fmt.Errorf("stage %s: %w", l.cfg.Spec.Name, err)
		}
	}
	r, err := l.decide(ctx, ins)
	if err != nil {
		return nil, err
	}
	if r.Empty() {
		return r.Blocked, nil // nothing to commit
	}
	decided, produced = time.Now(), r.Spilled+len(r.Records)
	if err := l.producer.BeginTransaction(); err != nil {
		return nil, l.classify("begin transaction", err)
	}
	inTxn = true
	if err := l.produceReady(r, len(batch), touched, dead); err != nil {
		return nil, err
	}
	if err := l.commitTransaction(ctx, r.Offsets); err != nil {
		return nil, err
	}
	inTxn = false
	if l.next == nil {
		l.next = map[int32]int64{}
	}
	committed := make(map[int32]int64, len(r.Offsets))
	for _, o := range r.Offsets {
		l.next[o.Task] = o.Next
		committed[o.Task] = o.Next
	}
	l.noteCommitted(committed)
	if err := l.core.Advance(r); err != nil {
		// The transaction is durable in Kafka; the local store can be
		// restored from the changelog. Stop: the task state is suspect.
		return nil, fmt.Errorf("%w: %w", ErrLocalState, err)
	}
	l.countCommit(r, len(batch), dead != nil, touched, began, decided)
	return r.Blocked, nil
}

// decide is the attempt's Step.Decide, with the side gate armed before
// it: the channel the tasks it holds back wait on (sideGate.arm) is the
// side inputs' Changed as of before their readiness checks, so a side
// input that changes after a check wakes them (issue 24: no lost
// wake-ups).
func (l *Loop) decide(ctx context.Context, ins []step.In) (*step.Ready, error) {
	l.side.arm(l.cfg.SideInputs)
	return l.core.Decide(ctx, l.tasks, ins, l.woken)
}

// noTimestamp is step.In's Timestamp of a record without one (Kafka's
// NO_TIMESTAMP, -1; confluent-kafka-go's TimestampNotAvailable).
const noTimestamp = -1

// inputs turns a polled batch into the step's records, and returns the
// tasks (input partitions) it holds.
func inputs(batch []*kafka.Message) ([]step.In, map[int32]bool) {
	ins := make([]step.In, len(batch))
	touched := map[int32]bool{}
	for i, m := range batch {
		ins[i] = step.In{Task: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset), Key: m.Key, Value: m.Value}
		if m.TimestampType != kafka.TimestampNotAvailable {
			ins[i].Timestamp = m.Timestamp.UnixMilli()
			ins[i].LogAppendTime = m.TimestampType == kafka.TimestampLogAppendTime
		} else {
			ins[i].Timestamp = noTimestamp
		}
		for _, h := range m.Headers {
			ins[i].Headers = append(ins[i].Headers, step.Header{Key: h.Key, Value: h.Value})
		}
		touched[m.TopicPartition.Partition] = true
	}
	return ins, touched
}

// produceReady produces r's records into the open transaction, in Ready's
// order: the spilled records, Records, the dead letter if any (dead),
// Config.CommitRecords' records (the runner's metrics of the transaction:
// recordsIn input records, the tasks touched), then the head's state
// (Ready.State).
func (l *Loop) produceReady(r *step.Ready, recordsIn int, touched map[int32]bool, dead *step.Record) error {
	if r.Spilled > 0 {
		if err := l.spilled.replay(l.produceRecord); err != nil {
			return err
		}
	}
	for i := range r.Records {
		if err := l.produceRecord(&r.Records[i]); err != nil {
			return err
		}
	}
	if dead != nil {
		if err := l.produceRecord(dead); err != nil {
			return err
		}
	}
	if f := l.cfg.CommitRecords; f != nil {
		extra := f(TxnSummary{RecordsIn: uint64(recordsIn), DeadLetters: dead1(dead), ElementsIn: r.ElementsIn, ElementsOut: r.ElementsOut, Bundles: r.Bundles, AbortsBefore: l.abortsUncommitted, Tasks: slices.Sorted(maps.Keys(touched))})
		for i := range extra {
			if err := l.produceRecord(&extra[i]); err != nil {
				return err
			}
		}
	}
	for i := range r.State {
		if err := l.produceRecord(&r.State[i]); err != nil {
			return err
		}
	}
	return nil
}

// commitTransaction sends the tasks' offsets (with their checkpoints as
// metadata) and the consumer group's metadata (KIP-447: fenced by the
// group generation) to the open transaction and commits it, each call
// bounded by txnCallTimeout (callWithin).
func (l *Loop) commitTransaction(ctx context.Context, offs []step.Offset) error {
	topic := l.cfg.Spec.InputTopic
	offsets := make([]kafka.TopicPartition, len(offs))
	for i, o := range offs {
		md := o.Metadata
		offsets[i] = kafka.TopicPartition{Topic: &topic, Partition: o.Task, Offset: kafka.Offset(o.Next), Metadata: &md}
	}
	gm, err := l.consumer.GetConsumerGroupMetadata()
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, txnCallTimeout)
	defer cancel()
	if err := l.callWithin("send offsets", func() error { return l.producer.SendOffsetsToTransaction(tctx, offsets, gm) }); err != nil {
		if l.abandoned {
			return l.classify("send offsets", err)
		}
		if tl := l.refusedForSize(tctx, offsets, gm); tl != nil {
			return tl
		}
		return l.classify("send offsets", err)
	}
	err = l.callWithin("commit", func() error { return l.producer.CommitTransaction(tctx) })
	for retry := 1; retriable(err) && tctx.Err() == nil && l.checkTopics() == nil; retry++ {
		// librdkafka: a retriable commit error is retried by calling
		// CommitTransaction again.
		l.log.Warn("stage: commit: retrying", "retry", retry, "err", err)
		select {
		case <-tctx.Done():
		case <-time.After(min(time.Duration(retry)*100*time.Millisecond, time.Second)):
		}
		err = l.callWithin("commit", func() error { return l.producer.CommitTransaction(tctx) })
	}
	if err == nil {
		return nil
	}
	if tl := commitTooLarge(err); tl != err {
		return tl // it did not commit: the broker refused a record
	}
	if !errors.Is(l.classify("commit", err), ErrFenced) && !txnRequiresAbort(err) {
		// The transaction may have committed (a timeout, a coordinator
		// that went away after writing the commit): the abort and rewind
		// that follow would drop head state the changelog has. Logged
		// (issue 22's note: whether to restart the clients instead is
		// left for a test that can make this happen).
		l.log.Warn("stage: commit failed with its outcome unknown; aborting and rewinding", "err", err)
	}
	return l.classify("commit", err)
}

// retriable reports whether err is a kafka.Error librdkafka says to retry.
func retriable(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.IsRetriable()
}

// txnRequiresAbort reports whether err is a kafka.Error after which the
// transaction is to be aborted (librdkafka: it did not commit).
func txnRequiresAbort(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.TxnRequiresAbort()
}

// dead1 is 1 with a dead letter, else 0.
func dead1(dead *step.Record) uint64 {
	if dead != nil {
		return 1
	}
	return 0
}

// countCommit counts a committed transaction: the loop's Stats, the
// touched tasks' status, Config.Observer.Committed (the attempt took from
// began to decided, its transaction from decided to now); dead says it
// carried a dead letter (Stats.DeadLetters).
func (l *Loop) countCommit(r *step.Ready, recordsIn int, dead bool, touched map[int32]bool, began, decided time.Time) {
	l.stats.commits.Add(1)
	var deadLetters uint64
	if dead {
		deadLetters = 1
		l.stats.deadLetters.Add(1)
	}
	l.abortsUncommitted = 0
	end := time.Now()
	for p := range touched {
		if l.tasks[p] != nil {
			l.status.update(p, func(s *TaskStatus) {
				if s.LastCommit.IsZero() {
					// Once per assignment of the task: the time from
					// assignment (restore included) to its first commit
					// here, a moved task's handover time.
					l.log.Info("stage: first commit of an assigned task", "task", p, "since_assigned", end.Sub(s.AssignedAt).Round(time.Millisecond))
				}
				s.LastCommit = end
			})
		}
	}
	if f := l.cfg.Observer.Committed; f != nil {
		f(CommitObservation{Process: decided.Sub(began), Commit: end.Sub(decided), Stats: Stats{RecordsIn: uint64(recordsIn), ElementsIn: r.ElementsIn, ElementsOut: r.ElementsOut, Bundles: r.Bundles, Commits: 1, DeadLetters: deadLetters}})
	}
	now := end.UnixNano()
	l.stats.firstCommit.CompareAndSwap(0, now)
	l.stats.lastCommit.Store(now)
	l.stats.recordsIn.Add(uint64(recordsIn))
	l.stats.elementsIn.Add(r.ElementsIn)
	if out := l.stats.elementsOut.Add(r.ElementsOut); r.ElementsOut > 0 && out == r.ElementsOut {
		// Once per loop: when this instance's share of the stage first
		// gave output (tests wait for it before killing an instance).
		l.log.Info("stage: first output committed", "elements_out", r.ElementsOut, "commits", l.stats.commits.Load())
	}
	l.stats.reportsOut.Add(r.ReportsOut)
	l.countUntrusted(r.Untrusted)
	if r.TimestampsAhead > 0 && l.stats.timestampsAhead.Add(r.TimestampsAhead) == r.TimestampsAhead {
		// Once per loop: the first such records.
		l.log.Warn("stage: sink records whose event time is further ahead of the clock than their topic takes as a timestamp (message.timestamp.after.max.ms; or the end of the global window) are written with the time of writing", "records", r.TimestampsAhead)
	}
	l.stats.bundles.Add(r.Bundles)
	if l.trace.on {
		ps := make([]int32, len(r.Offsets))
		for i, o := range r.Offsets {
			ps[i] = o.Task
		}
		l.traceCommit(began, decided, end, recordsIn, r.ElementsOut, len(r.State), ps)
	}
}

// spill is the step's StepConfig.Spill: it writes records to the
// attempt's spill file on local disk, which the transaction replays, in
// order, before the Ready's records (commit). So an attempt whose output
// is larger than memory (a file read in one bundle, every window of a job
// firing at its end) is never held whole, and its transaction stays as
// short as producing it: the bundle runs before the transaction opens, as
// without a spill, well within transaction.timeout.ms.
func (l *Loop) spill(records []step.Record) error {
	if l.spilled == nil {
		l.spilled = &spillFile{dir: l.cfg.SpillDir}
	}
	return l.spilled.add(records)
}

func (l *Loop) produceRecord(r *step.Record) error {
	topic := l.topicNames[r.Topic]
	if topic == nil {
		t := r.Topic
		topic = &t
		if l.topicNames == nil {
			l.topicNames = map[string]*string{}
		}
		l.topicNames[t] = topic
	}
	if err := l.checkSize(*topic, r.Key, r.Value); err != nil {
		return err
	}
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: topic, Partition: r.Partition}, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: kafkaclient.Headers(r.Headers)}
	// A queue held by records of a deleted topic never drains (checkTopics).
	var gone error
	err := kafkaclient.Produce(l.producer, m, nil, func() error { gone = l.checkTopics(); return gone })
	if gone != nil {
		return gone
	}
	if err := produceTooLarge(err, *topic, r.Key, r.Value); err != nil {
		var tl *tooLarge
		if errors.As(err, &tl) {
			return err
		}
		// A fenced producer's refusal is ErrFenced now, not after an
		// abort the producer cannot make.
		return l.classify("produce to "+*topic, err)
	}
	return nil
}

// classify turns a fatal or fenced producer's error (kafkaclient.IsFenced)
// into ErrFenced.
func (l *Loop) classify(what string, err error) error {
	if kafkaclient.IsFenced(err) {
		return fmt.Errorf("%w: stage %s: %s: %w", ErrFenced, l.cfg.Spec.Name, what, err)
	}
	return fmt.Errorf("stage %s: %s: %w", l.cfg.Spec.Name, what, err)
}

// abort aborts the open transaction and returns cause (or ErrFenced if the
// abort itself says the producer is fenced).
func (l *Loop) abort(ctx context.Context, cause error) error {
	if errors.Is(cause, ErrFenced) || l.abandoned {
		// An abandoned producer's call is still under way: an abort
		// would wait for it (the broker aborts the transaction).
		return cause
	}
	tctx, cancel := context.WithTimeout(ctx, txnCallTimeout)
	defer cancel()
	if err := l.producer.AbortTransaction(tctx); err != nil {
		return errors.Join(cause, l.classify("abort", err))
	}
	return cause
}

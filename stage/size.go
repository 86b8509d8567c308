package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// This file is what the loop does with a record too large for its topic
// (issue 23): refused before it is produced where the topic's limit is
// known (Config.MaxMessageBytes), by librdkafka's message.max.bytes, or by
// the broker; the stage then finds the input record it was made from,
// taking the attempt's input records one at a time, and fails once.

// ErrRecordTooLarge: a record the stage made is larger than its topic
// takes (its max.message.bytes, or the producer's message.max.bytes). The
// error names the record's topic, size and limit where known, and the
// input record it was made from: its input topic, partition and offset.
// Not retryable: the same input makes the same record again, so Run
// returns it at once, without restarting the clients; another instance
// given the task fails the same way until the topic's limit is raised or
// the pipeline changed.
var ErrRecordTooLarge = errors.New("stage: record too large for its topic")

// tooLarge is the error of an attempt that made a record too large for
// its topic; the loop adds the input record it came from
// (Loop.tooLargeFound).
type tooLarge struct {
	// what says which record and which limit, in words.
	what string
	// err is the Kafka client's error, if the client or the broker
	// refused the record (nil: the loop's own check).
	err error
}

func (e *tooLarge) Error() string {
	if e.err != nil {
		return e.what + ": " + e.err.Error()
	}
	return e.what
}

// checkSize returns a *tooLarge if the record (key, value) for topic is
// larger, as a batch of its own (kafkaclient.BatchOfOneBytes), than the
// topic's max.message.bytes as Config.MaxMessageBytes says it; nil if it
// fits, if the limit is unknown, or if the producer compresses (a
// compressed batch may fit where the record alone does not).
func (l *Loop) checkSize(topic string, key, value []byte) error {
	if len(key)+len(value)+batchOverhead <= l.fitsAll || l.compresses {
		return nil // every record the runner writes: no map lookup
	}
	limit := l.cfg.MaxMessageBytes[topic]
	if limit <= 0 {
		return nil
	}
	if n := kafkaclient.BatchOfOneBytes(len(key), len(value), nil); n > limit {
		return &tooLarge{what: fmt.Sprintf("a record of %d bytes (key %d, value %d) for topic %s is larger than the topic's max.message.bytes %d", n, len(key), len(value), topic, limit)}
	}
	return nil
}

// batchOverhead bounds what a batch of one record without headers adds
// to its key and value (kafkaclient.BatchOfOneBytes: 61 bytes of header,
// at most 5 bytes for each of the record's length, key length and value
// length, 4 more): a record whose key and value are at most
// Loop.fitsAll − batchOverhead bytes fits every topic of
// Config.MaxMessageBytes.
const batchOverhead = 61 + 5 + 3 + 5 + 5 + 1

// fitsAll is the smallest limit of limits (0 if none is positive).
func fitsAll(limits map[string]int) int {
	m := 0
	for _, n := range limits {
		if n > 0 && (m == 0 || n < m) {
			m = n
		}
	}
	return m
}

// produceTooLarge turns librdkafka's refusal of a record for its size
// (kafka.ErrMsgSizeTooLarge from Produce: its key and value exceed the
// producer's message.max.bytes) into a *tooLarge; any other error is
// returned as it is.
func produceTooLarge(err error, topic string, key, value []byte) error {
	if err == nil {
		// Every record comes here: no kafka.Error escaping to the heap
		// for errors.As (0.3% of a 3 M-record windowed sum's CPU).
		return nil
	}
	var ke kafka.Error
	if errors.As(err, &ke) && ke.Code() == kafka.ErrMsgSizeTooLarge {
		return &tooLarge{what: fmt.Sprintf("a record of %d bytes (key %d, value %d) for topic %s is larger than the producer's message.max.bytes (kafkaclient.ProducerMessageMaxBytes, or --kafka_property message.max.bytes if larger)", len(key)+len(value), len(key), len(value), topic), err: err}
	}
	return err
}

// commitTooLarge turns a commit error that says the broker refused a
// record or a batch for its size (MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE: the transaction failed to deliver it) into a
// *tooLarge; any other error is returned as it is.
func commitTooLarge(err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.Code() == kafka.ErrMsgSizeTooLarge || ke.Code() == kafka.ErrRecordListTooLarge) {
		return &tooLarge{what: "the broker refused a batch of the attempt's records as larger than its topic's max.message.bytes (a record too large, or records librdkafka batched together up to batch.size: set --kafka_property batch.size at most the topic's limit)", err: err}
	}
	return err
}

// tooLargeFound handles an attempt that failed with a *tooLarge (aborted
// already): with one input record in batch, that record is the one it
// came from, and the stage's error (ErrRecordTooLarge) names it;
// returned with done true. With several, the batch is rewound and its
// records are taken one at a time (Loop.isolate, poll) until the record
// is made again alone (or the batch is passed): done false, err the
// rewind's.
func (l *Loop) tooLargeFound(tl *tooLarge, batch []*kafka.Message, wake []int32) (done bool, err error) {
	timers := ""
	if len(wake) > 0 {
		timers = fmt.Sprintf(" (or from a timer of task %v, due in the same attempt)", wake)
	}
	switch len(batch) {
	case 0:
		return true, fmt.Errorf("%w: stage %s: %s: made by the timers of task %v (no input record in the attempt)", ErrRecordTooLarge, l.cfg.Spec.Name, tl.what, wake)
	case 1:
		m := batch[0]
		what := "the record"
		if !l.cfg.Spec.RawInput && isReports(m.Value) {
			// A GroupByKey's pane (or a timer) the upstream watermark
			// made due: a pane holds every value of its key and window,
			// so it can be larger than any record the stage read.
			what = "the watermark reports (a pane or a timer they made due)"
		}
		return true, fmt.Errorf("%w: stage %s: %s: made from %s at input topic %s, partition %d, offset %d%s",
			ErrRecordTooLarge, l.cfg.Spec.Name, tl.Error(), what, l.cfg.Spec.InputTopic, m.TopicPartition.Partition, int64(m.TopicPartition.Offset), timers)
	}
	l.isolateBatch(batch)
	l.isolateMost = 1
	l.stats.aborts.Add(1)
	l.abortsUncommitted++
	if f := l.cfg.Observer.Aborted; f != nil {
		f()
	}
	l.log.Warn("stage: transaction aborted, rewinding: a record is too large for its topic; the attempt's input records are taken one at a time to find the one it was made from", "records", len(batch), "err", tl)
	return false, l.rewind(batch)
}

// isolated forgets the partitions Loop.isolate holds whose records are
// all past (the task's next offset beyond the failed batch's last) or no
// longer this loop's, after a committed attempt.
func (l *Loop) isolated() {
	for p, last := range l.isolate {
		if n, ok := l.next[p]; l.tasks[p] == nil || ok && n > last {
			delete(l.isolate, p)
		}
	}
	if l.isolate != nil && len(l.isolate) == 0 {
		l.isolate, l.isolateMost = nil, 0
		l.log.Info("stage: the records of the failed attempt were taken in smaller attempts past its last one: reading on in batches")
	}
}

// refusedForSize is called when SendOffsetsToTransaction failed: it
// returns a *tooLarge if the broker refused a record of the transaction
// for its size, else nil. The refusal arrives with the record's delivery,
// in the background: when it lands while the offsets are being sent,
// librdkafka fails that call with a state error (ERR__STATE, "Erroneous
// state") that does not say why (TestRecordSizeSinkLimitLoweredFailsOnce
// saw it). So it waits for the outstanding deliveries (kafkaclient.Drain, bounded by
// ctx) and sends the offsets again: in a transaction a failed delivery
// made abortable, librdkafka answers with that delivery's error
// (MSG_SIZE_TOO_LARGE); otherwise the offsets are sent again into a
// transaction that is aborted anyway. Failure paths only: a commit that
// goes well never waits here.
func (l *Loop) refusedForSize(ctx context.Context, offsets []kafka.TopicPartition, gm *kafka.ConsumerGroupMetadata) error {
	if d, ok := ctx.Deadline(); ok {
		// Not for records of a deleted topic: they never leave.
		for l.producer.Len() > 0 && time.Now().Before(d) && l.checkTopics() == nil {
			kafkaclient.Drain(l.producer, 100*time.Millisecond)
		}
	}
	err := l.callWithin("send offsets", func() error { return l.producer.SendOffsetsToTransaction(ctx, offsets, gm) })
	if err == nil {
		return nil
	}
	if tl := commitTooLarge(err); tl != err {
		return tl
	}
	return nil
}

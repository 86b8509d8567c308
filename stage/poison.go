package stage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/recordtime"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// This file is what the loop does with an input record whose bundle
// fails every time (issue 23, poison records): a DoFn's error or panic on
// it. After MaxAttempts failed attempts the attempt's input records are
// taken in attempts of half as many (Loop.isolate and isolateMost, as for
// a record too large, size.go, which takes them one at a time), halved
// again at each attempt failing MaxAttempts times, a bisection: about
// log2(n) failures for n records, not a transaction per record; from
// oneAtATime records down, one at a time; until the record fails alone
// MaxAttempts times. Then, by
// Config.ErrorPolicy, the stage fails naming it, or writes it to the
// dead-letter topic in the transaction that commits its offset and goes
// on.

// ErrorPolicy is what a stage does with an input record whose bundle
// fails alone in its attempt MaxAttempts times (the runner's
// --error_policy). Kafka Streams' counterparts are
// default.deserialization.exception.handler and KIP-1033's processing
// exception handler (FAIL or CONTINUE), with KIP-1034's dead-letter
// queue; Flink's are side outputs.
type ErrorPolicy string

const (
	// ErrorPolicyFail (the default; "" means it too) stops the stage with
	// ErrBundleFailed naming the record: stage, input topic, partition,
	// offset. Nothing past the record is committed on its partition.
	ErrorPolicyFail ErrorPolicy = "fail"
	// ErrorPolicyDeadLetter writes the record to Config.DeadLetterTopic,
	// with the DeadLetterHeader* headers, in the transaction that commits
	// its offset (exactly once: written once or not at all), and goes on
	// with the next record. Counted in Stats.DeadLetters.
	ErrorPolicyDeadLetter ErrorPolicy = "dead_letter"
)

// The headers of a dead letter, after the input record's own (kept, in
// order), in the manner of KIP-1034's __streams.errors.* headers. Values
// are UTF-8 text.
const (
	// DeadLetterHeaderMessage is the error's text (at most
	// maxDeadLetterMessage bytes; longer ones end in "… (truncated)").
	DeadLetterHeaderMessage = "__kafkastreams.errors.message"
	// DeadLetterHeaderStage is the stage's name (plan.Stage.Name).
	DeadLetterHeaderStage = "__kafkastreams.errors.stage"
	// DeadLetterHeaderTopic, DeadLetterHeaderPartition and
	// DeadLetterHeaderOffset are the input record's: the stage's input
	// topic (a user's topic for a Kafka source stage, else the runner's
	// internal topic between stages), its partition and offset, decimal.
	DeadLetterHeaderTopic     = "__kafkastreams.errors.topic"
	DeadLetterHeaderPartition = "__kafkastreams.errors.partition"
	DeadLetterHeaderOffset    = "__kafkastreams.errors.offset"
	// DeadLetterHeaderTime is the wall time the dead letter was made, RFC
	// 3339 in UTC to the millisecond.
	DeadLetterHeaderTime = "__kafkastreams.errors.time"
	// DeadLetterHeaderValue says what the dead letter's value is: "record",
	// the input record's value as read (a Kafka source stage: the user's
	// record), or "element", the Beam element the record carried, in its
	// PCollection's windowed-value wire coder (an internal topic's record:
	// the Envelope around it is the runner's).
	DeadLetterHeaderValue = "__kafkastreams.errors.value"
)

// oneAtATime is the largest failed attempt whose records are taken one
// at a time rather than halved: a halving costs MaxAttempts failed
// attempts and their back-off (1.2 s by default), a record alone one
// transaction (20-100 ms on the 2-core test machine). Measured with the
// poison record at offset 1717 of 3000 (TestPoisonRecordDeadLetterManyRecords):
// one at a time, 1721 commits and 1 min 58.8 s; halving, 9 commits and
// 27.7 s. With 40 records (offset 17) one at a time took 9.5 s, halving
// down to one 13.0-13.7 s (five failing rounds of 4 attempts).
const oneAtATime = 32

// maxDeadLetterMessage bounds DeadLetterHeaderMessage (a panic's error
// carries the goroutine's stack).
const maxDeadLetterMessage = 16 << 10

// usersFailure says cause, an attempt's error, is a record's failure: the
// user's code failing on the attempt's data, a bundle (step.BundleError)
// the SDK harness answered with an error (fnapi.ErrBundleFailed: a DoFn's
// error or panic, or an input element the harness cannot decode), or a
// runner-side decode of an input record that fails (step.ErrUndecodable:
// a well-formed Envelope whose element the stage's coder cannot decode,
// issue 23). Every other error (a Kafka error, the harness gone, a head's
// or a store's error) is not set aside under either policy: it fails the
// attempt and the stage as before. (A record that is no Envelope never
// gets here: the step skips and counts it, step/trust.go.)
func usersFailure(cause error) bool {
	var be *step.BundleError
	return errors.As(cause, &be) && errors.Is(cause, fnapi.ErrBundleFailed) || errors.Is(cause, step.ErrUndecodable)
}

// bundleFailed handles an attempt that failed attempts (MaxAttempts)
// times in a row with cause, rewound already. It returns nil when the
// loop goes on: the batch's records are to be taken in smaller attempts
// (more than one record, the user's failure: half as many per attempt,
// or one at a time from oneAtATime down), or the record was written to
// the dead-letter topic (ErrorPolicyDeadLetter). Otherwise the stage's error,
// ErrBundleFailed wrapping cause, naming the record alone in its attempt
// (input topic, partition, offset), or the watermark reports or timers
// that failed without an input record.
func (l *Loop) bundleFailed(ctx context.Context, cause error, attempts int, batch []*kafka.Message, wake []int32) error {
	name := l.cfg.Spec.Name
	if !usersFailure(cause) {
		return fmt.Errorf("%w: stage %s after %d attempts: %w", ErrBundleFailed, name, attempts, cause)
	}
	if len(batch) > 1 {
		l.isolateBatch(batch)
		l.isolateMost = len(batch) / 2
		if len(batch) <= oneAtATime {
			l.isolateMost = 1
		}
		l.log.Warn("stage: a bundle failed every attempt: the attempt's input records are taken in attempts of half as many to find the one it fails on", "records", len(batch), "per_attempt", l.isolateMost, "attempts", attempts, "err", cause)
		return nil
	}
	if len(batch) == 0 {
		return fmt.Errorf("%w: stage %s: the timers of task %v fail their bundle with no input record in the attempt, %d attempts (not set aside under either --error_policy): %w", ErrBundleFailed, name, wake, attempts, cause)
	}
	m := batch[0]
	at := fmt.Sprintf("input topic %s, partition %d, offset %d", l.cfg.Spec.InputTopic, m.TopicPartition.Partition, int64(m.TopicPartition.Offset))
	if !l.cfg.Spec.RawInput && isReports(m.Value) {
		// A pane (a GroupByKey's) or a timer the upstream watermark made
		// due: the bundle holds earlier records' data, not this one's.
		return fmt.Errorf("%w: stage %s: the watermark reports at %s made work due (a pane, a timer) whose bundle fails alone in its attempt, %d attempts: no input record to set aside (not under either --error_policy): %w", ErrBundleFailed, name, at, attempts, cause)
	}
	timers := ""
	if len(wake) > 0 {
		timers = fmt.Sprintf(" (or a timer of task %v due in the same attempt)", wake)
	}
	if l.cfg.ErrorPolicy != ErrorPolicyDeadLetter {
		return fmt.Errorf("%w: stage %s: the record at %s%s fails its bundle alone in its attempt, %d attempts (--error_policy=fail): %w", ErrBundleFailed, name, at, timers, attempts, cause)
	}
	if u, ok := l.head.(step.Unskippable); ok && u.Unskippable() != "" {
		return fmt.Errorf("%w: stage %s: the record at %s%s fails its bundle alone in its attempt, %d attempts: not set aside under --error_policy=dead_letter (%s): %w", ErrBundleFailed, name, at, timers, attempts, u.Unskippable(), cause)
	}
	return l.deadLetter(ctx, m, wake, at, cause)
}

// isolateBatch makes poll take Loop.isolateMost records per attempt
// until every partition of batch is past the batch's last record of it
// (Loop.isolate, isolated).
func (l *Loop) isolateBatch(batch []*kafka.Message) {
	if l.isolate == nil {
		l.isolate = map[int32]int64{}
	}
	for _, m := range batch {
		p, o := m.TopicPartition.Partition, int64(m.TopicPartition.Offset)
		if last, ok := l.isolate[p]; !ok || o > last {
			l.isolate[p] = o
		}
	}
}

// deadLetter commits the attempt of record m alone with m set aside
// (step.In.Skip): m's offset and task checkpoint, with m written to
// Config.DeadLetterTopic (deadLetterRecord) in the same transaction, and
// then seeks m's partition past it (rewind: to the offset just
// committed) and reads on in whole batches (Loop.isolate cleared: another
// poison record among the rest is searched for anew). If that attempt fails the user's way too, the failure is
// not m's (a timer due in the same attempt, work the task's watermark
// made due): nothing is set aside and the stage fails naming both. A
// record too large for the dead-letter topic fails the stage with
// ErrRecordTooLarge naming m; any other error is returned as it is (the
// transaction aborted; a Kafka error restarts the clients and the record
// is found again).
func (l *Loop) deadLetter(ctx context.Context, m *kafka.Message, wake []int32, at string, cause error) error {
	batch := []*kafka.Message{m}
	dl := l.deadLetterRecord(m, cause, time.Now())
	blocked, err := l.commit(ctx, batch, wake, &dl)
	if err == nil {
		err = l.holdBlocked(blocked)
	}
	if err != nil {
		l.stats.aborts.Add(1)
		l.abortsUncommitted++
		if f := l.cfg.Observer.Aborted; f != nil {
			f()
		}
		var tl *tooLarge
		if errors.As(err, &tl) {
			_, ferr := l.tooLargeFound(tl, batch, wake)
			return ferr
		}
		if errors.Is(err, ErrTopicGone) {
			// The stage stops; no rewind: it would wait for stable
			// offsets behind the abandoned transaction until the broker
			// aborts it (transaction.timeout.ms; 17.7 s seen).
			return err
		}
		if rerr := l.rewind(batch); rerr != nil {
			return errors.Join(err, rerr)
		}
		if usersFailure(err) {
			return fmt.Errorf("%w: stage %s: the record at %s fails its bundle alone in its attempt, and the attempt fails with the record set aside too: the failure is not the record's (a timer, or work the task's watermark made due): nothing set aside: %w", ErrBundleFailed, l.cfg.Spec.Name, at, err)
		}
		return err
	}
	l.log.Warn("stage: an input record fails its bundle every time: written to the dead-letter topic with its offset (--error_policy=dead_letter)", "record", at, "dead_letter_topic", l.cfg.DeadLetterTopic, "err", cause)
	l.isolate, l.isolateMost = nil, 0
	return l.rewind(batch)
}

// deadLetterRecord is m's dead letter for Config.DeadLetterTopic: m's key,
// its value (an internal topic's record: the element its Envelope
// carries; DeadLetterHeaderValue says which), its timestamp, its headers
// and then the DeadLetterHeader* headers saying why and where from. The
// producer's partitioner places it (step.AnyPartition).
func (l *Loop) deadLetterRecord(m *kafka.Message, cause error, now time.Time) step.Record {
	value, kind := m.Value, "record"
	if !l.cfg.Spec.RawInput {
		if e, _, err := envelope.Decode(m.Value); err == nil && e != nil {
			value, kind = e, "element"
		}
	}
	msg := cause.Error()
	if len(msg) > maxDeadLetterMessage {
		msg = msg[:maxDeadLetterMessage] + "… (truncated)"
	}
	hs := make([]step.Header, 0, len(m.Headers)+7)
	for _, h := range m.Headers {
		hs = append(hs, step.Header{Key: h.Key, Value: h.Value})
	}
	hs = append(hs,
		step.Header{Key: DeadLetterHeaderMessage, Value: []byte(msg)},
		step.Header{Key: DeadLetterHeaderStage, Value: []byte(l.cfg.Spec.Name)},
		step.Header{Key: DeadLetterHeaderTopic, Value: []byte(l.cfg.Spec.InputTopic)},
		step.Header{Key: DeadLetterHeaderPartition, Value: []byte(strconv.Itoa(int(m.TopicPartition.Partition)))},
		step.Header{Key: DeadLetterHeaderOffset, Value: []byte(strconv.FormatInt(int64(m.TopicPartition.Offset), 10))},
		step.Header{Key: DeadLetterHeaderTime, Value: []byte(now.UTC().Format("2006-01-02T15:04:05.000Z07:00"))},
		step.Header{Key: DeadLetterHeaderValue, Value: []byte(kind)},
	)
	r := step.Record{Topic: l.cfg.DeadLetterTopic, Partition: step.AnyPartition, Key: m.Key, Value: value, Headers: hs}
	if m.TimestampType != kafka.TimestampNotAvailable {
		// As read, unless the dead-letter topic would refuse it (more than
		// Kafka's default message.timestamp.after.max.ms ahead): the time
		// of writing then (recordtime.For).
		r.Timestamp, _ = recordtime.For(mtime.FromTime(m.Timestamp), now, recordtime.DefaultTimestampAfterMax)
	}
	return r
}

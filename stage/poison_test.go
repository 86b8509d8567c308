package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// usersError is what a DoFn's error reaches the loop as: the step's
// BundleError around the harness's answer (fnapi.ErrBundleFailed).
func usersError() error {
	return &step.BundleError{Stage: "s1", Elements: 3, Err: fmt.Errorf("fnapi: bundle 7 of stage %q: %w: poison 42", "s1", fnapi.ErrBundleFailed)}
}

// TestBundleFailedPolicies (issue 23, poison records): after MaxAttempts
// failed attempts, bundleFailed takes a batch of several records half as
// many per attempt, a bisection (the user's failure only), names the record failing alone under
// the fail policy (input topic, partition, offset; not restartable), and
// never sets aside or isolates a failure that is not the user's code or
// has no input record (reports, timers alone), nor a record of a
// step.Unskippable head (a TestStream's segment, a GroupByKey's record).
func TestBundleFailedPolicies(t *testing.T) {
	ctx := context.Background()
	l := &Loop{cfg: Config{Spec: step.Spec{Name: "s1", InputTopic: "in"}}, log: slog.Default(), tasks: map[int32]*step.Task{}}
	batch := []*kafka.Message{
		{TopicPartition: kafka.TopicPartition{Partition: 0, Offset: 3}, Value: envelope.EncodeElement([]byte("a"))},
		{TopicPartition: kafka.TopicPartition{Partition: 1, Offset: 9}, Value: envelope.EncodeElement([]byte("b"))},
	}
	kafkaErr := fmt.Errorf("stage s1: commit: %w", kafka.NewError(kafka.ErrTransport, "broker down", false))
	if err := l.bundleFailed(ctx, kafkaErr, 4, batch, nil); !errors.Is(err, ErrBundleFailed) || l.isolate != nil {
		t.Fatalf("a Kafka error: %v (isolate %v), want ErrBundleFailed and no isolation", err, l.isolate)
	}
	if err := l.bundleFailed(ctx, errors.New("stage s1: head: store closed"), 4, batch, nil); !errors.Is(err, ErrBundleFailed) || l.isolate != nil {
		t.Fatalf("a head's error: %v (isolate %v), want ErrBundleFailed and no isolation", err, l.isolate)
	}
	if err := l.bundleFailed(ctx, usersError(), 4, batch, nil); err != nil {
		t.Fatalf("the user's failure in a batch of two: %v, want nil (taken one at a time)", err)
	}
	if want := "map[0:3 1:9]"; fmt.Sprint(l.isolate) != want || l.isolateMost != 1 {
		t.Fatalf("isolate %v, %d per attempt, want %s, 1", l.isolate, l.isolateMost, want)
	}
	var many []*kafka.Message
	for i := 0; i < 1000; i++ {
		many = append(many, &kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 0, Offset: kafka.Offset(i)}})
	}
	if err := l.bundleFailed(ctx, usersError(), 4, many[:oneAtATime], nil); err != nil || l.isolateMost != 1 {
		t.Fatalf("the user's failure in %d records: %v, %d per attempt, want nil, 1 (one at a time)", oneAtATime, err, l.isolateMost)
	}
	for _, want := range []int{500, 250, 125} {
		if err := l.bundleFailed(ctx, usersError(), 4, many[:2*want], nil); err != nil || l.isolateMost != want {
			t.Fatalf("the user's failure in %d records: %v, %d per attempt, want nil, %d (bisection)", 2*want, err, l.isolateMost, want)
		}
	}
	err := l.bundleFailed(ctx, usersError(), 4, batch[1:], nil)
	if !errors.Is(err, ErrBundleFailed) || !strings.Contains(err.Error(), "stage s1: the record at input topic in, partition 1, offset 9 fails its bundle alone in its attempt, 4 attempts (--error_policy=fail)") || !strings.Contains(err.Error(), "poison 42") {
		t.Fatalf("the record alone under the fail policy: %v", err)
	}
	if restartable(fmt.Errorf("kafkastreams: %w", err)) {
		t.Errorf("the record's failure is restartable: a restart of the clients meets the same record")
	}
	err = l.bundleFailed(ctx, usersError(), 4, batch[1:], []int32{2})
	if !strings.Contains(err.Error(), "offset 9 (or a timer of task [2] due in the same attempt)") {
		t.Errorf("with a timer due: %v", err)
	}
	reports := []*kafka.Message{{TopicPartition: kafka.TopicPartition{Partition: 2, Offset: 5}, Value: envelope.EncodeReports(reportsOf(t))}}
	l.cfg.ErrorPolicy, l.cfg.DeadLetterTopic = ErrorPolicyDeadLetter, "app.dead-letters"
	err = l.bundleFailed(ctx, usersError(), 4, reports, nil)
	if !errors.Is(err, ErrBundleFailed) || !strings.Contains(err.Error(), "the watermark reports at input topic in, partition 2, offset 5 made work due") {
		t.Errorf("reports alone, dead_letter policy: %v, want the stage's error naming them", err)
	}
	l.head = unskippableHead{}
	err = l.bundleFailed(ctx, usersError(), 4, batch[1:], nil)
	if !errors.Is(err, ErrBundleFailed) || !strings.Contains(err.Error(), "offset 9 fails its bundle alone in its attempt, 4 attempts: not set aside under --error_policy=dead_letter (a segment)") {
		t.Errorf("a record of a step.Unskippable head, dead_letter policy: %v, want the stage's error naming it", err)
	}
	l.head = &step.Passthrough{Impulse: []byte("impulse")}
	if err = l.bundleFailed(ctx, usersError(), 4, batch[1:], nil); !strings.Contains(err.Error(), "not set aside under --error_policy=dead_letter (an Impulse's record") {
		t.Errorf("an Impulse stage's record, dead_letter policy: %v, want the stage's error naming it", err)
	}
	err = l.bundleFailed(ctx, usersError(), 4, nil, []int32{1})
	if !errors.Is(err, ErrBundleFailed) || !strings.Contains(err.Error(), "the timers of task [1] fail their bundle with no input record") {
		t.Errorf("timers alone, dead_letter policy: %v, want the stage's error naming them", err)
	}
}

// TestBundleFailedUndecodable (issue 23): an input record the stage
// cannot decode (step.ErrUndecodable, a well-formed Envelope with garbage
// element bytes) is a record's failure as a DoFn's is: a batch of several
// is isolated, the record alone named under --error_policy=fail with the
// decode error, and a GroupByKey's (step.Unskippable) named under
// dead_letter too. Before, it failed the stage naming no record.
func TestBundleFailedUndecodable(t *testing.T) {
	ctx := context.Background()
	l := &Loop{cfg: Config{Spec: step.Spec{Name: "s1", InputTopic: "in"}}, log: slog.Default(), tasks: map[int32]*step.Task{}}
	batch := []*kafka.Message{
		{TopicPartition: kafka.TopicPartition{Partition: 0, Offset: 3}, Value: envelope.EncodeElement([]byte("a"))},
		{TopicPartition: kafka.TopicPartition{Partition: 1, Offset: 9}, Value: envelope.EncodeElement([]byte{0xde, 0xad})},
	}
	undecodable := fmt.Errorf("stage s1: element at in[1]@9: %w: gbk: decode: unexpected EOF", step.ErrUndecodable)
	if err := l.bundleFailed(ctx, undecodable, 1, batch, nil); err != nil || l.isolate == nil {
		t.Fatalf("an undecodable record in a batch of two: %v (isolate %v), want nil and the batch isolated", err, l.isolate)
	}
	err := l.bundleFailed(ctx, undecodable, 1, batch[1:], nil)
	if !errors.Is(err, ErrBundleFailed) || !errors.Is(err, step.ErrUndecodable) || !strings.Contains(err.Error(), "the record at input topic in, partition 1, offset 9") || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("the undecodable record alone under the fail policy: %v, want the stage's error naming it", err)
	}
	l.cfg.ErrorPolicy, l.cfg.DeadLetterTopic = ErrorPolicyDeadLetter, "app.dead-letters"
	l.head = unskippableHead{}
	err = l.bundleFailed(ctx, undecodable, 1, batch[1:], nil)
	if !errors.Is(err, ErrBundleFailed) || !strings.Contains(err.Error(), "offset 9") || !strings.Contains(err.Error(), "not set aside under --error_policy=dead_letter") {
		t.Errorf("an undecodable record of a step.Unskippable head, dead_letter policy: %v, want the stage's error naming it", err)
	}
}

// reportsOf is one watermark report's batch, for an Envelope of reports.
func reportsOf(t *testing.T) []*pb.WatermarkReport {
	t.Helper()
	return []*pb.WatermarkReport{{Stage: "s0", SourcePartition: 0, TotalSourcePartitions: 1, CommittedWatermarkMillis: 1000}}
}

// TestDeadLetterRecord: a dead letter keeps the input record's key,
// timestamp and headers (first, in order), carries the element of an
// internal topic's Envelope (or a source's record value as it is), and
// adds the headers saying why and where from.
func TestDeadLetterRecord(t *testing.T) {
	l := &Loop{cfg: Config{Spec: step.Spec{Name: "s2", InputTopic: "app-s1-out"}, DeadLetterTopic: "app.dead-letters"}}
	ts := time.UnixMilli(1_700_000_000_123)
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 3, Offset: 41}, Key: []byte("k"), Value: envelope.EncodeElement([]byte("elem")),
		Timestamp: ts, TimestampType: kafka.TimestampCreateTime, Headers: []kafka.Header{{Key: "trace", Value: []byte("t1")}}}
	now := time.Date(2026, 12, 2, 13, 40, 1, 234_000_000, time.UTC)
	r := l.deadLetterRecord(m, errors.New(strings.Repeat("x", maxDeadLetterMessage+10)), now)
	if r.Topic != "app.dead-letters" || r.Partition != step.AnyPartition || string(r.Key) != "k" || string(r.Value) != "elem" || !r.Timestamp.Equal(ts) {
		t.Errorf("dead letter %s[%d] key %q value %q at %v", r.Topic, r.Partition, r.Key, r.Value, r.Timestamp)
	}
	var got []string
	for _, h := range r.Headers {
		v := string(h.Value)
		if h.Key == DeadLetterHeaderMessage {
			if len(v) > maxDeadLetterMessage+len("… (truncated)") || !strings.HasSuffix(v, "… (truncated)") {
				t.Errorf("message of %d bytes: %q…, want it cut at %d", len(v), v[:20], maxDeadLetterMessage)
			}
			v = "…"
		}
		got = append(got, h.Key+"="+v)
	}
	want := "trace=t1 __kafkastreams.errors.message=… __kafkastreams.errors.stage=s2 __kafkastreams.errors.topic=app-s1-out __kafkastreams.errors.partition=3 __kafkastreams.errors.offset=41 __kafkastreams.errors.time=2026-12-02T13:40:01.234Z __kafkastreams.errors.value=element"
	if strings.Join(got, " ") != want {
		t.Errorf("headers\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	l.cfg.Spec.RawInput = true
	m.Value = []byte("raw")
	if r := l.deadLetterRecord(m, errors.New("e"), now); string(r.Value) != "raw" || string(r.Headers[len(r.Headers)-1].Value) != "record" {
		t.Errorf("a source's record: value %q, %s", r.Value, r.Headers[len(r.Headers)-1].Value)
	}
}

// unskippableHead is a step.Unskippable head (bundleFailed asks nothing
// else of it).
type unskippableHead struct{ step.Head }

func (unskippableHead) Unskippable() string { return "a segment" }

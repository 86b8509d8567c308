package stage

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// TestRecordTooLargeIsPermanent (issue 23): a record too large for its
// topic, refused by the loop's own check, by librdkafka (Produce's
// MSG_SIZE_TOO_LARGE) or by the broker at commit (MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE), becomes one error naming the input record it
// came from, which Run does not restart the clients for; before, it was a
// Kafka error like any other: retried, then five client restarts.
func TestRecordTooLargeIsPermanent(t *testing.T) {
	l := &Loop{cfg: Config{Spec: step.Spec{Name: "s1", InputTopic: "in"}, MaxMessageBytes: map[string]int{"out": 100, "big": 1 << 20}}, log: slog.Default()}
	l.fitsAll = fitsAll(l.cfg.MaxMessageBytes)
	if err := l.checkSize("out", []byte("k"), make([]byte, 30)); err != nil {
		t.Errorf("a batch of %d bytes for a limit of 100: %v", 61+1+37, err)
	}
	if err := l.checkSize("elsewhere", nil, make([]byte, 1000)); err != nil {
		t.Errorf("a topic of unknown limit: %v", err)
	}
	sized := l.checkSize("out", []byte("k"), make([]byte, 40))
	if sized == nil || !strings.Contains(sized.Error(), "a record of 109 bytes (key 1, value 40) for topic out is larger than the topic's max.message.bytes 100") {
		t.Errorf("a batch of 109 bytes for a limit of 100: %v", sized)
	}
	l.compresses = true
	if err := l.checkSize("out", []byte("k"), make([]byte, 40)); err != nil {
		t.Errorf("a compressing producer: %v", err)
	}

	local := produceTooLarge(kafka.NewError(kafka.ErrMsgSizeTooLarge, "Broker: Message size too large", false), "out", []byte("k"), make([]byte, 9))
	broker := commitTooLarge(fmt.Errorf("commit: %w", kafka.NewError(kafka.ErrMsgSizeTooLarge, "Broker: Message size too large", false)))
	list := commitTooLarge(kafka.NewError(kafka.ErrRecordListTooLarge, "Broker: Message batch larger than configured server segment size", false))
	topic := kafka.NewError(kafka.ErrTopicAuthorizationFailed, "Broker: Topic authorization failed", false)
	if err := commitTooLarge(topic); err != topic {
		t.Errorf("commitTooLarge(%v) = %v, want it as it is", topic, err)
	}
	if err := produceTooLarge(topic, "out", nil, nil); err != topic {
		t.Errorf("produceTooLarge(%v) = %v, want it as it is", topic, err)
	}
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 3, Offset: 17}}
	for _, err := range []error{sized, local, broker, list} {
		var tl *tooLarge
		if !errors.As(err, &tl) {
			t.Fatalf("%v is no *tooLarge", err)
		}
		done, ferr := l.tooLargeFound(tl, []*kafka.Message{msg}, nil)
		if !done || !errors.Is(ferr, ErrRecordTooLarge) {
			t.Fatalf("tooLargeFound(%v, one record) = %v, %v, want done and ErrRecordTooLarge", err, done, ferr)
		}
		if !strings.Contains(ferr.Error(), "input topic in, partition 3, offset 17") {
			t.Errorf("the error does not name the input record in[3]@17: %v", ferr)
		}
		if restartable(ferr) {
			t.Errorf("restartable(%v): a restart of the clients makes the same record again", ferr)
		}
	}

	// On an internal topic, a record too large made when watermark
	// reports arrived (a GroupByKey's pane of every value of its key and
	// window) names them as what made it.
	var tl *tooLarge
	errors.As(sized, &tl)
	reports := &kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 1, Offset: 9},
		Value: envelope.EncodeReports([]*pb.WatermarkReport{{Stage: "s0", SourcePartition: 1}})}
	element := &kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 1, Offset: 8}, Value: envelope.EncodeElement([]byte("x"))}
	_, ferr := l.tooLargeFound(tl, []*kafka.Message{reports}, nil)
	if !strings.Contains(ferr.Error(), "made from the watermark reports (a pane or a timer they made due) at input topic in, partition 1, offset 9") {
		t.Errorf("a pane fired by reports: %v", ferr)
	}
	_, ferr = l.tooLargeFound(tl, []*kafka.Message{element}, []int32{2})
	if !strings.Contains(ferr.Error(), "made from the record at input topic in, partition 1, offset 8 (or from a timer of task [2], due in the same attempt)") {
		t.Errorf("an element with a timer due: %v", ferr)
	}
}

// TestRecordTooLargeTakesRecordsOneAtATime: a record too large made by an
// attempt of several input records makes the loop take the batch's
// records one at a time (Loop.isolate holds each partition's last offset,
// offset 0 included) and read on in batches once every partition is
// past them.
func TestRecordTooLargeTakesRecordsOneAtATime(t *testing.T) {
	l := &Loop{cfg: Config{Spec: step.Spec{Name: "s1", InputTopic: "in"}}, log: slog.Default(), tasks: map[int32]*step.Task{}}
	batch := []*kafka.Message{
		{TopicPartition: kafka.TopicPartition{Partition: 0, Offset: 0}},
		{TopicPartition: kafka.TopicPartition{Partition: 1, Offset: 7}},
		{TopicPartition: kafka.TopicPartition{Partition: 1, Offset: 8}},
	}
	done, err := l.tooLargeFound(&tooLarge{what: "too large"}, batch, nil)
	if done || err != nil {
		t.Fatalf("tooLargeFound(three records) = %v, %v, want not done (no task to rewind here)", done, err)
	}
	if want := map[int32]int64{0: 0, 1: 8}; fmt.Sprint(l.isolate) != fmt.Sprint(want) {
		t.Fatalf("isolate %v, want %v", l.isolate, want)
	}
	l.tasks[0], l.tasks[1] = &step.Task{}, &step.Task{}
	l.next = map[int32]int64{0: 1, 1: 8}
	l.isolated()
	if fmt.Sprint(l.isolate) != fmt.Sprint(map[int32]int64{1: 8}) {
		t.Fatalf("partition 0 past its offset 0, 1 not past 8: isolate %v, want map[1:8]", l.isolate)
	}
	l.next[1] = 9
	l.isolated()
	if l.isolate != nil {
		t.Fatalf("every partition past the batch: isolate %v, want nil (batches again)", l.isolate)
	}
}

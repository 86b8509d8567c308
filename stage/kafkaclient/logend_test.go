package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestRetriable(t *testing.T) {
	for _, tc := range []struct {
		code kafka.ErrorCode
		want bool
	}{
		{kafka.ErrNotLeaderForPartition, true},
		{kafka.ErrLeaderNotAvailable, true},
		{kafka.ErrUnknownTopicOrPart, true},
		{kafka.ErrNoent, true},
		{kafka.ErrTimedOut, true},
		{kafka.ErrTopicAuthorizationFailed, false},
		{kafka.ErrSaslAuthenticationFailed, false},
		{kafka.ErrInvalidArg, false},
	} {
		if got := retriable(kafka.NewError(tc.code, "x", false)); got != tc.want {
			t.Errorf("retriable(%v) = %v, want %v", tc.code, got, tc.want)
		}
	}
	if retriable(kafka.NewError(kafka.ErrTimedOut, "x", true)) {
		t.Error("a fatal error was called retriable")
	}
}

func TestReachedEnd(t *testing.T) {
	eof := func(o int64) kafka.PartitionEOF { return kafka.PartitionEOF{Partition: 0, Offset: kafka.Offset(o)} }
	if ReachedEnd(eof(5), 6) {
		t.Error("an EOF at 5 reached an end of 6 (the commit marker at 5 not yet read past)")
	}
	if !ReachedEnd(eof(6), 6) || !ReachedEnd(eof(7), 6) {
		t.Error("an EOF at or past the end did not reach it")
	}
}

// TestLogStartsTimeoutIsAKafkaError: a ListOffsets no broker answers
// (127.0.0.1:1 refuses connections) fails at LogStarts' timeout with a
// kafka.Error of code ErrTimedOut, so a stage loop restarts its clients
// (stage's restartable wants a Kafka error), as it did when the question
// went through the consumer's QueryWatermarkOffsets; confluent-kafka-go
// itself returns the bare context.DeadlineExceeded, on which the stage
// ended for good. The caller's own cancellation stays a context error.
func TestLogStartsTimeoutIsAKafkaError(t *testing.T) {
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	_, err = LogStarts(context.Background(), admin, "t", []int32{0, 1}, 200*time.Millisecond)
	var ke kafka.Error
	if !errors.As(err, &ke) || ke.Code() != kafka.ErrTimedOut {
		t.Fatalf("LogStarts with no broker: %v, want a kafka.Error with code ErrTimedOut", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = OffsetsAtTime(ctx, admin, "t", []int32{0}, 1, kafka.IsolationLevelReadCommitted, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ke) {
		t.Fatalf("OffsetsAtTime with the caller's context ended: %v, want its context.DeadlineExceeded, no kafka.Error", err)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer hcancel()
	if _, _, err := HighAndStable(hctx, admin, "t", []int32{0}, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("HighAndStable with the caller's context ended during the leader check: %v, want its context.DeadlineExceeded", err)
	}
}

// TestAnsweredOffset: an answer with no error and no offset (-1001, what
// a ListOffsets to a SIGKILLed leader gave a restore in TestSoak) is a
// retriable kafka.Error, never an offset; -1 is an offset only where a
// timestamp spec allows "no record that late".
func TestAnsweredOffset(t *testing.T) {
	for _, tc := range []struct {
		off        kafka.Offset
		code       kafka.ErrorCode
		endAllowed bool
		want       int64
		wantErr    kafka.ErrorCode
	}{
		{off: 0, want: 0},
		{off: 42, want: 42},
		{off: kafka.OffsetInvalid, wantErr: kafka.ErrTimedOut},
		{off: kafka.OffsetEnd, wantErr: kafka.ErrTimedOut},
		{off: kafka.OffsetEnd, endAllowed: true, want: -1},
		{off: kafka.OffsetInvalid, endAllowed: true, wantErr: kafka.ErrTimedOut},
		{off: 7, code: kafka.ErrNotLeaderForPartition, wantErr: kafka.ErrNotLeaderForPartition},
	} {
		info := kafka.ListOffsetsResultInfo{Offset: tc.off, Error: kafka.NewError(tc.code, "", false)}
		got, err := AnsweredOffset(info, tc.endAllowed)
		var ke kafka.Error
		switch {
		case tc.wantErr != kafka.ErrNoError && (!errors.As(err, &ke) || ke.Code() != tc.wantErr):
			t.Errorf("AnsweredOffset(%d, %v, endAllowed %v) = %d, %v; want a kafka.Error %v", tc.off, tc.code, tc.endAllowed, got, err, tc.wantErr)
		case tc.wantErr == kafka.ErrNoError && (err != nil || got != tc.want):
			t.Errorf("AnsweredOffset(%d, %v, endAllowed %v) = %d, %v; want %d", tc.off, tc.code, tc.endAllowed, got, err, tc.want)
		}
	}
}

// TestReadOffsets: each ask's offsets in a map of its own; a partition
// refused, missing from an answer, answered with an error or with no
// offset is left out and named, the refusals first, then ask by ask in
// the partitions' order (not the answers' map order); -1 is kept only
// for a timestamp ask.
func TestReadOffsets(t *testing.T) {
	ok := func(off kafka.Offset) kafka.ListOffsetsResultInfo {
		return kafka.ListOffsetsResultInfo{Offset: off, Error: kafka.NewError(kafka.ErrNoError, "", false)}
	}
	refused := map[int32]error{2: errors.New("leader 9 refuses")}
	answers := []map[int32]kafka.ListOffsetsResultInfo{
		{0: ok(5), 1: {Offset: 3, Error: kafka.NewError(kafka.ErrNotLeaderForPartition, "moved", false)}, 3: ok(kafka.OffsetInvalid)},
		{3: ok(12), 0: ok(10), 1: ok(11)},
		{0: ok(kafka.OffsetEnd), 1: ok(4), 3: ok(kafka.OffsetEnd)},
	}
	asks := []offsetAsk{logStart, logEnd, {spec: kafka.NewOffsetSpecForTimestamp(7), what: "offset for time 7 ms"}}
	out, err := readOffsets("t", []int32{0, 1, 2, 3}, []int32{0, 1, 3}, refused, asks, answers)
	want := []map[int32]int64{{0: 5}, {0: 10, 1: 11, 3: 12}, {0: -1, 1: 4, 3: -1}}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Errorf("offsets = %v, want %v", out, want)
	}
	lines := strings.Split(fmt.Sprint(err), "\n")
	wantLines := []string{
		"leader 9 refuses",
		"kafkaclient: log start offset of t[1]: moved",
		"kafkaclient: log start offset of t[3]: the broker's answer holds no offset (-1001)",
	}
	if fmt.Sprint(lines) != fmt.Sprint(wantLines) {
		t.Errorf("error lines = %q, want %q", lines, wantLines)
	}
	delete(answers[1], 3)
	if _, err := readOffsets("t", []int32{3}, []int32{3}, nil, asks[1:2], answers[1:2]); err == nil || err.Error() != "kafkaclient: no log end offset for t[3] in the broker's answer" {
		t.Errorf("a partition missing from the answer: %v", err)
	}
	out, err = readOffsets("t", []int32{2}, nil, refused, asks[:2], nil)
	if len(out) != 2 || len(out[0])+len(out[1]) != 0 || err == nil || err.Error() != "kafkaclient: log start offset and log end offset of t [2]: leader 9 refuses" {
		t.Errorf("every partition refused: %v, %v", out, err)
	}
}

package kafkaclient

import (
	"testing"

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

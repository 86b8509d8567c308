package runner

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("kafkastreams: create topics at x: %w", kafka.NewError(kafka.ErrTransport, "refused", false)), true},
		{fmt.Errorf("kafkastreams: create topics at x: %w", kafka.NewError(kafka.ErrTimedOut, "timed out", false)), true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true},
		// The broker answered: no "is a broker running there?".
		{fmt.Errorf("kafkastreams: create topic t: %w", kafka.NewError(kafka.ErrTopicAuthorizationFailed, "denied", false)), false},
		{errors.New("kafkastreams: topic t exists with 2 partitions, the plan needs 4"), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

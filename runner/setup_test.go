package runner

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// TestPlanRetriable: recordPlan tries again, with a new producer, after
// any error of a fenced or fatal plan producer, as librdkafka hands them:
// flagged fatal by the transactional calls, the bare unflagged ErrFatal
// ("Local: Fatal error") of a Produce call (CI failed a second instance
// with it when the first fenced its plan producer), the fencing codes;
// and not after a plan mismatch or the caller's own cancellation.
func TestPlanRetriable(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, kafka.NewError(kafka.ErrFatal, "Local: Fatal error", false), true},
		{live, fmt.Errorf("wrapped: %w", kafka.NewError(kafka.ErrFatal, "Local: Fatal error", false)), true},
		{live, kafka.NewError(kafka.ErrFenced, "fenced", true), true},
		{live, kafka.NewError(kafka.ErrProducerFenced, "fenced", false), true},
		{live, kafka.NewError(kafka.ErrInvalidProducerEpoch, "old epoch", true), true},
		{live, kafka.NewError(kafka.ErrTopicAuthorizationFailed, "not authorized", false), false},
		{live, context.DeadlineExceeded, true},
		{done, context.DeadlineExceeded, false},
		{live, fmt.Errorf("%w: another plan", plan.ErrPlanMismatch), false},
		{live, errors.New("not a Kafka error"), false},
	} {
		if got := planRetriable(c.ctx, c.err); got != c.want {
			t.Errorf("planRetriable(ctx live %v, %v) = %v, want %v", c.ctx.Err() == nil, c.err, got, c.want)
		}
	}
}

package stage

import (
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestRestartable: Run restarts its clients after Kafka's errors (what a
// broker failover gives: a fenced producer, a coordinator gone, a timed-out
// transaction, however wrapped) and never after the SDK's or the local
// state's.
func TestRestartable(t *testing.T) {
	notCoord := kafka.NewError(kafka.ErrNotCoordinator, "Broker: Not coordinator", false)
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"fenced", fmt.Errorf("%w: stage s: commit: x", ErrFenced), true},
		{"rewind after a coordinator moved", fmt.Errorf("stage s: rewind: committed offsets: %w", notCoord), true},
		{"bundle failed on Kafka", fmt.Errorf("%w: stage s after 4 attempts: %w", ErrBundleFailed, fmt.Errorf("send offsets: %w", notCoord)), true},
		{"bundle failed in the DoFn", fmt.Errorf("%w: stage s after 4 attempts: %w", ErrBundleFailed, errors.New("panic in DoFn")), false},
		{"local state", fmt.Errorf("%w: %w", ErrLocalState, notCoord), false},
		{"plain", errors.New("stage s: element: malformed"), false},
	} {
		if got := restartable(c.err); got != c.want {
			t.Errorf("%s: restartable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

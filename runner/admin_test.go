package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestStartAdminAsksAgainWithANewClient: an attempt that timed out or
// failed retriably is asked again by a new client; one that failed for
// good is not, and neither is one whose context ended; an attempt whose
// controller check fails (no broker answers its Metadata request) does
// not call at all, and is asked again until the context ends.
func TestStartAdminAsksAgainWithANewClient(t *testing.T) {
	s, err := newStartAdmin("127.0.0.1:1", nil) // never asked: call answers
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()

	checkCtx, checkCancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer checkCancel()
	calls := 0
	if err := s.do(checkCtx, "a test request", func(context.Context, *kafka.AdminClient) error {
		calls++
		return nil
	}); err == nil || !strings.Contains(err.Error(), "the controller is not known") || calls != 0 {
		t.Errorf("do with no broker = %v after %d calls, want the check's error after 0 (kafkaclient.ControllerRefuses fails closed)", err, calls)
	}
	if checkCtx.Err() == nil {
		t.Errorf("do with no broker returned before its context ended")
	}

	s.controllerRefuses = func(*kafka.AdminClient, time.Duration) error { return nil } // the calls answer
	var clients []*kafka.AdminClient
	answers := []error{context.DeadlineExceeded, kafka.NewError(kafka.ErrNotController, "moved", false), nil}
	err = s.do(context.Background(), "a test request", func(_ context.Context, a *kafka.AdminClient) error {
		clients = append(clients, a)
		e := answers[0]
		answers = answers[1:]
		return e
	})
	if err != nil || len(clients) != 3 {
		t.Fatalf("do = %v after %d attempts, want nil after 3", err, len(clients))
	}
	if clients[0] == clients[1] || clients[1] == clients[2] {
		t.Errorf("an attempt after a timeout or a retriable error used the same client")
	}

	calls = 0
	bad := kafka.NewError(kafka.ErrTopicAuthorizationFailed, "denied", false)
	if err := s.do(context.Background(), "a test request", func(context.Context, *kafka.AdminClient) error {
		calls++
		return bad
	}); !errors.Is(err, bad) || calls != 1 {
		t.Errorf("do = %v after %d attempts, want the refusal after 1", err, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	calls = 0
	if err := s.do(ctx, "a test request", func(actx context.Context, _ *kafka.AdminClient) error {
		calls++
		<-actx.Done()
		return actx.Err()
	}); !errors.Is(err, context.DeadlineExceeded) || calls != 1 {
		t.Errorf("do = %v after %d attempts, want the context's end after 1", err, calls)
	}
}

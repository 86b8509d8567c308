package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// startTimeout bounds one start-up step's admin requests as a whole (the
// topics created, the users' topics described, the dead-letter topic
// made); attemptTimeout one request of one admin client (startAdmin.do).
const (
	startTimeout   = 2 * time.Minute
	attemptTimeout = 10 * time.Second
)

// startAdmin is the admin client of one start-up step: every request of
// the step goes through do, which asks again with a new client (fresh
// metadata) when one times out or fails retriably. The kind of fault it
// removes, seen twice in issue 23's make soak: librdkafka sends an admin
// request to a node its metadata names (CreateTopics to the controller,
// which in KRaft is any broker the metadata lists as live; DescribeTopics
// and DescribeConfigs to any live one), so a client whose metadata was
// taken just after a node's SIGKILL (still live for the
// broker.session.timeout.ms that follows) can keep sending to the dead
// node until its deadline: 65 960 CreateTopics attempts in 30 s, and a
// DescribeTopics of the users' topics that ran out its 30 s, each failing
// an instance's start. Not safe for concurrent use.
type startAdmin struct {
	a  *kafka.AdminClient
	cm kafka.ConfigMap
	// controllerRefuses checks a's controller before each attempt
	// (kafkaclient.ControllerRefuses; a test's stand-in).
	controllerRefuses func(a *kafka.AdminClient, timeout time.Duration) error
}

// newStartAdmin returns a startAdmin for the cluster at bootstrap with
// the users' client properties props (kafkaclient.Base); close it.
func newStartAdmin(bootstrap string, props map[string]string) (*startAdmin, error) {
	cm := kafkaclient.Base(bootstrap, props)
	a, err := kafka.NewAdminClient(&cm)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: admin client: %w", err)
	}
	return &startAdmin{a: a, cm: cm, controllerRefuses: kafkaclient.ControllerRefuses}, nil
}

// close closes the client in use, in the background (closeLater).
func (s *startAdmin) close() { closeLater(s.a.Close) }

// do runs call, one admin request, each attempt bounded by attemptTimeout;
// an attempt that timed out or failed retriably (retriableErr) is asked
// again by a new admin client, after a backoff of 200 ms times the
// attempt (at most 2 s), until ctx is done. what names the request in the
// warning each retry logs and in the error. call must be safe to run
// again: every request it is used for is idempotent (a describe, a
// create answered TOPIC_ALREADY_EXISTS the second time, an incremental
// SET of the same values), and its request carries
// kafka.SetAdminRequestTimeout(attemptTimeout) where the request takes
// one (IncrementalAlterConfigs does not), so that it ends in librdkafka
// with its attempt.
func (s *startAdmin) do(ctx context.Context, what string, call func(ctx context.Context, a *kafka.AdminClient) error) error {
	for attempt := 1; ; attempt++ {
		// A controller that refuses connections, or that the check
		// cannot learn (its Metadata request failed), is not asked:
		// librdkafka busy-loops while a request waits for a dead one
		// (kafkaclient.ControllerRefuses); the attempt fails retriably.
		// The check is bounded by ctx too.
		err := s.controllerRefuses(s.a, kafkaclient.Within(ctx, attemptTimeout))
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			err = call(actx, s.a)
			cancel()
		}
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !retriableErr(err) {
			return err
		}
		slog.Default().With("runner", Name).Warn("kafkastreams: "+what+": no answer; asking again with a new admin client (fresh metadata)", "attempt", attempt, "err", err)
		next, nerr := kafka.NewAdminClient(&s.cm)
		if nerr != nil {
			return fmt.Errorf("admin client: %w", nerr)
		}
		closeLater(s.a.Close)
		s.a = next
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %d attempts; the last: %v)", ctx.Err(), attempt, err)
		case <-time.After(min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// createTopics asks for specs until each is answered for good (created,
// existing, or refused with an error that is not retriable), or ctx ends.
// An attempt whose topics all failed retriably, or that timed out, is
// asked again (do); topics answered with a retriable error (their
// controller went away, the request timed out) are asked again alone.
func (s *startAdmin) createTopics(ctx context.Context, specs []kafka.TopicSpecification) ([]kafka.TopicResult, error) {
	var done []kafka.TopicResult
	pending := specs
	err := s.do(ctx, "creating the topics", func(actx context.Context, a *kafka.AdminClient) error {
		res, err := a.CreateTopics(actx, pending, kafka.SetAdminRequestTimeout(attemptTimeout))
		if err != nil {
			return err
		}
		bySpec := map[string]kafka.TopicSpecification{}
		for _, sp := range pending {
			bySpec[sp.Topic] = sp
		}
		var again []kafka.TopicSpecification
		var last error
		for _, r := range res {
			if retriableTopic(r.Error) {
				again = append(again, bySpec[r.Topic])
				last = r.Error
				continue
			}
			done = append(done, r)
		}
		pending = again
		return last
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// describeTopics describes topics (do).
func (s *startAdmin) describeTopics(ctx context.Context, what string, topics []string) (kafka.DescribeTopicsResult, error) {
	var res kafka.DescribeTopicsResult
	err := s.do(ctx, what, func(actx context.Context, a *kafka.AdminClient) error {
		var err error
		res, err = a.DescribeTopics(actx, kafka.NewTopicCollectionOfTopicNames(topics), kafka.SetAdminRequestTimeout(attemptTimeout))
		return err
	})
	return res, err
}

// retriableErr reports whether err is a kafka.Error to retry a request
// after (retriableTopic of its code).
func retriableErr(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && retriableTopic(ke)
}

// retriableTopic reports whether a topic's CreateTopics result e is one to
// ask again: retriable as librdkafka says, or a controller that moved or
// did not answer.
func retriableTopic(e kafka.Error) bool {
	switch e.Code() {
	case kafka.ErrNoError:
		return false
	case kafka.ErrNotController, kafka.ErrRequestTimedOut, kafka.ErrTimedOut, kafka.ErrTransport:
		return true
	}
	return e.IsRetriable()
}

// waitServed returns once every partition of the topics of specs that
// results says were created (no error) answers a ListOffsets, or when ctx
// ends (kafkaclient.WaitServed, which says why: records written to a
// partition before its leader has created its log can be lost without an
// error).
func (s *startAdmin) waitServed(ctx context.Context, specs []kafka.TopicSpecification, results []kafka.TopicResult) error {
	created := map[string]bool{}
	for _, r := range results {
		if r.Error.Code() == kafka.ErrNoError {
			created[r.Topic] = true
		}
	}
	var topics []kafka.TopicSpecification
	for _, sp := range specs {
		if created[sp.Topic] {
			topics = append(topics, sp)
		}
	}
	if err := kafkaclient.WaitServed(ctx, s.a, topics, attemptTimeout); err != nil {
		return fmt.Errorf("kafkastreams: %w", err)
	}
	return nil
}

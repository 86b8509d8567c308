package kafkaenv

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// readyPoll is the pause between two readiness attempts.
const readyPoll = 100 * time.Millisecond

// waitReady returns nil once the cluster at bootstrap answers a
// DescribeCluster request listing at least one broker. It gives up after
// timeout, when ctx ends, or when exited (may be nil) is closed: the broker
// process died.
//
// It first waits for the first address to accept TCP connections, so that
// librdkafka does not log a connection error per attempt while the JVM
// starts.
func waitReady(ctx context.Context, bootstrap string, timeout time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	first := firstAddr(bootstrap)

	wait := func() error {
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %v: %w", timeout, ctx.Err())
		case <-exited:
			return errExited
		case <-time.After(readyPoll):
			return nil
		}
	}
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", first)
		if err == nil {
			c.Close()
			break
		}
		if werr := wait(); werr != nil {
			return fmt.Errorf("%s never accepted a connection (%v): %w", first, err, werr)
		}
	}

	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{
		"bootstrap.servers":    bootstrap,
		"log.connection.close": false,
		"socket.timeout.ms":    5000,
	})
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer admin.Close()
	var lastErr error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := admin.DescribeCluster(rctx)
		rcancel()
		if err == nil && len(res.Nodes) > 0 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("metadata lists no broker yet")
		}
		lastErr = err
		if werr := wait(); werr != nil {
			return fmt.Errorf("no metadata from %s (last error: %v): %w", bootstrap, lastErr, werr)
		}
	}
}

// firstAddr returns the first host:port of a bootstrap.servers list.
// A "PLAINTEXT://" style prefix is dropped.
func firstAddr(bootstrap string) string {
	first, _, _ := strings.Cut(bootstrap, ",")
	if _, rest, ok := strings.Cut(first, "://"); ok {
		first = rest
	}
	return strings.TrimSpace(first)
}

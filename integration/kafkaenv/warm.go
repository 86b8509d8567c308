package kafkaenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv/kraftconfig"
)

// Throwaway names of the warm-up: the groups and transactional ids that make
// a fresh broker create and load its internal topics. Each is the prefix and
// a number chosen so that the names cover every partition (see
// nameForPartition).
const (
	warmGroupPrefix = "kafkaenv-warm-group-"
	warmTxnPrefix   = "kafkaenv-warm-txn-"
)

// internalPartitions returns the partition counts of __consumer_offsets and
// __transaction_state that node n's configuration sets (kraftconfig's
// defaults with n's overrides; the image's entrypoint uses the same
// package).
func internalPartitions(n node) (groups, txns int, err error) {
	p := kraftconfig.Config{Overrides: n.overrides}.Properties()
	groups, err = strconv.Atoi(p["offsets.topic.num.partitions"])
	if err != nil || groups < 1 {
		return 0, 0, fmt.Errorf("offsets.topic.num.partitions %q is not a positive number", p["offsets.topic.num.partitions"])
	}
	txns, err = strconv.Atoi(p["transaction.state.log.num.partitions"])
	if err != nil || txns < 1 {
		return 0, 0, fmt.Errorf("transaction.state.log.num.partitions %q is not a positive number", p["transaction.state.log.num.partitions"])
	}
	return groups, txns, nil
}

// javaHash is Java's String.hashCode of s (s is ASCII here, so its bytes
// are its UTF-16 code units): s[0]*31^(n-1) + ... + s[n-1], wrapping.
func javaHash(s string) int32 {
	var h int32
	for i := 0; i < len(s); i++ {
		h = 31*h + int32(s[i])
	}
	return h
}

// partitionFor is the partition of an internal topic of n partitions that
// holds the group or transactional id key: Utils.abs(key.hashCode()) % n,
// as Kafka's GroupCoordinatorService.partitionFor and
// TransactionStateManager.partitionFor compute it (Utils.abs maps
// Integer.MIN_VALUE to 0).
func partitionFor(key string, n int) int {
	h := javaHash(key)
	if h == -1<<31 {
		return 0
	}
	if h < 0 {
		h = -h
	}
	return int(h) % n
}

// nameForPartition returns the first prefix+N (N = 0, 1, ...) whose
// partition among n is p.
func nameForPartition(prefix string, p, n int) string {
	for i := 0; ; i++ {
		if name := prefix + strconv.Itoa(i); partitionFor(name, n) == p {
			return name
		}
	}
}

// warmCoordinators makes a fresh broker at bootstrap create and load both
// internal topics, and returns once a coordinator of every partition has
// answered: for each partition of __consumer_offsets (groups of them) a
// DescribeConsumerGroups of a throwaway group that hashes to it, and for
// each partition of __transaction_state (txns of them) InitTransactions of
// a throwaway transactional id that hashes to it. A broker creates these
// topics on the first FindCoordinator that needs them and loads each
// partition after; until then JoinGroup answers NOT_COORDINATOR and
// InitProducerId COORDINATOR_LOAD_IN_PROGRESS, and a client backs off
// (librdkafka waited ~2.6 s before rejoining a group): a runner started on
// a cold broker paid 1-4 s of its start-up for it. Users' brokers are
// long-lived and warm; only the brokers this package starts are cold.
//
// The topics keep the broker's settings (partitions, replication factor,
// min ISR): warmCoordinators only asks for coordinators. It gives up after
// timeout, or when ctx ends, naming what did not answer.
func warmCoordinators(ctx context.Context, bootstrap string, groups, txns int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{
		"bootstrap.servers":    bootstrap,
		"log.connection.close": false,
	})
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer admin.Close()

	errs := make([]error, groups+txns)
	var wg sync.WaitGroup
	for p := 0; p < groups; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = warmGroup(ctx, admin, nameForPartition(warmGroupPrefix, p, groups), p, timeout)
		}()
	}
	for p := 0; p < txns; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[groups+p] = warmTxn(ctx, bootstrap, nameForPartition(warmTxnPrefix, p, txns), p, timeout)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// warmGroup asks for group until its coordinator answers it without a
// coordinator error: partition p of __consumer_offsets, which holds it, is
// loaded. A group that does not exist is an answer.
//
// A request is given 0.5 s (8 times, then twice as long as the one
// before, up to 5 s, for a slow machine): librdkafka's
// DescribeConsumerGroups sent while the broker created the topic did not
// return before its deadline (5 s then) even once the coordinator answered,
// and a new request got its answer at once.
func warmGroup(ctx context.Context, admin *kafka.AdminClient, group string, p int, timeout time.Duration) error {
	var last error
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, wait)
		if attempt >= 8 {
			wait = min(2*wait, 5*time.Second)
		}
		res, err := admin.DescribeConsumerGroups(rctx, []string{group})
		cancel()
		if err == nil && len(res.ConsumerGroupDescriptions) == 1 {
			err = res.ConsumerGroupDescriptions[0].Error
			if code := res.ConsumerGroupDescriptions[0].Error.Code(); code == kafka.ErrNoError || code == kafka.ErrGroupIDNotFound {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("group coordinator of %s (__consumer_offsets partition %d) did not answer within %v (last error: %v)", group, p, timeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// warmTxn initialises a transactional producer of id and closes it: its
// InitTransactions returns once partition p of __transaction_state, which
// holds id, is loaded.
func warmTxn(ctx context.Context, bootstrap, id string, p int, timeout time.Duration) error {
	prod, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":    bootstrap,
		"transactional.id":     id,
		"log.connection.close": false,
	})
	if err != nil {
		return fmt.Errorf("producer %s: %w", id, err)
	}
	defer prod.Close()
	if err := prod.InitTransactions(ctx); err != nil {
		return fmt.Errorf("transaction coordinator of %s (__transaction_state partition %d) did not answer within %v: %w", id, p, timeout, err)
	}
	return nil
}

package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// RefusingLeaders returns, for each of partitions of topic whose leader
// refuses TCP connections at this moment (a broker process killed a
// moment ago whose host is up: its port answers with a reset), a
// retriable kafka.Error (ErrTransport) naming the leader and its address.
// Every admin request that goes to partition leaders (ListOffsets,
// DeleteRecords) leaves those partitions out: the caller treats them as
// not answered and asks again later, by when the controller has fenced
// the dead broker and elected another leader.
//
// Why: librdkafka (2.11.1, and its master of 2026-12) busy-loops while an
// admin request waits for a leader that refuses connections. The request
// waits in rd_kafka_admin_common_get_broker, which is run again on every
// broker state change and each time asks for a connection to the leader
// (rd_kafka_broker_find_by_nodeid0 with do_connect; its CONNECT op clears
// the reconnect backoff); the connect is refused at once, which is a state
// change, which runs the wait again. One such request kept a core busy
// until its request timeout (60 s by default, whatever the caller's
// context): in TestScenarioBrokerFailover the stage loops' requests to
// the killed leader took both cores for the minute after the kill, the
// surviving brokers' controller starved, fenced a live broker and left
// the input partition without a new leader (CI of 14813bb). A dial of our
// own answers "refused" in microseconds and starts no loop.
//
// The leaders come from a Metadata request through admin, bounded by
// timeout (a Metadata request goes to any broker that is up: it does not
// loop). If that request fails, every partition is returned, with a
// retriable error (noMetadata). A partition with no leader (one being
// elected) or with a leader the answer does not list is returned with a
// retriable kafka.Error ErrLeaderNotAvailable: librdkafka would look its
// leader up in metadata of its own, which may still name the dead one.
// If a dial neither connects nor is refused within dialTimeout (a hung
// host: librdkafka's connect then waits too, it does not loop), nothing
// is returned for its partitions and the caller's request goes ahead.
// The dials to distinct leaders run concurrently (refuses: a leader that
// accepted one in the last acceptedFor is not dialled again).
func RefusingLeaders(admin *kafka.AdminClient, topic string, partitions []int32, timeout time.Duration) map[int32]error {
	ms := int(min(timeout, metadataTimeout).Milliseconds())
	if ms <= 0 {
		ms = 1
	}
	md, err := admin.GetMetadata(&topic, false, ms)
	if err != nil {
		out := make(map[int32]error, len(partitions))
		for _, p := range partitions {
			out[p] = noMetadata(fmt.Sprintf("the leader of %s[%d]", topic, p), err)
		}
		return out
	}
	addr := brokerAddrs(md)
	want := make(map[int32]bool, len(partitions))
	for _, p := range partitions {
		want[p] = true
	}
	leaderOf := map[int32]int32{}
	dial := map[int32]error{}
	var refused map[int32]error
	refuse := func(p int32, err error) {
		if refused == nil {
			refused = map[int32]error{}
		}
		refused[p] = err
	}
	for _, pm := range md.Topics[topic].Partitions {
		switch {
		case !want[pm.ID]:
		case pm.Leader < 0:
			// Being elected (the old leader fenced a moment ago):
			// librdkafka would look the leader up in metadata of its
			// own, which may still name the dead one. A precaution:
			// no loop was seen to start so.
			refuse(pm.ID, kafka.NewError(kafka.ErrLeaderNotAvailable, fmt.Sprintf("%s[%d] has no leader: not asked", topic, pm.ID), false))
		case addr[pm.Leader] == "":
			refuse(pm.ID, kafka.NewError(kafka.ErrLeaderNotAvailable, fmt.Sprintf("leader %d of %s[%d] is not among the brokers the cluster lists: not asked", pm.Leader, topic, pm.ID), false))
		default:
			leaderOf[pm.ID] = pm.Leader
			dial[pm.Leader] = nil
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id := range dial {
		wg.Go(func() {
			err := refuses(addr[id])
			mu.Lock()
			dial[id] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for p, id := range leaderOf {
		if dial[id] != nil {
			refuse(p, kafka.NewError(kafka.ErrTransport, fmt.Sprintf("leader %d of %s[%d] at %s refuses connections: not asked", id, topic, p, addr[id]), false))
		}
	}
	return refused
}

// ControllerRefuses returns a retriable kafka.Error (ErrTransport) naming
// the broker when the one admin's controller-bound requests go to
// refuses TCP connections at this moment, nil otherwise. librdkafka sends
// DescribeTopics, DescribeCluster, DescribeConfigs, CreateTopics,
// CreatePartitions, DeleteTopics and IncrementalAlterConfigs to the
// controller id of its last Metadata answer (in KRaft any live broker the
// answering broker knows; a SIGKILLed one until the controller fences
// it), and a request waiting for that broker busy-loops as a leader-bound
// one does (RefusingLeaders): the topic watch's DescribeTopics every
// second kept both cores of a runner busy for the minute after a broker's
// kill in TestScenarioBrokerFailover (the debug log: 5.7 million
// "DESCRIBETOPICS worker called in state waiting for controller" lines in
// one client). Callers skip the request when it returns an error and ask
// again later.
//
// It first refreshes admin's metadata (a Metadata request for no topics,
// to any broker that is up, bounded by timeout and 5 s), which also
// updates the controller id, then dials the controller. A controller not
// among the brokers the answer lists is an error too (librdkafka would
// wait for it), and so is a failed Metadata request (noMetadata). When
// the dial neither connects nor is refused within 500 ms, it returns nil:
// the request goes ahead. A Metadata answer that reaches admin between
// this check and the request (another goroutine's, or librdkafka's own)
// can still name a dead controller: in KRaft each answer names a random
// live broker, a dead one until it is fenced; that request then loops
// until its own timeout (every caller sets one).
func ControllerRefuses(admin *kafka.AdminClient, timeout time.Duration) error {
	wait := min(timeout, metadataTimeout)
	md, err := admin.GetMetadata(nil, false, max(int(wait.Milliseconds()), 1))
	if err != nil {
		return noMetadata("the controller", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	id, err := admin.ControllerID(ctx)
	if err != nil || id < 0 {
		return nil
	}
	addr := brokerAddrs(md)[id]
	if addr == "" {
		return kafka.NewError(kafka.ErrTransport, fmt.Sprintf("controller %d is not among the brokers the cluster lists: not asked", id), false)
	}
	if refuses(addr) != nil {
		return kafka.NewError(kafka.ErrTransport, fmt.Sprintf("controller %d at %s refuses connections: not asked", id, addr), false)
	}
	return nil
}

// noMetadata is the retriable error (ErrTimedOut) of a check whose
// Metadata request failed with err: what (the leader of a partition, the
// controller) is not known, so the request that needs it is not sent.
// Sending it anyway let it wait in librdkafka for the dead broker and
// busy-loop (TestAdminQuestionsToAKilledLeaderDoNotSpin, 2026-12-05: the
// Metadata requests timed out behind a DeleteRecords the broker held on
// the same connection, see DeleteRecords, and each request sent after a
// failed check looped for its 2 s: 130 551 connection attempts to the
// killed node in a minute).
func noMetadata(what string, err error) error {
	return kafka.NewError(kafka.ErrTimedOut, fmt.Sprintf("%s is not known (the Metadata request failed: %v): not asked", what, err), false)
}

// Within returns timeout, or less if ctx ends sooner (at least 1 ms):
// the bound of a check that takes no context (RefusingLeaders,
// ControllerRefuses).
func Within(ctx context.Context, timeout time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	return max(timeout, time.Millisecond)
}

// ended returns ctx's error if ctx has ended or ends within 50 ms (then
// after waiting for it): a check bounded by ctx (Within) that failed
// because ctx was ending reports the caller's deadline, not its own
// failure.
func ended(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < 50*time.Millisecond {
		<-ctx.Done()
	}
	return ctx.Err()
}

// brokerAddrs maps each broker md lists to its host:port.
func brokerAddrs(md *kafka.Metadata) map[int32]string {
	addr := make(map[int32]string, len(md.Brokers))
	for _, b := range md.Brokers {
		addr[b.ID] = net.JoinHostPort(b.Host, strconv.Itoa(b.Port))
	}
	return addr
}

// DescribeTopics is admin's DescribeTopics of topics, bounded by ctx and
// timeout, in librdkafka too (SetAdminRequestTimeout), unless admin's
// controller refuses connections (ControllerRefuses): then nothing is
// asked and that retriable error is returned. Every DescribeTopics of
// the module goes through here (the runner's start-up requests, in
// startAdmin.do, check the controller themselves).
func DescribeTopics(ctx context.Context, admin *kafka.AdminClient, topics []string, timeout time.Duration) (kafka.DescribeTopicsResult, error) {
	if err := ControllerRefuses(admin, Within(ctx, timeout)); err != nil {
		if cerr := ended(ctx); cerr != nil {
			return kafka.DescribeTopicsResult{}, cerr
		}
		return kafka.DescribeTopicsResult{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return admin.DescribeTopics(rctx, kafka.NewTopicCollectionOfTopicNames(topics), kafka.SetAdminRequestTimeout(timeout))
}

// TopicID returns topic's id (KIP-516) as DescribeTopics (ctx, timeout)
// answers it, or an error: the request's, the topic's in the answer, or
// one saying the answer holds no id.
func TopicID(ctx context.Context, admin *kafka.AdminClient, topic string, timeout time.Duration) (string, error) {
	d, err := DescribeTopics(ctx, admin, []string{topic}, timeout)
	if err != nil {
		return "", fmt.Errorf("kafkaclient: describe %s: %w", topic, err)
	}
	for _, td := range d.TopicDescriptions {
		if td.Name != topic {
			continue
		}
		if td.Error.Code() != kafka.ErrNoError {
			return "", fmt.Errorf("kafkaclient: describe %s: %w", topic, td.Error)
		}
		if id := td.TopicID.String(); id != "" {
			return id, nil
		}
	}
	return "", fmt.Errorf("kafkaclient: no topic id of %s in the broker's answer", topic)
}

// DeleteRecords deletes, through admin, the records of each partition of
// want (all of one topic) below its offset (DeleteRecords, bounded by ctx
// and timeout, in librdkafka and in the broker too) and returns the log
// start the broker answered for each partition it deleted in (nil if the
// request failed), and the errors, each naming its partition and offset:
// a partition whose leader refuses connections is not asked
// (RefusingLeaders), its error retriable.
func DeleteRecords(ctx context.Context, admin *kafka.AdminClient, want []kafka.TopicPartition, timeout time.Duration) (map[int32]int64, error) {
	var errs []error
	if len(want) > 0 {
		ps := make([]int32, len(want))
		for i, tp := range want {
			ps[i] = tp.Partition
		}
		refused := RefusingLeaders(admin, *want[0].Topic, ps, Within(ctx, timeout))
		if err := ended(ctx); err != nil {
			return nil, err
		}
		left := want[:0:0]
		for _, tp := range want {
			if err := refused[tp.Partition]; err != nil {
				errs = append(errs, fmt.Errorf("partition %d up to offset %d: %w", tp.Partition, tp.Offset, err))
				continue
			}
			left = append(left, tp)
		}
		want = left
	}
	if len(want) == 0 {
		return nil, errors.Join(errs...)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The operation timeout is the broker's: it holds a DeleteRecords
	// until every in-sync replica has the new log start (a killed
	// follower until it leaves the ISR), and answers nothing else on the
	// connection meanwhile (a Metadata request behind it timed out for a
	// minute in TestAdminQuestionsToAKilledLeaderDoNotSpin, librdkafka's
	// default operation timeout). Three quarters of timeout: the broker's
	// answer, naming the partitions it timed out, comes before the
	// client stops waiting.
	res, err := admin.DeleteRecords(dctx, want, kafka.SetAdminRequestTimeout(timeout), kafka.SetAdminOperationTimeout(timeout*3/4))
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	low := map[int32]int64{}
	for _, r := range res.DeleteRecordsResults {
		tp := r.TopicPartition
		if tp.Error != nil {
			errs = append(errs, fmt.Errorf("partition %d up to offset %d: %w", tp.Partition, tp.Offset, tp.Error))
			continue
		}
		if r.DeletedRecords != nil {
			low[tp.Partition] = int64(r.DeletedRecords.LowWatermark)
		}
	}
	return low, errors.Join(errs...)
}

// refuses dials addr and returns the error if the connection is refused
// (syscall.ECONNREFUSED), nil if it connects (the connection is closed at
// once, before any Kafka request), fails otherwise or takes longer than
// dialTimeout. An address that accepted a connection less than
// acceptedFor ago is not dialled again (accepted, shared by every client
// of the process): the stage loops of a process ask at the same moments,
// and each dial is a connection the broker accepts and sees closed.
func refuses(addr string) error {
	accepted.Lock()
	at, ok := accepted.at[addr]
	accepted.Unlock()
	if ok && time.Since(at) < acceptedFor {
		return nil
	}
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	accepted.Lock()
	defer accepted.Unlock()
	if err == nil {
		c.Close()
		if accepted.at == nil {
			accepted.at = map[string]time.Time{}
		}
		accepted.at[addr] = time.Now()
		return nil
	}
	delete(accepted.at, addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	return nil
}

// accepted holds when each address last accepted refuses' dial.
var accepted struct {
	sync.Mutex
	at map[string]time.Time
}

// acceptedFor is how long an address that accepted a dial is taken to
// accept without another: a leader killed within it can still be sent a
// request, which then busy-loops in librdkafka until the request's own
// timeout (every caller sets one: kafka.SetAdminRequestTimeout). Short:
// with 1 s, TestAdminQuestionsToAKilledLeaderDoNotSpin's process used
// 1.05 s of CPU after the kill (a request of the first second spun its
// 2 s out), 0.27-0.38 s with no memory at all; it is there to spare the
// broker the loops' dials made at the same moment.
const acceptedFor = 200 * time.Millisecond

// askable returns partitions without those in refused, in their order.
func askable(partitions []int32, refused map[int32]error) []int32 {
	if len(refused) == 0 {
		return partitions
	}
	out := make([]int32, 0, len(partitions))
	for _, p := range partitions {
		if refused[p] == nil {
			out = append(out, p)
		}
	}
	return out
}

// refusedErrors joins refused's errors in partitions' order.
func refusedErrors(partitions []int32, refused map[int32]error) error {
	var errs []error
	for _, p := range partitions {
		if err := refused[p]; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dialTimeout bounds RefusingLeaders' dial of one leader; metadataTimeout
// its Metadata request.
const (
	dialTimeout     = 500 * time.Millisecond
	metadataTimeout = 5 * time.Second
)

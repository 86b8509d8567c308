package kafkaclient

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// WaitServed returns once every partition of topics answers a ListOffsets,
// that is once each partition's leader has created its log; or, when ctx
// ends first, an error naming how many partitions were not served and the
// last answer, wrapping ctx.Err(). Each ListOffsets request is given
// attempt (a non-positive attempt: 10 s); the requests are 50 ms apart.
//
// Why: the broker lists a new partition's leader in its metadata before
// that leader has created the partition's log, and a produce meanwhile
// fails NOT_LEADER_OR_FOLLOWER. An idempotent or transactional producer
// (five requests in flight) whose first batch to a partition fails so and
// whose next, already sent, arrives once the log exists has that next
// batch appended though its first sequence is not 0 (a broker with no
// producer state for the partition takes any first sequence: Kafka before
// 4.5, KAFKA-15591), and librdkafka then reports the first batch
// delivered, "implicitly acked by subsequent batch success", with no
// offset, without sending it: records lost without an error. A ListOffsets
// needs the partition's log as a produce does, so once each answers no
// produce meets that refusal. Found by TestChaos's input check (its
// producer lost the first record of two partitions of a topic it had just
// created). Call it after CreateTopics and before the first produce to
// the topics it created.
//
// A partition whose leader refuses connections is not asked that round
// (RefusingLeaders). A ListOffsets that fails as a whole ("No leaders
// found": the client's metadata of a new topic has no leaders yet)
// refreshes each pending topic's metadata with a request of its own
// before the next try.
func WaitServed(ctx context.Context, admin *kafka.AdminClient, topics []kafka.TopicSpecification, attempt time.Duration) error {
	if attempt <= 0 {
		attempt = 10 * time.Second
	}
	type part struct {
		topic string
		p     int32
	}
	pending := map[part]bool{}
	for _, t := range topics {
		for p := 0; p < t.NumPartitions; p++ {
			pending[part{t.Topic, int32(p)}] = true
		}
	}
	var last error
	for len(pending) > 0 {
		byTopic := map[string][]int32{}
		for k := range pending {
			byTopic[k.topic] = append(byTopic[k.topic], k.p)
		}
		req := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(pending))
		for topic, ps := range byTopic {
			refused := RefusingLeaders(admin, topic, ps, attempt)
			if len(refused) > 0 {
				last = refusedErrors(ps, refused)
			}
			for _, p := range askable(ps, refused) {
				req[kafka.TopicPartition{Topic: &topic, Partition: p}] = kafka.LatestOffsetSpec
			}
		}
		var res kafka.ListOffsetsResult
		var err error
		if len(req) > 0 {
			actx, cancel := context.WithTimeout(ctx, attempt)
			res, err = admin.ListOffsets(actx, req, kafka.SetAdminRequestTimeout(attempt))
			cancel()
		}
		if err != nil {
			last = err
			refreshed := map[string]bool{}
			for k := range pending {
				if !refreshed[k.topic] {
					refreshed[k.topic] = true
					_, _ = admin.GetMetadata(&k.topic, false, int(attempt.Milliseconds()))
				}
			}
		} else {
			for tp, info := range res.ResultInfos {
				if _, err := AnsweredOffset(info, false); err != nil {
					last = fmt.Errorf("%s [%d]: %w", *tp.Topic, tp.Partition, err)
					continue
				}
				delete(pending, part{*tp.Topic, tp.Partition})
			}
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkaclient: %d partitions of the topics just created not served by their leaders yet (the last answer: %v): %w", len(pending), last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

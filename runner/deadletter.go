package runner

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// ensureDeadLetterTopic makes sure o.DeadLetterTopic exists under
// --error_policy=dead_letter (nothing to do otherwise): created like the
// internal topics (one partition, the broker's replication factor,
// max.message.bytes kafkaclient.InternalTopicMaxMessageBytes, so that any
// record of an internal topic fits) if missing, used as it is, the
// user's, if it exists (its partitions and settings untouched). It
// returns the topic's max.message.bytes, for the loops' size check (0:
// unknown, left to the broker). A dead-letter topic the pipeline reads or
// writes itself (a Kafka read's or write's, kafkaio's own dead-letter
// topic, or a topic of the plan) is refused: its records would come back
// into the job, or mix with its data.
func ensureDeadLetterTopic(ctx context.Context, o Options, pl *plan.Plan, cp *checkedPlan) (limit int, err error) {
	topic := o.DeadLetterTopic
	if topic == "" {
		return 0, nil
	}
	if who, ok := cp.users[topic]; ok {
		return 0, fmt.Errorf("kafkastreams: --dead_letter_topic=%s: the topic is used by %s: the dead letters would mix with the job's records", topic, who)
	}
	if _, ok := pl.Topics()[topic]; ok {
		return 0, fmt.Errorf("kafkastreams: --dead_letter_topic=%s: the topic is one of the job's internal topics", topic)
	}
	admin, err := newStartAdmin(o.BootstrapServers, o.KafkaProperties)
	if err != nil {
		return 0, err
	}
	defer admin.close()
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	specs := []kafka.TopicSpecification{{Topic: topic, NumPartitions: 1, ReplicationFactor: -1,
		Config: map[string]string{"max.message.bytes": strconv.Itoa(kafkaclient.InternalTopicMaxMessageBytes)}}}
	res, err := admin.createTopics(cctx, specs)
	if err != nil {
		return 0, fmt.Errorf("kafkastreams: create the dead-letter topic %s: %w", topic, err)
	}
	if err := admin.waitServed(cctx, specs, res); err != nil {
		return 0, err
	}
	log := slog.Default().With("runner", Name)
	switch c := res[0].Error.Code(); c {
	case kafka.ErrNoError:
		log.Info("kafkastreams: created the dead-letter topic (--error_policy=dead_letter)", "topic", topic)
	case kafka.ErrTopicAlreadyExists:
	default:
		return 0, fmt.Errorf("kafkastreams: create the dead-letter topic %s (--dead_letter_topic): %w", topic, res[0].Error)
	}
	limits, err := maxMessageBytes(cctx, admin, []string{topic})
	if err != nil {
		log.Warn("kafkastreams: could not read the dead-letter topic's max.message.bytes: a dead letter too large for it is refused by the broker, not before", "topic", topic, "err", err)
		return 0, nil
	}
	return limits[topic], nil
}

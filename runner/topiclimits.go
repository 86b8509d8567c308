package runner

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// maxMessageBytes returns the max.message.bytes of each of topics as the
// broker answers DescribeConfigs through admin (the topic's own, or the
// broker's message.max.bytes it defaults to), by topic: the largest record
// batch each takes (issue 23: stage.Config.MaxMessageBytes). A topic the
// answer leaves out, or whose entry is not a number, is left out; an error
// of the request or of a topic names it (topicConfigs).
func maxMessageBytes(ctx context.Context, admin *startAdmin, topics []string) (map[string]int, error) {
	cfgs, err := topicConfigs(ctx, admin, topics)
	if err != nil {
		return nil, err
	}
	return limitsOf(cfgs), nil
}

// limitsOf is maxMessageBytes' answer from the topics' configs.
func limitsOf(cfgs map[string]map[string]string) map[string]int {
	out := map[string]int{}
	for t, c := range cfgs {
		if n, err := strconv.Atoi(c["max.message.bytes"]); err == nil {
			out[t] = n
		}
	}
	return out
}

// topicConfigs returns the configuration of each of topics as the broker
// answers DescribeConfigs through admin (each entry's value in force: the
// topic's own or the broker's default), by topic and entry name. A topic
// the answer leaves out is left out; so is a topic whose configs an ACL
// keeps from this client (TOPIC_AUTHORIZATION_FAILED: a Kafka source's
// topic needs no DescribeConfigs, README's ACL table; the broker alone
// checks the sizes of records written to such a topic); an error of the
// request or of another topic names it. A topic created a moment ago can be unknown to the broker
// answering (UNKNOWN_TOPIC_OR_PARTITION: seen when createTopics asked at
// once): asked again every 100 ms until ctx ends.
func topicConfigs(ctx context.Context, admin *startAdmin, topics []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	if len(topics) == 0 {
		return out, nil
	}
	rs := make([]kafka.ConfigResource, len(topics))
	for i, t := range topics {
		rs[i] = kafka.ConfigResource{Type: kafka.ResourceTopic, Name: t}
	}
	for {
		var res []kafka.ConfigResourceResult
		err := admin.do(ctx, "describing the topics' configs", func(actx context.Context, a *kafka.AdminClient) error {
			var err error
			res, err = a.DescribeConfigs(actx, rs, kafka.SetAdminRequestTimeout(attemptTimeout))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("kafkastreams: describe the configs of topics %v: %w", topics, err)
		}
		var unknown error
		for _, r := range res {
			if r.Error.Code() == kafka.ErrTopicAuthorizationFailed {
				continue
			}
			if r.Error.Code() == kafka.ErrUnknownTopicOrPart {
				unknown = fmt.Errorf("kafkastreams: describe the configs of topic %s: %w", r.Name, r.Error)
				continue
			}
			if r.Error.Code() != kafka.ErrNoError {
				return nil, fmt.Errorf("kafkastreams: describe the configs of topic %s: %w", r.Name, r.Error)
			}
			c := make(map[string]string, len(r.Config))
			for k, e := range r.Config {
				c[k] = e.Value
			}
			out[r.Name] = c
		}
		if unknown == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", unknown, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

package runner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/recordtime"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// userTopics returns the partition count of every user's topic in users
// (topic → who reads or writes it: checkedPlan.users, the Kafka sources,
// their dead-letter topics and the Kafka sinks). A topic that does not
// exist, or that this client may not describe (an ACL), is an error naming
// it and what reads or writes it: the runner never creates users' topics.
// limits are their max.message.bytes (maxMessageBytes: the sinks' and
// dead-letter topics' are what the stages check their records against;
// none, with a warning, if the broker would not say them), afterMax how
// far ahead of the broker's clock each takes a record's timestamp
// (timestampAfterMax; step.Sink.TimestampAfterMax).
func userTopics(ctx context.Context, bootstrap string, props map[string]string, users map[string]string) (out map[string]int32, limits map[string]int, afterMax map[string]time.Duration, err error) {
	out = map[string]int32{}
	if len(users) == 0 {
		return out, map[string]int{}, map[string]time.Duration{}, nil
	}
	admin, err := newStartAdmin(bootstrap, props)
	if err != nil {
		return nil, nil, nil, err
	}
	defer admin.close()
	names := make([]string, 0, len(users))
	for t := range users {
		names = append(names, t)
	}
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	res, err := admin.describeTopics(cctx, "describing the users' topics", names)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kafkastreams: describe users' topics %v: %w", names, err)
	}
	for _, d := range res.TopicDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
			out[d.Name] = int32(len(d.Partitions))
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
			return nil, nil, nil, fmt.Errorf("kafkastreams: topic %q, used by %s, does not exist (the runner does not create users' topics)", d.Name, users[d.Name])
		case kafka.ErrTopicAuthorizationFailed:
			return nil, nil, nil, fmt.Errorf("kafkastreams: topic %q, used by %s: not authorized (an ACL denies this client): %v", d.Name, users[d.Name], d.Error)
		default:
			return nil, nil, nil, fmt.Errorf("kafkastreams: topic %q, used by %s: %v", d.Name, users[d.Name], d.Error)
		}
	}
	cfgs, err := topicConfigs(cctx, admin, names)
	if err != nil {
		// No DESCRIBE_CONFIGS permission, say: the broker alone checks
		// the records' sizes.
		slog.Default().With("runner", Name).Warn("kafkastreams: could not read the configs (max.message.bytes, message.timestamp.after.max.ms) of the users' topics: a record too large for a sink is refused by the broker, not before, and a sink record's event time more than an hour ahead of the clock (Kafka's default limit) is written with the time of writing", "err", err)
		cfgs = map[string]map[string]string{}
	}
	return out, limitsOf(cfgs), timestampAfterMax(cfgs), nil
}

// timestampAfterMax is, for each topic in cfgs (topicConfigs), how far
// ahead of the broker's clock it takes a record's timestamp: its
// message.timestamp.after.max.ms (KIP-937; Kafka 4's default is one hour),
// recordtime.NoTimestampLimit when message.timestamp.type is LogAppendTime
// (the broker stamps its own time), the limit is Long.MAX_VALUE or the
// entry is missing (a broker before Kafka 3.6, whose
// message.timestamp.difference.max.ms has no limit by default). A topic
// whose configs were not read, or whose entry is not a number, is left
// out: sinkSpecs gives it recordtime.DefaultTimestampAfterMax.
func timestampAfterMax(cfgs map[string]map[string]string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for t, c := range cfgs {
		if c["message.timestamp.type"] == "LogAppendTime" {
			out[t] = recordtime.NoTimestampLimit
			continue
		}
		v, ok := c["message.timestamp.after.max.ms"]
		if !ok {
			out[t] = recordtime.NoTimestampLimit
			continue
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
			// Not a number: the default limit.
		case ms >= int64(math.MaxInt64/time.Millisecond):
			out[t] = recordtime.NoTimestampLimit
		case ms >= 0:
			out[t] = time.Duration(ms) * time.Millisecond
		}
	}
	return out
}

// sinkSpecs are stage s's Kafka sinks for its loop (afterMax: their
// topics' timestampAfterMax; a topic left out gets
// recordtime.DefaultTimestampAfterMax): the records' key,
// value and event time decoded from the elements with the PCollection's
// windowed value coder (KV<[]byte, []byte>, or []byte values without keys:
// standard coders, the same on the wire, whose bytes cannot tell null
// from empty; or kafkaio.KafkaRecord of a WriteRecords, with its null key
// or value and its headers).
func sinkSpecs(comps *pipepb.Components, s *plan.Stage, partitions map[string]int32, afterMax map[string]time.Duration) ([]step.Sink, error) {
	var out []step.Sink
	cu := graphx.NewCoderUnmarshaller(comps.GetCoders())
	for _, k := range s.KafkaSinks {
		col := comps.GetPcollections()[k.PCollection]
		ec, err := cu.Coder(col.GetCoderId())
		if err != nil {
			return nil, fmt.Errorf("kafkastreams: stage %s: coder of %s: %w", s.Name, k.PCollection, err)
		}
		wc, err := cu.WindowCoder(comps.GetWindowingStrategies()[col.GetWindowingStrategyId()].GetWindowCoderId())
		if err != nil {
			return nil, fmt.Errorf("kafkastreams: stage %s: window coder of %s: %w", s.Name, k.PCollection, err)
		}
		dec := exec.MakeElementDecoder(coder.NewW(ec, wc))
		topic := k.Topic
		limit, ok := afterMax[topic]
		if !ok {
			limit = recordtime.DefaultTimestampAfterMax
		}
		out = append(out, step.Sink{
			PCollection:       k.PCollection,
			Topic:             topic,
			Partitions:        partitions[topic],
			TimestampAfterMax: limit,
			Decode: func(e []byte) (step.SinkRecord, error) {
				fv, err := dec.Decode(bytes.NewReader(e))
				if err != nil {
					return step.SinkRecord{}, err
				}
				switch v := fv.Elm.(type) {
				case kafkaio.KafkaRecord:
					r := step.SinkRecord{Key: v.Key, Value: v.Value, EventTime: fv.Timestamp}
					for _, h := range v.Headers {
						r.Headers = append(r.Headers, step.Header{Key: h.Key, Value: h.Value})
					}
					return r, nil
				case []byte:
					if fv.Elm2 == nil {
						return step.SinkRecord{Value: v, EventTime: fv.Timestamp}, nil
					}
					val, ok := fv.Elm2.([]byte)
					if !ok {
						return step.SinkRecord{}, fmt.Errorf("kafkaio.Write(%s): the value is a %T, want []byte", topic, fv.Elm2)
					}
					return step.SinkRecord{Key: v, Value: val, EventTime: fv.Timestamp}, nil
				}
				return step.SinkRecord{}, fmt.Errorf("kafkaio.Write(%s): the element is a %T, want KV<[]byte, []byte>, []byte or kafkaio.KafkaRecord", topic, fv.Elm)
			},
		})
	}
	return out, nil
}

// checkKafkaSinks refuses a Kafka write whose Config names another
// cluster than the runner's: the stage producing its input writes the
// records with its own transactional producer, on the runner's
// --bootstrap_servers, so they would silently land there.
func checkKafkaSinks(comps *pipepb.Components, pl *plan.Plan, bootstrap string) error {
	for _, s := range pl.Stages {
		for _, k := range s.KafkaSinks {
			t := comps.GetTransforms()[k.Transform]
			c, ok := kafkaio.SinkConfig(plan.NativeDoFn(t))
			if !ok {
				return fmt.Errorf("kafkastreams: stage %s: %q is not a kafkaio.Write", s.Name, t.GetUniqueName())
			}
			if c.BootstrapServers != "" && c.BootstrapServers != bootstrap {
				return fmt.Errorf("kafkastreams: %s: bootstrap servers %q: a write to another cluster than the runner's --bootstrap_servers (%s) is not supported (the records are written in the runner's transactions)", t.GetUniqueName(), c.BootstrapServers, bootstrap)
			}
		}
	}
	return nil
}

package kafkaio

import (
	"flag"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// runnerBootstrap is the kafkastreams runner's --bootstrap_servers when the
// runner is linked in and the flag is set, else "".
func runnerBootstrap() string {
	if f := flag.Lookup("bootstrap_servers"); f != nil {
		return f.Value.String()
	}
	return ""
}

// runnerProperties are the kafkastreams runner's --kafka_property settings
// (security settings every client of the job uses), when the runner is
// linked in.
func runnerProperties() map[string]string {
	if f := flag.Lookup("kafka_property"); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			if m, ok := g.Get().(map[string]string); ok {
				return m
			}
		}
	}
	return nil
}

// metadataTimeoutMs bounds ReadPattern's metadata request.
const metadataTimeoutMs = 10000

// matchTopics lists the topics of c's cluster whose whole name matches
// pattern, sorted, leaving out Kafka's internal topics ("__…").
func matchTopics(c Config, pattern string) ([]string, error) {
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return nil, fmt.Errorf("%w: ReadPattern(%q): %v", ErrConfig, pattern, err)
	}
	cm := kafkaclient.Base(c.bootstrap(), runnerProperties(), c.Properties)
	ac, err := kafka.NewAdminClient(&cm)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: ReadPattern(%q): admin client for %s: %w", pattern, c.bootstrap(), err)
	}
	defer ac.Close()
	md, err := ac.GetMetadata(nil, true, metadataTimeoutMs)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: ReadPattern(%q): listing the topics of %s: %w (is a broker running there?)", pattern, c.bootstrap(), err)
	}
	var out []string
	for name := range md.Topics {
		if !strings.HasPrefix(name, "__") && re.MatchString(name) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: ReadPattern(%q): no topic of %s matches (the topics are listed when the pipeline is built)", ErrConfig, pattern, c.bootstrap())
	}
	sort.Strings(out)
	return out, nil
}

// offsetForTime is the offset of partition p's first record stamped at or
// after ms (Kafka's offsetsForTimes), or the partition's end offset when no
// record is that late (WithStartAt).
func offsetForTime(c *kafka.Consumer, topic string, p int32, ms int64) (int64, error) {
	got, err := c.OffsetsForTimes([]kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(ms)}}, metadataTimeoutMs)
	if err == nil && len(got) == 1 && got[0].Error != nil {
		err = got[0].Error
	}
	if err != nil {
		return 0, fmt.Errorf("kafkaio.Read(%s): partition %d: offset for start time %d ms: %w", topic, p, ms, err)
	}
	if o := got[0].Offset; o >= 0 {
		return int64(o), nil
	}
	_, high, err := c.QueryWatermarkOffsets(topic, p, metadataTimeoutMs)
	if err != nil {
		return 0, fmt.Errorf("kafkaio.Read(%s): end offset of partition %d: %w", topic, p, err)
	}
	return high, nil
}

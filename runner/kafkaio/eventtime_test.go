package kafkaio

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestEventTimeWithoutTimestamp: a record without a Kafka timestamp
// (NO_TIMESTAMP) has event time -1 ms, as on the kafkastreams runner's
// source stage and in Beam Java's KafkaIO (CreateTime policy), not year 1
// (confluent-kafka-go's zero Timestamp); one stamped at the epoch has 0.
func TestEventTimeWithoutTimestamp(t *testing.T) {
	for _, c := range []struct {
		m    kafka.Message
		want int64
	}{
		{kafka.Message{TimestampType: kafka.TimestampNotAvailable}, -1},
		{kafka.Message{Timestamp: time.UnixMilli(0), TimestampType: kafka.TimestampCreateTime}, 0},
		{kafka.Message{Timestamp: time.UnixMilli(1_700_000_000_123), TimestampType: kafka.TimestampLogAppendTime}, 1_700_000_000_123},
	} {
		got, err := eventTime(nil, &c.m)
		if err != nil || int64(got) != c.want {
			t.Errorf("eventTime of a record stamped %v (%v) = %d, %v; want %d", c.m.Timestamp, c.m.TimestampType, got, err, c.want)
		}
	}
}

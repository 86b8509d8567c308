package stage

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestInputsTimestamps: a record without a Kafka timestamp (Kafka's
// NO_TIMESTAMP) is -1 to the step, and one stamped at the epoch is 0, a
// timestamp like any other: the two were both 0, so a record of the epoch
// lost its timestamp in kafkaio.ReadRecords and a record without one got
// the epoch where the kafkaio DoFn on other runners gave year 1.
func TestInputsTimestamps(t *testing.T) {
	topic := "in"
	msg := func(off int64, ts time.Time, typ kafka.TimestampType) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: kafka.Offset(off)}, Timestamp: ts, TimestampType: typ}
	}
	ins, _ := inputs([]*kafka.Message{
		msg(0, time.Time{}, kafka.TimestampNotAvailable),
		msg(1, time.UnixMilli(0), kafka.TimestampCreateTime),
		msg(2, time.UnixMilli(1_700_000_000_000), kafka.TimestampLogAppendTime),
	})
	for i, want := range []struct {
		ts  int64
		lat bool
	}{{-1, false}, {0, false}, {1_700_000_000_000, true}} {
		if ins[i].Timestamp != want.ts || ins[i].LogAppendTime != want.lat {
			t.Errorf("record %d: timestamp %d, LogAppendTime %v; want %d, %v", i, ins[i].Timestamp, ins[i].LogAppendTime, want.ts, want.lat)
		}
	}
}

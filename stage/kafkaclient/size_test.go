package kafkaclient

import (
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestBatchOfOneBytes: the sizes of one-record batches, worked by hand
// from Kafka's record batch format (61 bytes of header; the record's
// fields as zigzag varints): the largest record of a topic with the
// broker's default max.message.bytes, 1 048 588, has a key of 100 bytes
// and a value of 1 048 415 (integration's
// TestRecordSizeLargestRecordsCrossEveryStage checks one byte more is
// refused by the broker).
func TestBatchOfOneBytes(t *testing.T) {
	for _, c := range []struct {
		k, v int
		h    []kafka.Header
		want int
	}{
		// body 1+1+1 + 1+0 + 1+0 + 1 = 6; length 1.
		{0, 0, nil, 61 + 1 + 6},
		// body 3 + 2+100 + 3+1048415 + 1 = 1048524; its length, 3 bytes.
		{100, 1_048_415, nil, 1_048_588},
		{100, 1_048_416, nil, 1_048_589},
		// A header "h"="xy": 1+1 + 1+2 more, and the count.
		{1, 1, []kafka.Header{{Key: "h", Value: []byte("xy")}}, 61 + 1 + (3 + 2 + 2 + 1 + 2 + 3)},
		// 63 fits a 1-byte zigzag varint, 64 does not (nor a body of 69).
		{50, 0, nil, 61 + 1 + (3 + 1 + 50 + 1 + 1)},
		{63, 0, nil, 61 + 2 + (3 + 1 + 63 + 1 + 1)},
		{64, 0, nil, 61 + 2 + (3 + 2 + 64 + 1 + 1)},
	} {
		if got := BatchOfOneBytes(c.k, c.v, c.h); got != c.want {
			t.Errorf("BatchOfOneBytes(%d, %d, %v) = %d, want %d", c.k, c.v, c.h, got, c.want)
		}
	}
}

// TestFitLargestRecord: every producer and consumer configuration of the
// runner lets the largest batch of an internal topic through, keeps a
// user's larger setting, and is one librdkafka accepts (it refuses a
// receive.message.max.bytes below fetch.max.bytes + 512).
func TestFitLargestRecord(t *testing.T) {
	props := map[string]string{"fetch.max.bytes": "200000000"}
	for name, cm := range map[string]kafka.ConfigMap{
		"transactional": TransactionalProducerConfig("127.0.0.1:1", nil, "t"),
		"lean":          LeanProducerConfig("127.0.0.1:1"),
		"idempotent":    IdempotentProducerConfig("127.0.0.1:1"),
	} {
		if got := intSetting(cm, "message.max.bytes"); got != ProducerMessageMaxBytes {
			t.Errorf("%s producer: message.max.bytes %d, want %d", name, got, ProducerMessageMaxBytes)
		}
		p, err := kafka.NewProducer(&cm)
		if err != nil {
			t.Fatalf("%s producer: %v", name, err)
		}
		p.Close()
	}
	big := LeanProducerConfig("127.0.0.1:1", map[string]string{"message.max.bytes": "500000000"})
	if got := intSetting(big, "message.max.bytes"); got != 500_000_000 {
		t.Errorf("a user's message.max.bytes 500000000 became %d", got)
	}
	for name, cm := range map[string]kafka.ConfigMap{
		"group":              GroupConsumerConfig("127.0.0.1:1", nil, "g", 0, true, nil),
		"assigned":           AssignedReaderConfig("127.0.0.1:1", nil, "g"),
		"end":                EndReaderConfig(Base("127.0.0.1:1"), "g"),
		"group, user fetch":  GroupConsumerConfig("127.0.0.1:1", props, "g", 0, true, nil),
		"end, user fetch":    EndReaderConfig(Base("127.0.0.1:1", props), "g"),
		"assigned, user big": AssignedReaderConfig("127.0.0.1:1", map[string]string{"receive.message.max.bytes": "900000000"}, "g"),
		// librdkafka raises an unset fetch.max.bytes to message.max.bytes.
		"group, user max": GroupConsumerConfig("127.0.0.1:1", map[string]string{"message.max.bytes": "500000000"}, "g", 0, true, nil),
	} {
		want := minReceiveMessageMaxBytes
		if strings.Contains(name, "user fetch") {
			want = 200_000_512
		}
		if strings.Contains(name, "user big") {
			want = 900_000_000
		}
		if strings.Contains(name, "user max") {
			want = 500_000_512
		}
		if got := intSetting(cm, "receive.message.max.bytes"); got != want {
			t.Errorf("%s consumer: receive.message.max.bytes %d, want %d", name, got, want)
		}
		c, err := kafka.NewConsumer(&cm)
		if err != nil {
			t.Fatalf("%s consumer: %v", name, err)
		}
		_ = c.Close()
	}
}

package runner

import (
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/stage/step"
)

// TestKafkaRecordOfTimestamp: kafkaio.ReadRecords' element of a record
// stamped at the epoch carries that timestamp, and one of a record without
// a timestamp (step.In's -1) the zero time, as the kafkaio DoFn on other
// runners gives them (kafkaRecordOfMessage); the epoch's was taken for
// none.
func TestKafkaRecordOfTimestamp(t *testing.T) {
	if got := kafkaRecordOf("in", step.In{Timestamp: 0}).Timestamp; !got.Equal(time.UnixMilli(0)) {
		t.Errorf("record stamped at the epoch: Timestamp %v, want %v", got, time.UnixMilli(0))
	}
	if got := kafkaRecordOf("in", step.In{Timestamp: -1}).Timestamp; !got.IsZero() {
		t.Errorf("record without a timestamp: Timestamp %v, want the zero time", got)
	}
}

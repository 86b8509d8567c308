// Package recordtime is the rule for a record's Kafka timestamp from an
// element's event time: which event times Kafka takes as a timestamp
// (non-negative, within a topic's message.timestamp.after.max.ms of the
// broker's clock) and what a record gets otherwise (the time of writing).
// Pure (no Kafka client): the step package (stage/step) and the kafkaio
// writer on other runners share it.
package recordtime

import (
	"math"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// DefaultTimestampAfterMax is Kafka's default message.timestamp.after.max.ms
// since Kafka 4.0 (KIP-937 introduced it in 3.6 with no limit; 4.0 set one
// hour): a broker refuses a record whose CreateTime timestamp is more than
// this ahead of its clock (InvalidTimestampException), and with it the
// transaction. The limit taken for a topic whose configuration cannot be
// read.
const DefaultTimestampAfterMax = time.Hour

// NoTimestampLimit as an afterMax of For: the topic takes any
// timestamp (message.timestamp.type=LogAppendTime, where the broker stamps
// its own time, or message.timestamp.after.max.ms at its maximum).
const NoTimestampLimit time.Duration = -1

// maxClientTimestamp is the latest timestamp (ms) confluent-kafka-go can
// give a record: it sends a Message's Timestamp as UnixNano()/1e6, which
// wraps after 2262-04-11T23:47:16.854Z.
const maxClientTimestamp = mtime.Time(math.MaxInt64 / int64(time.Millisecond))

// timestampMargin is how far short of a topic's after-max limit a
// timestamp is still kept: the record reaches the broker after now (within
// the transaction) and the broker's clock may be behind this process's.
const timestampMargin = time.Minute

// For returns the timestamp to produce a record with whose
// event time is ts (mtime.Time, ms), at now, to a topic whose brokers take
// timestamps at most afterMax ahead of their clock (the topic's
// message.timestamp.after.max.ms; NoTimestampLimit: none): ts itself when
// Kafka takes it, else the zero time, with which the producer stamps the
// time of writing, as a Kafka producer does a record without a timestamp:
//   - ts at or before the epoch (Kafka's timestamps are non-negative, and
//     librdkafka takes 0 as none; Beam's start of time);
//   - ts too far ahead, with ahead true: more than afterMax, less a margin
//     of up to a minute (half of afterMax when that is shorter), ahead of
//     now (the broker would refuse the record and the transaction with
//     it), or past what the client carries (2262: the end of the global
//     window).
//
// So an element's event time is its record's timestamp whenever Kafka
// takes it, and an element whose event time it does not take (the end of
// the global window, an early pane of a window that ends tomorrow) is
// written all the same.
func For(ts mtime.Time, now time.Time, afterMax time.Duration) (t time.Time, ahead bool) {
	if ts <= 0 {
		return time.Time{}, false
	}
	if ts > maxClientTimestamp {
		return time.Time{}, true
	}
	if afterMax >= 0 {
		limit := now.Add(afterMax - min(timestampMargin, afterMax/2))
		if ts > mtime.FromTime(limit) {
			return time.Time{}, true
		}
	}
	return ts.ToTime(), false
}

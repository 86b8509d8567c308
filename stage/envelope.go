package stage

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// reportsEndOfTime reports whether v, an Envelope record value, carries a
// watermark report at the end of time (committed_watermark_millis at
// mtime.MaxTimestamp: the reporting task is done). An element record (the
// fast path of envelope.Decode, without proto.Unmarshal) or a value that
// does not decode is false.
func reportsEndOfTime(v []byte) bool {
	e, rs, err := envelope.Decode(v)
	if err != nil || e != nil {
		return false
	}
	for _, r := range rs {
		if r.Core().CommittedWatermark >= mtime.MaxTimestamp {
			return true
		}
	}
	return false
}

// isReports reports whether v, an internal topic's record value, is an
// Envelope of watermark reports (not an element).
func isReports(v []byte) bool {
	e, rs, err := envelope.Decode(v)
	return err == nil && e == nil && len(rs) > 0
}

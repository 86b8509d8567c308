package stage

import (
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/step"
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

// untrustedLogEvery is the least time between two log lines about
// skipped records of one loop (countUntrusted): a topic flooded with
// records the runner did not write costs a line a second, not one each.
const untrustedLogEvery = time.Second

// countUntrusted counts the input records the committed attempt skipped
// (step.Untrusted: not written by the application's runner, committed
// past like any consumed record) in Stats.Untrusted and
// Observer.Untrusted, and logs the first of them, naming its topic,
// partition, offset and what was wrong, at most once per
// untrustedLogEvery, with how many were skipped since the last line.
func (l *Loop) countUntrusted(us []step.Untrusted) {
	if len(us) == 0 {
		return
	}
	l.stats.untrusted.Add(uint64(len(us)))
	if f := l.cfg.Observer.Untrusted; f != nil {
		f(l.cfg.Spec.InputTopic, len(us))
	}
	l.untrustedQuiet += len(us)
	if now := time.Now(); now.Sub(l.untrustedLogged) >= untrustedLogEvery {
		u := us[0]
		l.log.Warn("stage: skipped a record of an internal topic that this application's runner did not write (committed past it; see README, Security)",
			"topic", l.cfg.Spec.InputTopic, "partition", u.Task, "offset", u.Offset, "reports_refused", u.Reports, "reason", u.Reason,
			"skipped_since_last_line", l.untrustedQuiet)
		l.untrustedLogged, l.untrustedQuiet = now, 0
	}
}

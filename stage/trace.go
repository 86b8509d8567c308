package stage

import (
	"os"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// EnvTraceCommits, when set to a non-empty value, makes every loop log
// one line per committed transaction ("stage: commit trace", Info) with
// the wall-clock times of its way through the loop, in Unix
// milliseconds: poll_ms when its poll began, report_ms when the poll
// took its first record of watermark reports (0: none; an internal
// input), began_ms when the attempt began (the poll ended), decided_ms
// when the step had decided it, committed_ms when the transaction
// committed; and the tasks' lowest output watermark after it (out_wm,
// ms). A tool for finding where a pipeline's latency goes (issue 24's
// steady run), not for production: a line per commit.
const EnvTraceCommits = "KAFKASTREAMS_TRACE_COMMITS"

// commitTrace is one attempt's times for EnvTraceCommits.
type commitTrace struct {
	on           bool
	poll, report time.Time
}

// newCommitTrace reads EnvTraceCommits.
func newCommitTrace() commitTrace { return commitTrace{on: os.Getenv(EnvTraceCommits) != ""} }

// polling notes the start of a poll.
func (c *commitTrace) polling() {
	if c.on {
		c.poll, c.report = time.Now(), time.Time{}
	}
}

// traceRecord notes a polled record of value v: the first of reports.
func (l *Loop) traceRecord(v []byte) {
	if l.trace.on && l.trace.report.IsZero() && !l.cfg.Spec.RawInput && isReports(v) {
		l.trace.report = time.Now()
	}
}

// traceCommit logs the committed attempt's line; stateRecords is how many
// changelog records it wrote (Ready.State), offs are the tasks it committed
// offsets of.
func (l *Loop) traceCommit(began, decided, end time.Time, recordsIn int, elementsOut uint64, stateRecords int, offs []int32) {
	if !l.trace.on {
		return
	}
	wm := mtime.MaxTimestamp
	for _, p := range offs {
		if t := l.tasks[p]; t != nil {
			wm = min(wm, t.OutputWatermark())
		}
	}
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	l.log.Info("stage: commit trace", "poll_ms", ms(l.trace.poll), "report_ms", ms(l.trace.report), "began_ms", ms(began), "decided_ms", ms(decided), "committed_ms", ms(end), "records_in", recordsIn, "elements_out", elementsOut, "state_records", stateRecords, "out_wm", int64(wm))
}

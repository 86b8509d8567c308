package integration

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// loopSplit is where one stage loop's wall time went over a run, summed
// from its "stage: commit trace" lines (stage.EnvTraceCommits): each
// committed attempt's poll (poll_ms to began_ms), decision (the step's
// Decide: began_ms to decided_ms) and produce and commit (decided_ms to
// committed_ms). span is the first poll to the last commit; what the
// three leave of it went to attempts that committed nothing (a poll that
// found nothing, a decision with nothing to commit) and to the loop's own
// work between attempts.
type loopSplit struct {
	stage                     string
	commits, recordsIn        int
	poll, decide, commit      time.Duration
	firstPollMs, lastCommitMs int64
}

// span is the loop's first poll to its last commit.
func (s loopSplit) span() time.Duration {
	return time.Duration(s.lastCommitMs-s.firstPollMs) * time.Millisecond
}

// commitSplit reads a runner's log (slog's text format) and returns each
// stage's loopSplit, in the order of the stages' first trace lines; none
// without stage.EnvTraceCommits. A malformed trace line is an error.
func commitSplit(log string) ([]loopSplit, error) {
	var out []loopSplit
	at := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="stage: commit trace"`) {
			continue
		}
		f := map[string]string{}
		for _, w := range strings.Fields(line) {
			if k, v, ok := strings.Cut(w, "="); ok {
				f[k] = v
			}
		}
		var ms [5]int64
		for i, k := range []string{"poll_ms", "began_ms", "decided_ms", "committed_ms", "records_in"} {
			n, err := strconv.ParseInt(f[k], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commit trace line without a number %s: %q", k, line)
			}
			ms[i] = n
		}
		name := f["stage"]
		i, ok := at[name]
		if !ok {
			i = len(out)
			at[name] = i
			out = append(out, loopSplit{stage: name, firstPollMs: ms[0]})
		}
		s := &out[i]
		s.commits++
		s.recordsIn += int(ms[4])
		s.poll += time.Duration(ms[1]-ms[0]) * time.Millisecond
		s.decide += time.Duration(ms[2]-ms[1]) * time.Millisecond
		s.commit += time.Duration(ms[3]-ms[2]) * time.Millisecond
		s.firstPollMs = min(s.firstPollMs, ms[0])
		s.lastCommitMs = max(s.lastCommitMs, ms[3])
	}
	return out, sc.Err()
}

// formatSplit is splits on one line: per stage its name (cut at 24
// characters), commits, records in, and poll / decide / produce+commit in
// seconds and as shares of its span.
func formatSplit(splits []loopSplit) string {
	var parts []string
	for _, s := range splits {
		name := s.stage
		if len(name) > 24 {
			name = name[:24]
		}
		pct := func(d time.Duration) int {
			if s.span() <= 0 {
				return 0
			}
			return int(100 * d.Seconds() / s.span().Seconds())
		}
		parts = append(parts, fmt.Sprintf("%s %d commits, %d records in %.1f s: poll %.1f s (%d%%), decide %.1f s (%d%%), produce and commit %.1f s (%d%%)",
			name, s.commits, s.recordsIn, s.span().Seconds(), s.poll.Seconds(), pct(s.poll), s.decide.Seconds(), pct(s.decide), s.commit.Seconds(), pct(s.commit)))
	}
	return strings.Join(parts, "; ")
}

func TestCommitSplit(t *testing.T) {
	log := `time=2026-12-04T18:30:54.700Z level=INFO msg="stage: tasks assigned" runner=kafkastreams stage=s0-read partitions=[0]
time=2026-12-04T18:30:54.783Z level=INFO msg="stage: commit trace" runner=kafkastreams stage=s0-read poll_ms=1000 report_ms=0 began_ms=1100 decided_ms=1250 committed_ms=1270 records_in=5000 elements_out=669 out_wm=1
time=2026-12-04T18:30:54.944Z level=INFO msg="stage: commit trace" runner=kafkastreams stage=s1-gbk poll_ms=1050 report_ms=1060 began_ms=1150 decided_ms=1160 committed_ms=1200 records_in=600 elements_out=0 out_wm=-9223372036854775
time=2026-12-04T18:30:55.100Z level=INFO msg="stage: commit trace" runner=kafkastreams stage=s0-read poll_ms=1270 report_ms=0 began_ms=1370 decided_ms=1500 committed_ms=1530 records_in=7000 elements_out=700 out_wm=2
`
	got, err := commitSplit(log)
	if err != nil {
		t.Fatal(err)
	}
	want := []loopSplit{
		{stage: "s0-read", commits: 2, recordsIn: 12000, poll: 200 * time.Millisecond, decide: 280 * time.Millisecond, commit: 50 * time.Millisecond, firstPollMs: 1000, lastCommitMs: 1530},
		{stage: "s1-gbk", commits: 1, recordsIn: 600, poll: 100 * time.Millisecond, decide: 10 * time.Millisecond, commit: 40 * time.Millisecond, firstPollMs: 1050, lastCommitMs: 1200},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("commitSplit:\n got %+v\nwant %+v", got, want)
	}
	if s := formatSplit(got[:1]); s != "s0-read 2 commits, 12000 records in 0.5 s: poll 0.2 s (37%), decide 0.3 s (52%), produce and commit 0.1 s (9%)" {
		t.Errorf("formatSplit: %q", s)
	}
	if _, err := commitSplit(`msg="stage: commit trace" stage=s0 poll_ms=x began_ms=1 decided_ms=2 committed_ms=3 records_in=4`); err == nil {
		t.Error("a trace line with poll_ms=x: no error")
	}
	if got, err := commitSplit("time=x level=INFO msg=\"stage: tasks assigned\"\n"); err != nil || len(got) != 0 {
		t.Errorf("a log without trace lines: %v, %v", got, err)
	}
}

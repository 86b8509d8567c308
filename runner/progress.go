package runner

import (
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/explain"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// describeWatermark says in words where a stage's output watermark is, for
// the progress log: "done" at the end of time, "not started" at the
// beginning of time, which partitions have not reported while held, else
// the time (ISO 8601, UTC).
func describeWatermark(v service.StageView) string {
	s := v.Snapshot
	switch {
	case s.Held && len(s.Missing) > 0:
		return fmt.Sprintf("held: tasks %v have not reported yet", s.Missing)
	case s.Held:
		return "held: waiting for the first report"
	case s.Watermark >= mtime.MaxTimestamp:
		return "done (end of time)"
	case s.Watermark <= mtime.MinTimestamp:
		return "not started (beginning of time)"
	}
	return service.ISO(s.Watermark)
}

// logProgress logs one line for the job and one per stage: the stage's
// output watermark in words and the elements this instance's tasks of the
// stage have taken in and given out (committed). url is where
// GET /watermarks answers ("" if disabled).
func logProgress(log *slog.Logger, t *service.Tracker, pl *plan.Plan, loops map[string]*stage.Loop, url string, running time.Duration) {
	done := 0
	for _, s := range pl.Stages {
		if v, err := t.Stage(s.Name); err == nil && !v.Snapshot.Held && v.Snapshot.Watermark >= mtime.MaxTimestamp {
			done++
		}
	}
	attrs := []any{"running", running.Round(time.Second).String(), "stages_done", fmt.Sprintf("%d of %d", done, len(pl.Stages))}
	if url != "" {
		attrs = append(attrs, "watch", "curl -s "+url)
	}
	log.Info("kafkastreams: progress", attrs...)
	for _, s := range pl.Stages {
		wm := "no report yet"
		if v, err := t.Stage(s.Name); err == nil {
			wm = describeWatermark(v)
		}
		var st stage.Stats
		if l := loops[s.Name]; l != nil {
			st = l.Stats()
		}
		line := []any{"stage", s.Name, "watermark", wm, "records_in", st.RecordsIn, "elements_in", st.ElementsIn, "elements_out", st.ElementsOut, "commits", st.Commits, "aborts", st.Aborts}
		if st.DeadLetters > 0 {
			line = append(line, "dead_letters", st.DeadLetters)
		}
		if st.SidePauses > 0 {
			// Tasks held by side inputs: a resume by the 5 s recheck
			// is a pause no side input change ended (issue 24).
			line = append(line, "side_pauses", st.SidePauses, "side_rechecks", st.SideRechecks)
		}
		log.Info("kafkastreams: progress", line...)
	}
}

// stuckReminder is the longest the progress log stays silent about a stage
// that stays stuck for the same root cause (stuckLog).
const stuckReminder = 10 * time.Minute

// stuckLine is one line stuckLog.Next decides to log.
type stuckLine struct {
	// Kind is what happened: stuckBecame, stuckCauseChanged,
	// stuckReminded or stuckEnded.
	Kind stuckKind
	// X is the stage's explanation now.
	X explain.Explanation
	// Unmoved is how long the watermark had not moved: for stuckEnded,
	// from its last move before it got stuck to the first look at which
	// it was no longer stuck.
	Unmoved time.Duration
}

type stuckKind string

const (
	stuckBecame       stuckKind = "became stuck"
	stuckCauseChanged stuckKind = "root cause changed"
	stuckReminded     stuckKind = "still stuck"
	stuckEnded        stuckKind = "no longer stuck"
)

// stuckLog decides which stuck warnings the progress log writes, so that a
// stuck (or all-idle) pipeline does not repeat the same warning every
// progress tick: per stage, a warning when it becomes stuck, again when
// its explanation's root cause (Cause, RootStage, Partition) changes, a
// reminder when stuckReminder has passed since the last one, and an Info
// line once it is no longer stuck (its watermark moved, or it is done).
// Pure: time comes in as Next's now. Not safe for concurrent use (the
// progress callback is called from one goroutine).
type stuckLog struct {
	stages map[string]*stuckStage
}

type stuckStage struct {
	// root identifies the root cause last logged; saidAt is when a line
	// was last logged; movedAt is when the watermark last moved before
	// the stage got stuck (now - UnmovedMs at the first look).
	root            string
	saidAt, movedAt time.Time
}

// stuckRoot identifies an explanation's root cause: a change of any part
// is news to the reader of the log.
func stuckRoot(x explain.Explanation) string {
	p := "-"
	if x.Partition != nil {
		p = fmt.Sprint(*x.Partition)
	}
	return fmt.Sprintf("%s/%s/%s", x.Cause, x.RootStage, p)
}

// Next takes every stage's explanation at now and returns the lines to
// log, in xs's order, then the stuck stages xs no longer names, by name.
func (l *stuckLog) Next(xs []explain.Explanation, now time.Time) []stuckLine {
	if l.stages == nil {
		l.stages = map[string]*stuckStage{}
	}
	var out []stuckLine
	seen := map[string]bool{}
	for _, x := range xs {
		seen[x.Stage] = true
		st := l.stages[x.Stage]
		unmoved := time.Duration(x.UnmovedMs) * time.Millisecond
		switch {
		case !x.Stuck && st != nil:
			out = append(out, stuckLine{Kind: stuckEnded, X: x, Unmoved: now.Sub(st.movedAt)})
			delete(l.stages, x.Stage)
		case !x.Stuck:
		case st == nil:
			l.stages[x.Stage] = &stuckStage{root: stuckRoot(x), saidAt: now, movedAt: now.Add(-unmoved)}
			out = append(out, stuckLine{Kind: stuckBecame, X: x, Unmoved: unmoved})
		case stuckRoot(x) != st.root:
			st.root, st.saidAt = stuckRoot(x), now
			out = append(out, stuckLine{Kind: stuckCauseChanged, X: x, Unmoved: unmoved})
		case now.Sub(st.saidAt) >= stuckReminder:
			st.saidAt = now
			out = append(out, stuckLine{Kind: stuckReminded, X: x, Unmoved: unmoved})
		}
	}
	var gone []string
	for name := range l.stages {
		if !seen[name] {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	for _, name := range gone {
		out = append(out, stuckLine{Kind: stuckEnded, X: explain.Explanation{Stage: name}, Unmoved: now.Sub(l.stages[name].movedAt)})
		delete(l.stages, name)
	}
	return out
}

// logStuck logs the lines of sl.Next for the explanations xs at now: a
// warning for a stage that became stuck (its watermark has not moved for
// --watermark_stuck_threshold; explain.Explanation.Stuck), whose root
// cause changed, or still stuck after stuckReminder, with the chain of
// causes in plain sentences (the same text as GET /watermarks/explain and
// the page show); an Info line "no longer stuck" after=D (how long the
// watermark stood still) when it moves again.
func logStuck(log *slog.Logger, sl *stuckLog, xs []explain.Explanation, now time.Time) {
	for _, ln := range sl.Next(xs, now) {
		x := ln.X
		unmoved := ln.Unmoved.Round(time.Second).String()
		if ln.Kind == stuckEnded {
			log.Info("kafkastreams: watermark no longer stuck", "stage", x.Stage, "after", unmoved)
			continue
		}
		attrs := []any{"stage", x.Stage, "event", string(ln.Kind), "unmoved", unmoved, "cause", string(x.Cause), "why", x.Text}
		if x.Partition != nil {
			attrs = append(attrs, "root_stage", x.RootStage, "partition", *x.Partition)
		}
		log.Warn("kafkastreams: watermark stuck", attrs...)
	}
}

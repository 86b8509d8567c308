package runner

import (
	"fmt"
	"log/slog"
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
		log.Info("kafkastreams: progress", "stage", s.Name, "watermark", wm, "records_in", st.RecordsIn, "elements_in", st.ElementsIn, "elements_out", st.ElementsOut, "commits", st.Commits, "aborts", st.Aborts)
	}
}

// logStuck logs a warning for every stuck stage among xs (its watermark has
// not moved for --watermark_stuck_threshold; explain.Explanation.Stuck)
// with the chain of causes in plain sentences, the same text as GET
// /watermarks/explain and the page show.
func logStuck(log *slog.Logger, xs []explain.Explanation) {
	for _, x := range xs {
		if !x.Stuck {
			continue
		}
		attrs := []any{"stage", x.Stage, "unmoved", (time.Duration(x.UnmovedMs) * time.Millisecond).Round(time.Second).String(), "cause", string(x.Cause), "why", x.Text}
		if x.Partition != nil {
			attrs = append(attrs, "root_stage", x.RootStage, "partition", *x.Partition)
		}
		log.Warn("kafkastreams: watermark stuck", attrs...)
	}
}

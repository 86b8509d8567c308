package runner

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/watermarkmgr"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/explain"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// TestDescribeWatermark pins the words of the progress log for each state
// of a stage's watermark.
func TestDescribeWatermark(t *testing.T) {
	for _, c := range []struct {
		s    watermarkmgr.Snapshot
		want string
	}{
		{watermarkmgr.Snapshot{Held: true, Missing: []int32{2, 3}, Watermark: mtime.MinTimestamp}, "held: tasks [2 3] have not reported yet"},
		{watermarkmgr.Snapshot{Held: true, Watermark: mtime.MinTimestamp}, "held: waiting for the first report"},
		{watermarkmgr.Snapshot{Watermark: mtime.MaxTimestamp}, "done (end of time)"},
		{watermarkmgr.Snapshot{Watermark: mtime.MinTimestamp}, "not started (beginning of time)"},
		{watermarkmgr.Snapshot{Watermark: mtime.FromMilliseconds(1112911993000)}, service.ISO(mtime.FromMilliseconds(1112911993000))},
	} {
		if got := describeWatermark(service.StageView{Snapshot: c.s}); got != c.want {
			t.Errorf("describeWatermark(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

// The stuck warnings of the progress log, one look every 10 s: a stage
// that becomes stuck is said once, again when its root cause changes, a
// reminder after stuckReminder, and once when it is no longer stuck (or
// gone), with how long its watermark stood still. A stage that was never
// stuck is never said.
func TestStuckLogSaysOnceThenOnChangeReminderAndEnd(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	p1, p2 := int32(1), int32(2)
	stuck := func(name string, unmoved time.Duration, p *int32) explain.Explanation {
		return explain.Explanation{Stage: name, Stuck: true, UnmovedMs: unmoved.Milliseconds(), Cause: explain.CauseNeverReceivedNoIdleness, RootStage: "s1", Partition: p, Text: "why"}
	}
	fine := func(name string) explain.Explanation { return explain.Explanation{Stage: name} }
	var sl stuckLog
	type look struct {
		at   time.Duration // since t0
		xs   []explain.Explanation
		want []string // "stage kind unmoved"
	}
	looks := []look{
		{0, []explain.Explanation{fine("a"), fine("b")}, nil},
		{10 * time.Second, []explain.Explanation{stuck("a", 70*time.Second, &p1), fine("b")}, []string{"a became stuck 1m10s"}},
		{20 * time.Second, []explain.Explanation{stuck("a", 80*time.Second, &p1), stuck("b", 61*time.Second, nil)}, []string{"b became stuck 1m1s"}},
		{30 * time.Second, []explain.Explanation{stuck("a", 90*time.Second, &p1), stuck("b", 71*time.Second, nil)}, nil},
		{40 * time.Second, []explain.Explanation{stuck("a", 100*time.Second, &p2), stuck("b", 81*time.Second, nil)}, []string{"a root cause changed 1m40s"}},
		{10*time.Minute + 30*time.Second, []explain.Explanation{stuck("a", 11*time.Minute, &p2), stuck("b", 10*time.Minute+11*time.Second, nil)}, []string{"b still stuck 10m11s"}},
		{10*time.Minute + 40*time.Second, []explain.Explanation{stuck("a", 11*time.Minute+10*time.Second, &p2), fine("b")}, []string{"a still stuck 11m10s", "b no longer stuck 11m21s"}},
		{10*time.Minute + 50*time.Second, []explain.Explanation{fine("b")}, []string{"a no longer stuck 11m50s"}},
		{11 * time.Minute, []explain.Explanation{fine("a"), fine("b")}, nil},
	}
	for _, l := range looks {
		var got []string
		for _, ln := range sl.Next(l.xs, t0.Add(l.at)) {
			got = append(got, fmt.Sprintf("%s %s %s", ln.X.Stage, ln.Kind, ln.Unmoved))
		}
		if fmt.Sprint(got) != fmt.Sprint(l.want) {
			t.Errorf("at %v: %q, want %q", l.at, got, l.want)
		}
	}
}

package runner

import (
	"testing"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// gbkLikeHead answers what commitMetricsRecords asks a GroupByKey head.
type gbkLikeHead struct {
	step.Passthrough
	dropped int64
	windows map[int32]int64
}

func (h *gbkLikeHead) AttemptDropped() int64         { return h.dropped }
func (h *gbkLikeHead) TaskWindowsHeld(p int32) int64 { return h.windows[p] }
func (h *gbkLikeHead) WindowsHeld() (n int64) {
	for _, w := range h.windows {
		n += w
	}
	return n
}

var (
	_ attemptDrops = (*gbkLikeHead)(nil)
	_ windowCounts = (*gbkLikeHead)(nil)
)

// A transaction's metrics record goes to the metrics topic's partition 0
// keyed by the stage, is read by cmd/watermarkmgr's counts
// (service.AppCounts) as the transaction's counts and state, and is
// skipped by the end-of-job metrics (committedMetrics), which know only
// Beam's URNs. Dead letters of two instances are summed application-wide
// (issue 23: TxnSummary.DeadLetters was not in the record, so the page's
// application counts lacked them).
func TestCommitMetricsRecordIsCountedByTheServiceAndSkippedByJobMetrics(t *testing.T) {
	h := &gbkLikeHead{dropped: 3, windows: map[int32]int64{0: 11, 2: 4}}
	recs := commitMetricsRecords("app", "s2", "vm-1", h)(stage.TxnSummary{RecordsIn: 100, ElementsIn: 90, ElementsOut: 7, Bundles: 2, AbortsBefore: 1, Tasks: []int32{0, 2}})
	if len(recs) != 1 || recs[0].Topic != "app-metrics" || recs[0].Partition != 0 || string(recs[0].Key) != "s2" {
		t.Fatalf("records %+v, want one on app-metrics/0 keyed s2", recs)
	}
	a := service.NewAppCounts()
	if err := a.Apply(recs[0].Value); err != nil {
		t.Fatal(err)
	}
	got := a.Stages()["s2"]
	if got.RecordsIn != 100 || got.ElementsIn != 90 || got.ElementsOut != 7 || got.Commits != 1 || got.Aborts != 1 || got.LateDropped != 3 || got.WindowsHeld != 15 || got.TimersPending != -1 {
		t.Errorf("counted %+v", got)
	}
	var r fnpb.ProcessBundleResponse
	if err := proto.Unmarshal(recs[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	m := newCommittedMetrics()
	m.add(r.GetMonitoringInfos())
	if s := m.snapshot(); len(s) != 0 {
		t.Errorf("the job's metrics took the commit record: %v", s)
	}
	// A dead letter on each of two instances: the application's count is 2.
	for _, inst := range []string{"vm-1", "vm-2"} {
		recs := commitMetricsRecords("app", "s2", inst, h)(stage.TxnSummary{RecordsIn: 1, DeadLetters: 1, Tasks: []int32{0}})
		if err := a.Apply(recs[0].Value); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Stages()["s2"]; got.DeadLetters != 2 || len(got.Instances) != 2 {
		t.Errorf("dead letters of two instances counted %d over %v, want 2 over both", got.DeadLetters, got.Instances)
	}
	// A head without late drops or state: none in the record.
	recs = commitMetricsRecords("app", "s1", "vm-1", &step.Passthrough{})(stage.TxnSummary{RecordsIn: 1, Tasks: []int32{0}})
	a = service.NewAppCounts()
	if err := a.Apply(recs[0].Value); err != nil {
		t.Fatal(err)
	}
	if got := a.Stages()["s1"]; got.LateDropped != -1 || got.WindowsHeld != -1 || got.TimersPending != -1 {
		t.Errorf("a passthrough stage's record says late drops or state: %+v", got)
	}
}

package service

import (
	"net/http/httptest"
	"testing"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

// commitRecord is a metrics-topic value as the runner writes it for one
// committed transaction (runner.commitMetricsRecords).
func commitRecord(t *testing.T, m *pb.StageCommitMetrics) []byte {
	t.Helper()
	payload, err := proto.Marshal(m)
	must(t, err)
	v, err := proto.Marshal(&fnpb.ProcessBundleResponse{MonitoringInfos: []*pipepb.MonitoringInfo{{Urn: URNStageCommit, Payload: payload}}})
	must(t, err)
	return v
}

func held(p int32, windows int64) *pb.TaskStateHeld {
	return &pb.TaskStateHeld{Partition: p, WindowsHeld: proto.Int64(windows)}
}

// The counts are sums over every instance's commits; state held is each
// task's latest gauge summed (a task that moved to another instance counts
// once, with its new owner's value); a stage that never says late drops or
// state reads -1; a bundle's Beam metrics record counts nothing; a record
// that does not decode is an error and changes nothing.
func TestAppCountsSumsCommitsAndKeepsLatestStatePerTask(t *testing.T) {
	a := NewAppCounts()
	gbk := func(inst string, in, out, aborts uint64, late int64, tasks ...*pb.TaskStateHeld) []byte {
		return commitRecord(t, &pb.StageCommitMetrics{Stage: "gbk", Instance: inst, RecordsIn: in, ElementsIn: in, ElementsOut: out, Bundles: 1, Aborts: aborts, LateDropped: proto.Int64(late), Tasks: tasks})
	}
	must(t, a.Apply(gbk("vm-1", 100, 3, 0, 2, held(0, 10), held(1, 5))))
	must(t, a.Apply(gbk("vm-2", 50, 1, 1, 0, held(2, 7))))
	must(t, a.Apply(gbk("vm-2", 20, 0, 0, 1, held(0, 4)))) // task 0 moved to vm-2
	must(t, a.Apply(commitRecord(t, &pb.StageCommitMetrics{Stage: "src", Instance: "vm-1", RecordsIn: 9, ElementsOut: 9})))
	bundle, err := proto.Marshal(&fnpb.ProcessBundleResponse{MonitoringInfos: []*pipepb.MonitoringInfo{{Urn: "beam:metric:element_count:v1", Payload: []byte{3}}}})
	must(t, err)
	must(t, a.Apply(bundle))
	if err := a.Apply([]byte{0xff, 0xff}); err == nil {
		t.Error("an undecodable record: no error")
	}
	bad := commitRecord(t, &pb.StageCommitMetrics{RecordsIn: 1000}) // no stage
	if err := a.Apply(bad); err == nil {
		t.Error("a StageCommitMetrics without a stage: no error")
	}
	got := a.Stages()
	g := got["gbk"]
	if g.RecordsIn != 170 || g.ElementsOut != 4 || g.Commits != 3 || g.Aborts != 1 || g.LateDropped != 3 {
		t.Errorf("gbk counts %+v, want 170 in, 4 out, 3 commits, 1 abort, 3 late", g)
	}
	if g.WindowsHeld != 4+5+7 || g.TimersPending != -1 {
		t.Errorf("gbk state held: %d panes, %d timers; want 16 (task 0's latest 4, 5, 7) and -1", g.WindowsHeld, g.TimersPending)
	}
	if len(g.Instances) != 2 || g.Instances[0] != "vm-1" || g.Instances[1] != "vm-2" {
		t.Errorf("gbk instances %v", g.Instances)
	}
	s := got["src"]
	if s.RecordsIn != 9 || s.Commits != 1 || s.LateDropped != -1 || s.WindowsHeld != -1 {
		t.Errorf("src counts %+v, want 9 in, 1 commit, no late drops or state", s)
	}
	if len(got) != 2 || a.Records() != 5 || a.Undecodable() != 2 {
		t.Errorf("%d stages, %d records, %d undecodable; want 2, 5, 2", len(got), a.Records(), a.Undecodable())
	}
}

// cmd/watermarkmgr's page (no instance, Info.App set) carries the
// application's counts per stage in GET /state, where an instance's page
// carries its own (Local).
func TestPageStateCarriesApplicationCounts(t *testing.T) {
	c := &clock{t: fixed}
	tr := NewTracker(c.now)
	must(t, tr.Apply([]*pb.WatermarkReport{rep("s1", 0, 1000, 1, false)}))
	a := NewAppCounts()
	must(t, a.Apply(commitRecord(t, &pb.StageCommitMetrics{Stage: "s1", Instance: "vm-1", RecordsIn: 42, ElementsOut: 40, Aborts: 2})))
	info := Info{Application: "app", App: a.Stages, Stages: []StageInfo{{Name: "s1"}, {Name: "s2", Upstreams: []string{"s1"}}}}
	srv := httptest.NewServer(NewHTTPHandlerWith(tr, nil, nil, func() Info { return info }))
	defer srv.Close()
	var ps PageState
	getJSON(t, srv.URL+"/state", &ps)
	if len(ps.Stages) != 2 {
		t.Fatalf("state: %+v", ps)
	}
	if ap := ps.Stages[0].App; ap == nil || ap.RecordsIn != 42 || ap.ElementsOut != 40 || ap.Commits != 1 || ap.Aborts != 2 || ps.Stages[0].Local != nil {
		t.Errorf("s1: app %+v local %+v; want the metrics topic's counts and no local ones", ap, ps.Stages[0].Local)
	}
	if ps.Stages[1].App != nil {
		t.Errorf("s2 has no counted commit, got %+v", ps.Stages[1].App)
	}
}

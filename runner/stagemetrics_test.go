package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// gather returns the registry's samples as "name{labels} value" lines
// (histograms as their count and sum).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := f.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
				out[key+"_sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// Commits, aborts, dead letters and rebalances reach their counters and
// histograms with the stage's label; names follow Prometheus' conventions.
func TestStageMetricsObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := newStageMetrics(reg).observer("s1")
	o.Committed(stage.CommitObservation{Process: 300 * time.Millisecond, Commit: 20 * time.Millisecond, Stats: stage.Stats{RecordsIn: 7, ElementsIn: 6, ElementsOut: 5, Bundles: 2}})
	o.Committed(stage.CommitObservation{Process: 100 * time.Millisecond, Commit: 40 * time.Millisecond, Stats: stage.Stats{RecordsIn: 3, DeadLetters: 1}})
	o.Aborted()
	o.Rebalanced([]int32{0, 1}, nil)
	o.Rebalanced(nil, []int32{1})
	got := gather(t, reg)
	want := map[string]float64{
		"kafkastreams_stage_records_in_total{stage=s1}":                10,
		"kafkastreams_stage_elements_in_total{stage=s1}":               6,
		"kafkastreams_stage_elements_out_total{stage=s1}":              5,
		"kafkastreams_stage_bundles_total{stage=s1}":                   2,
		"kafkastreams_stage_commits_total{stage=s1}":                   2,
		"kafkastreams_stage_aborts_total{stage=s1}":                    1,
		"kafkastreams_dead_letter_records_total{stage=s1}":             1,
		"kafkastreams_stage_rebalances_total{event=assigned,stage=s1}": 1,
		"kafkastreams_stage_rebalances_total{event=revoked,stage=s1}":  1,
		"kafkastreams_stage_commit_duration_seconds{stage=s1}_count":   2,
		"kafkastreams_stage_bundle_processing_seconds{stage=s1}_count": 2,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if s := got["kafkastreams_stage_bundle_processing_seconds{stage=s1}_sum"]; s < 0.399 || s > 0.401 {
		t.Errorf("processing seconds sum %v, want 0.4", s)
	}
	if s := got["kafkastreams_stage_commit_duration_seconds{stage=s1}_sum"]; s < 0.059 || s > 0.061 {
		t.Errorf("commit seconds sum %v, want 0.06", s)
	}
}

// The task gauges: assigned tasks per stage, a lag sample only where it is
// known, store size and restore progress per task.
func TestTaskCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(taskCollector{
		tasks: func() map[string][]stage.TaskStatus {
			return map[string][]stage.TaskStatus{"s1": {{Partition: 0, LagRecords: 12}, {Partition: 3, LagRecords: -1}}}
		},
		stores: func() map[string][]state.StoreStats {
			return map[string][]state.StoreStats{"s2": {{Partition: 1, SizeBytes: 4096, Restoring: true, RestoredRecords: 99}, {Partition: 2, RestoredRecords: 3, RestoreKind: state.KindStandby}}}
		},
	})
	got := gather(t, reg)
	want := map[string]float64{
		"kafkastreams_instance_assigned_tasks{stage=s1}":                          2,
		"kafkastreams_task_consumer_lag_records{partition=0,stage=s1}":            12,
		"kafkastreams_task_state_store_bytes{partition=1,stage=s2}":               4096,
		"kafkastreams_task_state_restoring{partition=1,stage=s2}":                 1,
		"kafkastreams_task_state_restored_records{partition=1,stage=s2}":          99,
		"kafkastreams_task_state_restore_kind{kind=standby,partition=2,stage=s2}": 1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got["kafkastreams_task_state_restore_kind{kind=,partition=1,stage=s2}"]; ok {
		t.Error("a restore kind sample for a task still restoring")
	}
	if _, ok := got["kafkastreams_task_consumer_lag_records{partition=3,stage=s1}"]; ok {
		t.Error("a lag sample for a task whose lag is unknown")
	}
}

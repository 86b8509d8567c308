package kafkastreamsv1

import (
	"sort"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

// TestCoreCarriesEveryField guards the one translation of a report into the
// core (issue 22): a field added to WatermarkReport fails it until Core
// carries it or it is listed here as not the core's.
func TestCoreCarriesEveryField(t *testing.T) {
	core := map[string]bool{"stage": true, "source_partition": true, "committed_watermark_millis": true, "total_source_partitions": true, "idle": true}
	notCore := map[string]bool{
		"source":                 true, // GET /watermarks' view of a Kafka source partition (the service)
		"processing_time_millis": true, // the TestStream clock, read by the step's task beside the core
		"instance":               true, // the task's owner, shown by the service
	}
	fields := (&WatermarkReport{}).ProtoReflect().Descriptor().Fields()
	var unknown []string
	for i := 0; i < fields.Len(); i++ {
		n := string(fields.Get(i).Name())
		if !core[n] && !notCore[n] {
			unknown = append(unknown, n)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("WatermarkReport fields %q are neither carried by Core nor listed as not the core's: decide, in report.go and here", unknown)
	}

	r := &WatermarkReport{Stage: "s1", SourcePartition: 2, CommittedWatermarkMillis: 1500, TotalSourcePartitions: 4, Idle: true, Instance: "i0"}
	want := watermarkmgr.Report{Upstream: "s1", SourcePartition: 2, CommittedWatermark: mtime.Time(1500), TotalSourcePartitions: 4, Idle: true}
	if got := r.Core(); got != want {
		t.Errorf("Core() = %+v, want %+v", got, want)
	}
	if got := (*WatermarkReport)(nil).Core(); got != (watermarkmgr.Report{}) {
		t.Errorf("nil Core() = %+v, want the zero Report", got)
	}
}

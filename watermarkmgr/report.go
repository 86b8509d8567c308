package watermarkmgr

import "github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

// Report is one watermark report as the core reads it (seed 000: a task's
// watermark travels in-band as a report; seed 002: idleness): task
// SourcePartition of the TotalSourcePartitions tasks of stage Upstream has
// committed everything before CommittedWatermark, and Idle says whether it
// has nothing to deliver and must not hold the minimum downstream.
//
// It is what a record of the report topic carries, in the core's units: the
// proto WatermarkReport (proto/kafkastreams/v1) is turned into a Report by
// its Core method, the one hand translation, so that a new field of the
// report changes that method and this type and nothing else. This package
// imports no proto: the proto package imports it.
//
// Manager.ObserveReport and Aggregator.ObserveReport record one; Observe is
// the same with the fields as arguments.
type Report struct {
	// Upstream is the plan's name of the stage whose task wrote the report
	// (the proto's stage). Aggregator.ObserveReport picks its Manager by
	// it; Manager.ObserveReport ignores it (a Manager is one upstream's,
	// chosen by its caller).
	Upstream string
	// SourcePartition is the reporting task's input partition, in
	// [0, TotalSourcePartitions).
	SourcePartition int32
	// CommittedWatermark is the task's output watermark: an mtime.Time,
	// milliseconds since the Unix epoch, in [mtime.MinTimestamp,
	// mtime.MaxTimestamp] (the proto's committed_watermark_millis, the
	// same number).
	CommittedWatermark mtime.Time
	// TotalSourcePartitions is how many tasks Upstream has: how many
	// partitions the reader waits for before the hold lifts. It only grows
	// (see Manager.Observe).
	TotalSourcePartitions int32
	// Idle is true when the task has no input to deliver (seed 002).
	Idle bool
}

package kafkastreamsv1

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

// This file is written by hand (not by `make proto`): what the generated
// messages mean to the rest of the runner.

// Core returns the report as the WatermarkManager's core reads it: the one
// translation of a report record into watermarkmgr.Report, which the step's
// task, the side input store and the WatermarkManager service hand to
// Aggregator.ObserveReport or Manager.ObserveReport (seed 000). Stage
// becomes Upstream; committed_watermark_millis, milliseconds since the Unix
// epoch, becomes an mtime.Time (the same number: Beam's mtime.Time counts
// milliseconds too), not range-checked here: the core refuses one outside
// [mtime.MinTimestamp, mtime.MaxTimestamp] (watermarkmgr.ErrWatermarkOutOfRange).
// What only the service reads (source, instance) and the synthetic
// processing time are not in it. A nil report gives the zero Report.
func (r *WatermarkReport) Core() watermarkmgr.Report {
	return watermarkmgr.Report{
		Upstream:              r.GetStage(),
		SourcePartition:       r.GetSourcePartition(),
		CommittedWatermark:    mtime.Time(r.GetCommittedWatermarkMillis()),
		TotalSourcePartitions: r.GetTotalSourcePartitions(),
		Idle:                  r.GetIdle(),
	}
}

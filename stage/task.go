package stage

import (
	"encoding/base64"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

// task is the watermark state of one input partition of a stage: the
// Aggregator over the upstream stages' reports, and what the task last
// reported. It is rebuilt from the checkpoint in the committed offset's
// metadata when the partition is assigned, and after an abort.
type task struct {
	partition int32
	upstreams []string
	agg       *watermarkmgr.Aggregator
	// last[upstream][sourcePartition] is the latest report observed.
	last map[string]map[int32]*pb.WatermarkReport
	// out is the output watermark last reported downstream (mtime.Time, ms);
	// mtime.MinTimestamp before the first report. Never decreases.
	out mtime.Time
	// reported is true once out has been reported at least once; idle is
	// the idle flag of the last report (in memory: a restored task reports
	// again when it is idle).
	reported bool
	idle     bool
	// source is the Head.Source of the last report (nil for other heads).
	source *pb.SourcePartition
	// advanced is the input watermark of the head's last Advance of the
	// task (Step.Decide); mtime.MinTimestamp when restored. In memory only:
	// a lower value only costs one more Advance.
	advanced mtime.Time
	// Job clock (StepConfig.JobClock): clockAdvanced is the processing time
	// (ms) the head last advanced at, valid when hasClockAdvanced;
	// clockOut the one the task last reported, valid when hasClockOut.
	// In memory only, as advanced.
	clockAdvanced, clockOut       int64
	hasClockAdvanced, hasClockOut bool
}

// Task is the watermark state of one task (input partition) of a stage,
// as Step.Decide reads and updates it; the Loop keeps one per assigned
// partition.
type Task = task

// NewTask returns the state of a fresh task of input partition partition
// whose input comes from the stages upstreams (none: a source stage).
func NewTask(partition int32, upstreams []string) *Task { return newTask(partition, upstreams) }

func newTask(partition int32, upstreams []string) *task {
	return &task{
		partition: partition,
		upstreams: upstreams,
		agg:       watermarkmgr.NewAggregator(upstreams...),
		last:      map[string]map[int32]*pb.WatermarkReport{},
		out:       mtime.MinTimestamp,
		advanced:  mtime.MinTimestamp,
	}
}

// observe records one upstream report. A report the manager refuses is an
// error naming the partition; the task is unchanged.
func (t *task) observe(r *pb.WatermarkReport) error {
	if err := t.agg.Observe(r.GetStage(), r.GetSourcePartition(), mtime.Time(r.GetCommittedWatermarkMillis()), r.GetTotalSourcePartitions(), r.GetIdle()); err != nil {
		return fmt.Errorf("stage: input partition %d: %w", t.partition, err)
	}
	m := t.last[r.GetStage()]
	if m == nil {
		m = map[int32]*pb.WatermarkReport{}
		t.last[r.GetStage()] = m
	}
	m[r.GetSourcePartition()] = r
	return nil
}

// inputWatermark advances the aggregator and returns the input watermark and
// whether every upstream is idle. A task without upstreams (a source
// stage's) has its whole input once it is read: the end of time.
func (t *task) inputWatermark() (mtime.Time, bool) {
	if len(t.upstreams) == 0 {
		return mtime.MaxTimestamp, false
	}
	wm := t.agg.Advance()
	return wm, t.agg.AllIdle()
}

// inputClock is the task's synchronized processing time in a job with a
// job clock: the minimum processing_time_millis over the latest report of
// every upstream partition that carries one; ok is false when none does.
func (t *task) inputClock() (ms int64, ok bool) {
	for _, m := range t.last {
		for _, r := range m {
			if r.ProcessingTimeMillis == nil {
				continue
			}
			if v := r.GetProcessingTimeMillis(); !ok || v < ms {
				ms, ok = v, true
			}
		}
	}
	return ms, ok
}

// checkpoint encodes the task's state for the offset commit metadata: the
// latest report of every upstream source partition, compactly
// (compactUpstream) where a stage's reports allow it, else in full. Kafka
// refuses metadata longer than the broker's offset.metadata.max.bytes
// (default 4096): full reports passed it at 32 upstream partitions of a
// Kafka source stage, the compact form holds a thousand partitions of
// close watermarks.
func (t *task) checkpoint() (string, error) {
	cp := &pb.TaskCheckpoint{OutputWatermarkMillis: int64(t.out)}
	for _, u := range sortedKeys(t.last) {
		m := t.last[u]
		rs := make([]*pb.WatermarkReport, 0, len(m))
		for _, p := range sortedInt32Keys(m) {
			rs = append(rs, m[p])
		}
		if c := compactUpstream(u, rs); c != nil {
			cp.Upstreams = append(cp.Upstreams, c)
			continue
		}
		cp.Reports = append(cp.Reports, rs...)
	}
	b, err := proto.Marshal(cp)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// compactUpstream returns stage's reports rs (sorted by source partition,
// at least one) as an UpstreamCheckpoint, or nil when they cannot be
// (their totals differ, or one carries a processing time): what
// expandUpstream gives back are the same reports without their source and
// instance, which no task reads back.
func compactUpstream(stage string, rs []*pb.WatermarkReport) *pb.UpstreamCheckpoint {
	c := &pb.UpstreamCheckpoint{Stage: stage, TotalSourcePartitions: rs[0].GetTotalSourcePartitions(), BaseWatermarkMillis: rs[0].GetCommittedWatermarkMillis()}
	dense := true
	for i, r := range rs {
		if r.GetTotalSourcePartitions() != c.TotalSourcePartitions || r.ProcessingTimeMillis != nil {
			return nil
		}
		c.BaseWatermarkMillis = min(c.BaseWatermarkMillis, r.GetCommittedWatermarkMillis())
		dense = dense && r.GetSourcePartition() == int32(i)
	}
	for _, r := range rs {
		c.WatermarkOffsets = append(c.WatermarkOffsets, uint64(r.GetCommittedWatermarkMillis()-c.BaseWatermarkMillis))
		if !dense {
			c.SourcePartitions = append(c.SourcePartitions, r.GetSourcePartition())
		}
		if r.GetIdle() {
			c.IdlePartitions = append(c.IdlePartitions, r.GetSourcePartition())
		}
	}
	return c
}

// expandUpstream returns the reports of an UpstreamCheckpoint, sorted by
// source partition; a malformed one (source_partitions neither empty nor
// as many as the watermarks) is an error.
func expandUpstream(c *pb.UpstreamCheckpoint) ([]*pb.WatermarkReport, error) {
	offs, sps := c.GetWatermarkOffsets(), c.GetSourcePartitions()
	if len(sps) != 0 && len(sps) != len(offs) {
		return nil, fmt.Errorf("stage: checkpoint of upstream %s: %d source partitions for %d watermarks", c.GetStage(), len(sps), len(offs))
	}
	idle := map[int32]bool{}
	for _, p := range c.GetIdlePartitions() {
		idle[p] = true
	}
	rs := make([]*pb.WatermarkReport, len(offs))
	for i, off := range offs {
		sp := int32(i)
		if len(sps) > 0 {
			sp = sps[i]
		}
		rs[i] = &pb.WatermarkReport{Stage: c.GetStage(), SourcePartition: sp, TotalSourcePartitions: c.GetTotalSourcePartitions(),
			CommittedWatermarkMillis: c.GetBaseWatermarkMillis() + int64(off), Idle: idle[sp]}
	}
	return rs, nil
}

// restoreTask rebuilds a task from a checkpoint; an empty checkpoint gives a
// fresh task. A checkpoint that does not decode is an error naming the
// partition: the runner refuses to guess a watermark.
func restoreTask(partition int32, upstreams []string, metadata string) (*task, error) {
	t := newTask(partition, upstreams)
	if metadata == "" {
		return t, nil
	}
	b, err := base64.StdEncoding.DecodeString(metadata)
	cp := &pb.TaskCheckpoint{}
	if err == nil {
		err = proto.Unmarshal(b, cp)
	}
	if err != nil {
		return nil, fmt.Errorf("stage: input partition %d: committed offset metadata is not a task checkpoint: %w", partition, err)
	}
	reports := cp.GetReports()
	for _, c := range cp.GetUpstreams() {
		rs, err := expandUpstream(c)
		if err != nil {
			return nil, fmt.Errorf("stage: restoring input partition %d: %w", partition, err)
		}
		reports = append(reports, rs...)
	}
	for _, r := range reports {
		if err := t.observe(r); err != nil {
			return nil, fmt.Errorf("stage: restoring input partition %d: %w", partition, err)
		}
	}
	t.out = mtime.Time(cp.GetOutputWatermarkMillis())
	t.reported = t.out > mtime.MinTimestamp
	return t, nil
}

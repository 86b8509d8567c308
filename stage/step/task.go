package step

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"maps"
	"math/bits"
	"slices"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

// Task is the watermark state of one input partition of a stage: the
// Aggregator over the upstream stages' reports, and what the task last
// reported. It is rebuilt from the checkpoint in the committed offset's
// metadata when the partition is assigned, and after an abort.
type Task struct {
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
	// Job clock (Config.JobClock): clockAdvanced is the processing time
	// (ms) the head last advanced at, valid when hasClockAdvanced;
	// clockOut the one the task last reported, valid when hasClockOut.
	// In memory only, as advanced.
	clockAdvanced, clockOut       int64
	hasClockAdvanced, hasClockOut bool
	// floor is the input watermark the task's checkpoint held (mtime.Time,
	// ms; mtime.MinTimestamp for a fresh task or a checkpoint of the
	// previous version). RestoreTask rebuilds each upstream's Manager with
	// its Out, not the Aggregator's own Out, which can be above the min of
	// the Managers' (an upstream that reported late, or one left out of the
	// min); the input watermark, MAX(floor, Aggregator), does not go back.
	floor mtime.Time
}

// NewTask returns the state of a fresh task of input partition partition
// whose input comes from the stages upstreams (none: a source stage).
func NewTask(partition int32, upstreams []string) *Task { return newTask(partition, upstreams) }

func newTask(partition int32, upstreams []string) *Task {
	return &Task{
		partition: partition,
		upstreams: upstreams,
		agg:       watermarkmgr.NewAggregator(upstreams...),
		last:      map[string]map[int32]*pb.WatermarkReport{},
		out:       mtime.MinTimestamp,
		advanced:  mtime.MinTimestamp,
		floor:     mtime.MinTimestamp,
	}
}

// observe records one upstream report. A report the manager refuses is an
// error naming the partition; the task is unchanged.
func (t *Task) observe(r *pb.WatermarkReport) error {
	if err := t.agg.ObserveReport(r.Core()); err != nil {
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
// whether every upstream is idle: MAX(floor, Aggregator.Advance()), floor
// the input watermark of the checkpoint the task was restored from. A task
// without upstreams (a source stage's) has its whole input once it is
// read: the end of time.
func (t *Task) inputWatermark() (mtime.Time, bool) {
	if len(t.upstreams) == 0 {
		return mtime.MaxTimestamp, false
	}
	wm := t.agg.Advance()
	return max(wm, t.floor), t.agg.AllIdle()
}

// inputClock is the task's synchronized processing time in a job with a
// job clock: the minimum processing_time_millis over the latest report of
// every upstream partition that carries one; ok is false when none does.
func (t *Task) inputClock() (ms int64, ok bool) {
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

// maxMetadataBytes is Kafka's default offset.metadata.max.bytes (4096): the
// broker refuses an offset commit whose metadata is longer, and with it the
// transaction.
const maxMetadataBytes = 4096

// checkpoint encodes the task's state for the offset commit metadata
// (base64 of a TaskCheckpoint, at most maxMetadataBytes): the input
// watermark, and per upstream the state of its Manager (form 2 of
// UpstreamCheckpoint) and the job clock of the latest reports.
//
// Per upstream, with Out its Manager's emitted watermark as of the last
// Advance (mtime.Time, ms), a partition's watermark wm is stored as
//
//	Out                   if wm <= Out   (lossless: Out' = MAX(Out, candidate))
//	mtime.MaxTimestamp    if wm = MaxTimestamp (always exact)
//	base + round(wm-base) otherwise, base the largest cluster base <= wm
//
// and a processing time pt (job clock, ms) as base + round(pt-base) over
// the processing times' own cluster bases (aheadBases). round is the
// identity (precision 0, exact) unless the exact form is longer than
// maxMetadataBytes: then it keeps the m most significant bits of the offset
// (rounded down, offsetCode), m the largest precision that fits. An offset
// d loses less than d/2^(m-1) ms: a partition just ahead of its base stays
// (nearly) exact, one years ahead loses hours.
//
// A rounded-down watermark or clock only delays: the restored input
// watermark and job clock are never above the uncheckpointed task's, and
// the input watermark is equal again once every rounded partition reports
// at or above what it had (a partition's watermark is the max of its
// reports). What it costs: a rounded partition that never reports again (an
// upstream task whose output watermark, idle flag and clock do not change;
// a finished one is at the end of time, exact) holds the restored task
// behind the uncheckpointed one by what its rounding lost.
// Measured by TestCheckpointLargestUpstream (one upstream with a Kafka
// source's name), it is exact up to about 2 100 partitions idle at the
// start of time, finished or close (1 300 with a TestStream's job clock and
// some unreported); 1 600 close with one years behind; 700 spread over two
// days; 450 spread over 200 years; 350 anywhere in Beam's range (the worst
// mix); rounded, it fits about 2 600 partitions of any mix, 1 500 when
// every report carries a processing time. It is an error only when even the
// coarsest rounding does not fit.
func (t *Task) checkpoint() (string, error) {
	snap := t.agg.Snapshot()
	ups := make([]*upstreamState, 0, len(t.last))
	for _, u := range snap.Upstreams {
		if len(t.last[u.Name]) > 0 {
			ups = append(ups, newUpstreamState(u.Name, u.Snapshot, t.last[u.Name]))
		}
	}
	encode := func(m uint) (string, error) {
		cp := &pb.TaskCheckpoint{OutputWatermarkMillis: int64(t.out), InputWatermarkMillis: proto.Int64(int64(max(snap.Watermark, t.floor)))}
		for _, u := range ups {
			cp.Upstreams = append(cp.Upstreams, u.encode(m))
		}
		b, err := proto.Marshal(cp)
		if err != nil {
			return "", err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	}
	md, err := encode(0)
	if err != nil || len(md) <= maxMetadataBytes {
		return md, err
	}
	// The encoded length grows with the precision (nearly: the clusters
	// chosen change with it), so bisection finds a precision that fits,
	// the largest one where the length is monotone: it is in [lo, hi], and
	// best is encode(lo).
	lo, hi := uint(1), uint(maxPrecision)
	best, err := encode(lo)
	if err != nil {
		return "", err
	}
	if len(best) > maxMetadataBytes {
		return "", fmt.Errorf("stage: input partition %d: checkpoint of %d upstream partitions is %d bytes even with watermarks rounded to 1 significant bit, more than offset.metadata.max.bytes (%d)", t.partition, t.upstreamPartitions(), len(best), maxMetadataBytes)
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		md, err := encode(mid)
		if err != nil {
			return "", err
		}
		if len(md) <= maxMetadataBytes {
			lo, best = mid, md
		} else {
			hi = mid - 1
		}
	}
	return best, nil
}

// maxPrecision is the largest precision (significant bits) checkpoint
// tries; offsets below 2^maxPrecision ms are exact at it.
const maxPrecision = 62

// offsetCode is the code of offset d >= 0 (ms) at precision m: d itself if
// m = 0 (exact) or d < 2^m; else d's m most significant bits q = d >> e,
// e = bitlen(d) - m >= 1, as e*2^(m-1) + q (>= 2^m, so the codes of the
// exact range stay theirs). offsetFromCode(offsetCode(d, m), m) <= d, and
// the difference is below d/2^(m-1).
func offsetCode(d uint64, m uint) uint64 {
	n := uint(bits.Len64(d))
	if m == 0 || n <= m {
		return d
	}
	e := n - m
	return uint64(e)<<(m-1) + d>>e
}

// offsetFromCode is the offset (ms) of code c at precision m; see
// offsetCode.
func offsetFromCode(c uint64, m uint) uint64 {
	if m == 0 || c < 1<<m {
		return c
	}
	h := uint64(1) << (m - 1)
	e := c/h - 1
	return (c - e*h) << e
}

// upstreamPartitions is the number of upstream partitions the task holds a
// latest report of.
func (t *Task) upstreamPartitions() int {
	n := 0
	for _, m := range t.last {
		n += len(m)
	}
	return n
}

// upstreamState is what checkpoint keeps of one upstream, before rounding.
type upstreamState struct {
	name  string
	total int32
	out   mtime.Time
	// parts are the partitions the Manager counts as reported, ascending.
	parts []partState
	// ahead are the watermarks in (out, MaxTimestamp) of parts; pts the
	// processing times of parts' latest reports.
	ahead, pts values
	unobserved []*pb.WatermarkReport
}

type partState struct {
	p    int32
	wm   mtime.Time
	idle bool
	pt   *int64
}

func newUpstreamState(name string, s watermarkmgr.Snapshot, last map[int32]*pb.WatermarkReport) *upstreamState {
	u := &upstreamState{name: name, total: s.Total, out: s.Watermark}
	var ahead, pts []int64
	counted := map[int32]bool{}
	for _, ps := range s.Partitions {
		if !ps.Reported {
			continue
		}
		counted[ps.Partition] = true
		st := partState{p: ps.Partition, wm: ps.Watermark, idle: ps.Idle}
		if r := last[ps.Partition]; r != nil && r.ProcessingTimeMillis != nil {
			v := r.GetProcessingTimeMillis()
			st.pt = &v
			pts = append(pts, v)
		}
		if st.wm > u.out && st.wm < mtime.MaxTimestamp {
			ahead = append(ahead, int64(st.wm))
		}
		u.parts = append(u.parts, st)
	}
	u.ahead, u.pts = newValues(ahead), newValues(pts)
	for _, p := range slices.Sorted(maps.Keys(last)) {
		if !counted[p] {
			u.unobserved = append(u.unobserved, last[p])
		}
	}
	return u
}

// encode returns the form 2 UpstreamCheckpoint of u at precision m (0:
// exact; see checkpoint).
func (u *upstreamState) encode(m uint) *pb.UpstreamCheckpoint {
	c := &pb.UpstreamCheckpoint{Stage: u.name, TotalSourcePartitions: u.total, EmittedWatermarkMillis: proto.Int64(int64(u.out)),
		PrecisionBits: uint32(m), UnobservedReports: u.unobserved}
	c.AheadBasesMillis = aheadBases(u.ahead, m)
	c.ProcessingTimeBasesMillis = aheadBases(u.pts, m)
	var reported, idle []int32
	for _, st := range u.parts {
		reported = append(reported, st.p)
		if st.idle {
			idle = append(idle, st.p)
		}
		switch {
		case st.wm <= u.out:
			c.WatermarkCodes = append(c.WatermarkCodes, 0)
		case st.wm == mtime.MaxTimestamp:
			c.WatermarkCodes = append(c.WatermarkCodes, 1)
		default:
			c.WatermarkCodes = append(c.WatermarkCodes, 2+clusterCode(c.AheadBasesMillis, int64(st.wm), m))
		}
		if len(u.pts.distinct) > 0 {
			code := uint64(0)
			if st.pt != nil {
				code = 1 + clusterCode(c.ProcessingTimeBasesMillis, *st.pt, m)
			}
			c.ProcessingTimeCodes = append(c.ProcessingTimeCodes, code)
		}
	}
	if len(reported) < int(u.total) {
		if bm := bitmap(reported, u.total); len(bm) < 2*len(reported) {
			c.Reported = bm
		} else {
			c.SourcePartitions = reported
		}
	}
	if len(idle) > 0 {
		if bm := bitmap(idle, u.total); len(bm) < 2*len(idle) {
			c.Idle = bm
		} else {
			c.IdlePartitions = idle
		}
	}
	return c
}

// clusterCode is the code of v >= bases[0] (ms) at precision m:
// offsetCode(v-bases[j], m)*k + j for the largest bases[j] <= v, k =
// len(bases).
func clusterCode(bases []int64, v int64, m uint) uint64 {
	j, found := slices.BinarySearch(bases, v)
	if !found {
		j--
	}
	return offsetCode(uint64(v-bases[j]), m)*uint64(len(bases)) + uint64(j)
}

// fromClusterCode is the value (ms) of clusterCode c over bases at
// precision m; ok is false when there is no base.
func fromClusterCode(bases []int64, c uint64, m uint) (v int64, ok bool) {
	if len(bases) == 0 {
		return 0, false
	}
	k := uint64(len(bases))
	return bases[c%k] + int64(offsetFromCode(c/k, m)), true
}

// maxClusters bounds the clusters aheadBases tries.
const maxClusters = 64

// values are the watermarks or processing times of an upstream's
// partitions that clusterCode encodes, as aheadBases reads them: distinct
// ones ascending, how many partitions have each, and the indices i >= 1 of
// distinct by decreasing gap distinct[i]-distinct[i-1] (ties: lower i first).
type values struct {
	distinct []int64
	count    []int
	gaps     []int
}

// newValues returns the values of vs (any order; sorted in place).
func newValues(vs []int64) values {
	slices.Sort(vs)
	var v values
	for _, x := range vs {
		if n := len(v.distinct); n > 0 && v.distinct[n-1] == x {
			v.count[n-1]++
			continue
		}
		v.distinct, v.count = append(v.distinct, x), append(v.count, 1)
	}
	d := v.distinct
	for i := 1; i < len(d); i++ {
		v.gaps = append(v.gaps, i)
	}
	slices.SortFunc(v.gaps, func(a, b int) int {
		if c := cmp.Compare(uint64(d[b]-d[b-1]), uint64(d[a]-d[a-1])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return v
}

// aheadBases returns the bases of vs that make their codes at precision m
// shortest (none: nil): for k clusters split at the k-1 largest gaps
// between consecutive distinct values (k = 1, 2, 4 ... maxClusters, and the
// number of distinct values if at most maxClusters), the smallest of each
// cluster, the k of the fewest bytes (the bases' varints and the codes').
// With at most maxClusters distinct values every code is its base's index.
// O(n) for n distinct values.
func aheadBases(vs values, m uint) []int64 {
	distinct, count, gaps := vs.distinct, vs.count, vs.gaps
	if len(distinct) == 0 {
		return nil
	}
	var best []int64
	bestSize := -1
	split := make([]bool, len(distinct))
	splits := 0
	for k := 1; k <= min(maxClusters, len(distinct)); k = nextClusters(k, len(distinct)) {
		for ; splits < k-1; splits++ {
			split[gaps[splits]] = true
		}
		bases := make([]int64, 0, k)
		size := 0
		for i, v := range distinct {
			if i == 0 || split[i] {
				bases = append(bases, v)
				size += protowire.SizeVarint(protowire.EncodeZigZag(v))
			}
			size += count[i] * protowire.SizeVarint(2+offsetCode(uint64(v-bases[len(bases)-1]), m)*uint64(k)+uint64(len(bases)-1))
		}
		if bestSize < 0 || size < bestSize {
			best, bestSize = bases, size
		}
	}
	return best
}

// nextClusters is the number of clusters aheadBases tries after k, for nd
// distinct values: the next power of two, or nd if it comes first.
func nextClusters(k, nd int) int {
	if k < nd && nd < 2*k {
		return nd
	}
	return 2 * k
}

// bitmap returns the set ps of partitions below total as bits (bit p%8 of
// byte p/8).
func bitmap(ps []int32, total int32) []byte {
	b := make([]byte, (total+7)/8)
	for _, p := range ps {
		b[p/8] |= 1 << (p % 8)
	}
	return b
}

// bitSet reports whether bit p of bitmap b is set.
func bitSet(b []byte, p int32) bool { return int(p/8) < len(b) && b[p/8]&(1<<(p%8)) != 0 }

// restoreUpstream returns the reports of a form 2 UpstreamCheckpoint, its
// Manager's emitted watermark and its unobserved reports; a malformed one
// is an error.
func restoreUpstream(c *pb.UpstreamCheckpoint) (rs []*pb.WatermarkReport, out mtime.Time, err error) {
	out = mtime.Time(c.GetEmittedWatermarkMillis())
	total := c.GetTotalSourcePartitions()
	if total <= 0 || total > watermarkmgr.MaxSourcePartitions {
		return nil, 0, fmt.Errorf("stage: checkpoint of upstream %s: total %d", c.GetStage(), total)
	}
	var reported []int32
	switch {
	case len(c.GetSourcePartitions()) > 0:
		reported = c.GetSourcePartitions()
	case len(c.GetReported()) > 0:
		for p := int32(0); p < total; p++ {
			if bitSet(c.GetReported(), p) {
				reported = append(reported, p)
			}
		}
	default:
		for p := int32(0); p < total; p++ {
			reported = append(reported, p)
		}
	}
	codes, pts := c.GetWatermarkCodes(), c.GetProcessingTimeCodes()
	if len(codes) != len(reported) || len(pts) != 0 && len(pts) != len(reported) || c.GetPrecisionBits() > maxPrecision {
		return nil, 0, fmt.Errorf("stage: checkpoint of upstream %s: %d watermarks and %d processing times for %d partitions (precision %d)", c.GetStage(), len(codes), len(pts), len(reported), c.GetPrecisionBits())
	}
	idle := map[int32]bool{}
	for _, p := range c.GetIdlePartitions() {
		idle[p] = true
	}
	m := uint(c.GetPrecisionBits())
	for i, p := range reported {
		r := &pb.WatermarkReport{Stage: c.GetStage(), SourcePartition: p, TotalSourcePartitions: total, Idle: idle[p] || bitSet(c.GetIdle(), p)}
		switch code := codes[i]; code {
		case 0:
			r.CommittedWatermarkMillis = int64(out)
		case 1:
			r.CommittedWatermarkMillis = int64(mtime.MaxTimestamp)
		default:
			v, ok := fromClusterCode(c.GetAheadBasesMillis(), code-2, m)
			if !ok {
				return nil, 0, fmt.Errorf("stage: checkpoint of upstream %s: partition %d ahead of Out without a base", c.GetStage(), p)
			}
			r.CommittedWatermarkMillis = v
		}
		if len(pts) > 0 && pts[i] > 0 {
			v, ok := fromClusterCode(c.GetProcessingTimeBasesMillis(), pts[i]-1, m)
			if !ok {
				return nil, 0, fmt.Errorf("stage: checkpoint of upstream %s: partition %d's processing time without a base", c.GetStage(), p)
			}
			r.ProcessingTimeMillis = proto.Int64(v)
		}
		rs = append(rs, r)
	}
	return rs, out, nil
}

// expandUpstream returns the reports of a form 1 UpstreamCheckpoint (written
// by the previous version: offsets from the smallest watermark), sorted by
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

// RestoreTask rebuilds a task from a checkpoint; an empty checkpoint gives a
// fresh task. A checkpoint that does not decode is an error naming the
// partition: the runner refuses to guess a watermark.
//
// A form 2 upstream (see checkpoint) is restored as the Manager it was:
// first, when its Out is above the start of time, a report of partition 0
// at Out alone (total 1) and one Advance set the new Manager's Out (partition
// 0 has reported in any Manager whose Out moved: the first Advance that moved
// it saw every partition, and the total only grows, forgetting nothing); then every partition's report with the
// Manager's total, which replaces partition 0's watermark (stored >= Out) and
// idle flag. Out matters while the Manager is held (a total changed): the
// held Manager emits Out, not the start of time. The task's input watermark
// is floored at the checkpoint's (the Aggregator's own Out is not restored).
// Checkpoints of the previous version (form 1 upstreams and full reports)
// restore as they did: their reports observed in order.
func RestoreTask(partition int32, upstreams []string, metadata string) (*Task, error) {
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
	var unobserved []*pb.WatermarkReport
	primed := false
	for _, c := range cp.GetUpstreams() {
		var rs []*pb.WatermarkReport
		if c.EmittedWatermarkMillis == nil {
			rs, err = expandUpstream(c)
		} else {
			var out mtime.Time
			rs, out, err = restoreUpstream(c)
			if err == nil && out > mtime.MinTimestamp && len(rs) > 0 && rs[0].GetSourcePartition() == 0 {
				err = t.agg.Observe(c.GetStage(), 0, out, 1, false)
				primed = true
			}
			unobserved = append(unobserved, c.GetUnobservedReports()...)
		}
		if err != nil {
			return nil, fmt.Errorf("stage: restoring input partition %d: %w", partition, err)
		}
		reports = append(reports, rs...)
	}
	if primed {
		t.agg.Advance()
	}
	for _, r := range reports {
		if err := t.observe(r); err != nil {
			return nil, fmt.Errorf("stage: restoring input partition %d: %w", partition, err)
		}
	}
	for _, r := range unobserved {
		m := t.last[r.GetStage()]
		if m == nil {
			m = map[int32]*pb.WatermarkReport{}
			t.last[r.GetStage()] = m
		}
		if m[r.GetSourcePartition()] == nil {
			m[r.GetSourcePartition()] = r
		}
	}
	if cp.InputWatermarkMillis != nil {
		t.floor = mtime.Time(cp.GetInputWatermarkMillis())
	}
	t.out = mtime.Time(cp.GetOutputWatermarkMillis())
	t.reported = t.out > mtime.MinTimestamp
	return t, nil
}

// ReportAgain makes task t report at its next attempt even if its output
// watermark, idle flag and source details did not move: the Loop calls it
// for every assigned task when the input topic's partition count grew, so
// the next reports carry the new total (seed 000).
func (t *Task) ReportAgain() { t.reported = false }

// OutputWatermark is the output watermark task t last reported downstream
// (mtime.Time, ms; mtime.MinTimestamp before its first report).
func (t *Task) OutputWatermark() mtime.Time { return t.out }

// ReportedIdle is the idle flag of the task's last report: the stages
// downstream leave it out of their minimum (false before its first
// report).
func (t *Task) ReportedIdle() bool { return t.idle }

package step

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

func report(stage string, p int32, wm mtime.Time, total int32, idle bool) *pb.WatermarkReport {
	return &pb.WatermarkReport{Stage: stage, SourcePartition: p, CommittedWatermarkMillis: int64(wm), TotalSourcePartitions: total, Idle: idle}
}

// TestCheckpointRestoresTheInputWatermark: a new owner of a partition rebuilds
// the task's input watermark from the checkpoint alone (the reports it covers
// are behind the committed offset), including holds and idleness.
func TestCheckpointRestoresTheInputWatermark(t *testing.T) {
	up := []string{"a", "b"}
	tk := newTask(3, up)
	for _, r := range []*pb.WatermarkReport{
		report("a", 0, 100, 2, false), report("a", 1, 70, 2, false),
		report("b", 0, 90, 1, false), report("a", 1, 80, 2, false),
	} {
		if err := tk.observe(r); err != nil {
			t.Fatal(err)
		}
	}
	in, _ := tk.inputWatermark()
	if in != 80 {
		t.Fatalf("input watermark %d, want 80 = min(a: min(100, 80), b: 90)", in)
	}
	tk.out, tk.reported = 80, true
	md, err := tk.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	back, err := RestoreTask(3, up, md)
	if err != nil {
		t.Fatal(err)
	}
	if in2, _ := back.inputWatermark(); in2 != in || back.out != 80 || !back.reported {
		t.Fatalf("restored: input %d out %d reported %v, want %d 80 true", in2, back.out, back.reported, in)
	}
}

// TestRestoredTaskKeepsItsHeldUpstream: a task held by an upstream
// partition that has not reported (a/1 of 2) is restored held, and with the
// reports it had (a/0 at 5, b/0 at 7): once a/1 reports, the restored
// task's input watermark is min(a: min(5, 9), b: 7) = 5. A restore that
// lost the reports would stay held (a/0 and b/0 missing); one that lost a's
// partition count would not be held at all.
func TestRestoredTaskKeepsItsHeldUpstream(t *testing.T) {
	up := []string{"a", "b"}
	held := newTask(0, up)
	for _, r := range []*pb.WatermarkReport{report("a", 0, 5, 2, false), report("b", 0, 7, 1, false)} {
		if err := held.observe(r); err != nil {
			t.Fatal(err)
		}
	}
	if in, _ := held.inputWatermark(); in != mtime.MinTimestamp {
		t.Fatalf("before the checkpoint: input watermark %d, want mtime.MinTimestamp (a/1 never reported)", in)
	}
	md, err := held.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	back, err := RestoreTask(0, up, md)
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := back.inputWatermark(); in != mtime.MinTimestamp {
		t.Fatalf("held task restored at %d, want mtime.MinTimestamp (partition a/1 never reported)", in)
	}
	if err := back.observe(report("a", 1, 9, 2, false)); err != nil {
		t.Fatal(err)
	}
	if in, _ := back.inputWatermark(); in != 5 {
		t.Fatalf("restored task after a/1 reported 9: input watermark %d, want 5 = min(a: min(5, 9), b: 7) (the restore lost a/0 or b/0)", in)
	}
}

// TestRestoredTaskKeepsEachUpstreamsOut: an upstream Manager's emitted
// watermark Out can be above what its partitions' reports give on their
// own, and a restored task must keep it. Each row is a history, a
// checkpoint, then the same reports to the original and the restored task;
// in is the input watermark both must have after each. all idle, then one
// wakes: a/0 (10) and a/1 (20) idle make Out 20 (the max when all are
// idle); a/0 waking at 10 does not lower it. A re-opened hold: a's total
// grows to 3 at Out 100, b is at 50; while a is held it emits 100, so b at
// 80 gives 80 and b at 200 gives 100. Both fail on the previous version's
// checkpoint: its restored Manager started from the start of time (10, not
// 20), and its reports, replayed in partition order with their own totals,
// left a's total at 2 (not held). Every upstream idle, then one wakes: a
// idle at 100 and b at 50, both idle, make the input watermark 100 (the
// Aggregator's max over idle upstreams); b waking at 50 leaves it at 100,
// above what the Managers give on their own (50): b at 60 keeps 100, b at
// 150 gives 150 (a idle is left out).
func TestRestoredTaskKeepsEachUpstreamsOut(t *testing.T) {
	for _, tc := range []struct {
		name          string
		up            []string
		before, after []*pb.WatermarkReport
		in            []mtime.Time
	}{
		{"all idle, then one wakes", []string{"a"},
			[]*pb.WatermarkReport{report("a", 0, 10, 2, true), report("a", 1, 20, 2, true)},
			[]*pb.WatermarkReport{report("a", 0, 10, 2, false)},
			[]mtime.Time{20}},
		{"a re-opened hold", []string{"a", "b"},
			[]*pb.WatermarkReport{report("a", 0, 100, 2, false), report("a", 1, 100, 2, false), report("b", 0, 50, 1, false), nil, report("a", 0, 100, 3, false)},
			[]*pb.WatermarkReport{report("b", 0, 80, 1, false), report("b", 0, 200, 1, false)},
			[]mtime.Time{80, 100}},
		{"every upstream idle, then one wakes", []string{"a", "b"},
			[]*pb.WatermarkReport{report("a", 0, 100, 1, true), report("b", 0, 50, 1, false), nil, report("b", 0, 50, 1, true), nil, report("b", 0, 50, 1, false)},
			[]*pb.WatermarkReport{report("b", 0, 60, 1, false), report("b", 0, 150, 1, false)},
			[]mtime.Time{100, 150}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := newTask(0, tc.up)
			for _, r := range tc.before {
				if r == nil {
					tk.inputWatermark()
					continue
				}
				if err := tk.observe(r); err != nil {
					t.Fatal(err)
				}
			}
			tk.inputWatermark()
			md, err := tk.checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			back, err := RestoreTask(0, tc.up, md)
			if err != nil {
				t.Fatal(err)
			}
			if back.agg.Held() != tk.agg.Held() {
				t.Fatalf("restored held %v, original %v", back.agg.Held(), tk.agg.Held())
			}
			for i, r := range tc.after {
				for _, k := range []*Task{tk, back} {
					if err := k.observe(r); err != nil {
						t.Fatal(err)
					}
				}
				want, _ := tk.inputWatermark()
				if got, _ := back.inputWatermark(); got != want || want != tc.in[i] {
					t.Fatalf("after %v: restored input watermark %d, original %d, want %d", r, got, want, tc.in[i])
				}
			}
		})
	}
}

// previousCheckpoint was written by the previous version's checkpoint
// (checkpointV1) for input partition 4 of a stage reading clock, dense,
// mixed and sparse: dense 0..2 of 3 (now, the start of time idle, the end
// of time; a form 1 upstream), sparse 1 at 500 and 3 at 700 idle of 4
// (form 1 with source partitions: held), mixed 0 and 1 at 300 and 350 of 2
// then 2 at 320 of 3 (full reports: their totals differ), clock 0 at 1000
// with processing time 60 000 (a full report). Its input watermark was the
// start of time (sparse held).
const previousCheckpoint = "ChAKBWNsb2NrGOgHIAE44NQDCgwKBW1peGVkGKwCIAIKDgoFbWl4ZWQQARjeAiACCg4KBW1peGVkEAIYwAIgAxCJ2PLQxezO7/8BGioKBWRlbnNlEAMgidjy0MXszu//ASoR96/j6OfGsRAA7s+a3vSm4iAyAQEaGQoGc3BhcnNlEAQaAgEDIPQDKgMAyAEyAQM="

// TestPreviousCheckpointStillRestores: a checkpoint the previous version
// committed (form 1 upstreams and full reports) restores as it did, every
// partition's watermark, idle flag, total and processing time, the task's
// input watermark and job clock; and the restored task's own checkpoint
// (form 2) restores to the same again. Then sparse 0 and 2 report and
// every copy's input watermark is 300 = min(dense 1 764 547 200 000,
// sparse 500, mixed 300, clock 1 000).
func TestPreviousCheckpointStillRestores(t *testing.T) {
	up := []string{"clock", "dense", "mixed", "sparse"}
	back, err := RestoreTask(4, up, previousCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]*pb.WatermarkReport{
		"dense":  {report("dense", 0, 1_764_547_200_000, 3, false), report("dense", 1, mtime.MinTimestamp, 3, true), report("dense", 2, mtime.MaxTimestamp, 3, false)},
		"sparse": {report("sparse", 1, 500, 4, false), report("sparse", 3, 700, 4, true)},
		"mixed":  {report("mixed", 0, 300, 2, false), report("mixed", 1, 350, 2, false), report("mixed", 2, 320, 3, false)},
		"clock":  {report("clock", 0, 1000, 1, false)},
	}
	want["clock"][0].ProcessingTimeMillis = proto.Int64(60_000)
	for u, rs := range want {
		if len(back.last[u]) != len(rs) {
			t.Fatalf("%s: %d partitions restored, want %d", u, len(back.last[u]), len(rs))
		}
		for _, r := range rs {
			if g := back.last[u][r.GetSourcePartition()]; !proto.Equal(g, r) {
				t.Fatalf("%s/%d restored as %v, want %v", u, r.GetSourcePartition(), g, r)
			}
		}
	}
	md, err := back.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	again, err := RestoreTask(4, up, md)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []*Task{back, again} {
		if in, _ := k.inputWatermark(); in != mtime.MinTimestamp || k.out != mtime.MinTimestamp {
			t.Fatalf("restored input watermark %d, out %d: want the start of time (sparse held)", in, k.out)
		}
		if c, ok := k.inputClock(); c != 60_000 || !ok {
			t.Fatalf("restored job clock %d %v, want 60 000", c, ok)
		}
		for _, r := range []*pb.WatermarkReport{report("sparse", 0, 600, 4, false), report("sparse", 2, 650, 4, false)} {
			if err := k.observe(r); err != nil {
				t.Fatal(err)
			}
		}
		if in, _ := k.inputWatermark(); in != 300 {
			t.Fatalf("input watermark %d after sparse 0 and 2 reported, want 300", in)
		}
	}
}

func TestRestoreRefusesBadCheckpoints(t *testing.T) {
	if _, err := RestoreTask(2, nil, "not base64!"); err == nil || !strings.Contains(err.Error(), "input partition 2") {
		t.Fatalf("want an error naming partition 2, got %v", err)
	}
	tk := newTask(1, []string{"a"})
	_ = tk.observe(report("a", 0, 5, 1, false))
	md, _ := tk.checkpoint()
	if _, err := RestoreTask(1, []string{"other"}, md); !errors.Is(err, watermarkmgr.ErrUnknownUpstream) {
		t.Fatalf("a checkpoint of another plan: want ErrUnknownUpstream, got %v", err)
	}
	if tk, err := RestoreTask(4, []string{"a"}, ""); err != nil || tk.out != mtime.MinTimestamp || tk.reported {
		t.Fatalf("no checkpoint: want a fresh task, got %+v, %v", tk, err)
	}
	// Malformed form 2 upstreams: fewer codes than partitions, a code
	// ahead of Out without a base, a precision past maxPrecision, no total.
	for _, c := range []*pb.UpstreamCheckpoint{
		{Stage: "a", TotalSourcePartitions: 3, EmittedWatermarkMillis: proto.Int64(5), WatermarkCodes: []uint64{0, 0}},
		{Stage: "a", TotalSourcePartitions: 1, EmittedWatermarkMillis: proto.Int64(5), WatermarkCodes: []uint64{2}},
		{Stage: "a", TotalSourcePartitions: 1, EmittedWatermarkMillis: proto.Int64(5), WatermarkCodes: []uint64{0}, PrecisionBits: 63},
		{Stage: "a", EmittedWatermarkMillis: proto.Int64(5)},
	} {
		b, _ := proto.Marshal(&pb.TaskCheckpoint{Upstreams: []*pb.UpstreamCheckpoint{c}})
		if _, err := RestoreTask(6, []string{"a"}, base64.StdEncoding.EncodeToString(b)); err == nil || !strings.Contains(err.Error(), "input partition 6") {
			t.Fatalf("checkpoint %v: want an error naming partition 6, got %v", c, err)
		}
	}
}

func TestObserveRefusesBadReportsAndKeepsState(t *testing.T) {
	tk := newTask(0, []string{"a"})
	_ = tk.observe(report("a", 0, 50, 1, false))
	if err := tk.observe(report("a", 3, 60, 1, false)); !errors.Is(err, watermarkmgr.ErrPartitionOutOfRange) {
		t.Fatalf("want ErrPartitionOutOfRange, got %v", err)
	}
	if len(tk.last["a"]) != 1 {
		t.Fatalf("a refused report was recorded for the checkpoint: %v", tk.last)
	}
	if in, _ := tk.inputWatermark(); in != 50 {
		t.Fatalf("input watermark %d after a refused report, want 50", in)
	}
}

// TestKeyPartitionIsStableAndInRange: equal keys meet on one partition in
// every instance, so the partition is a pure function of the key bytes.
func TestKeyPartitionIsStableAndInRange(t *testing.T) {
	seen := map[int32]bool{}
	for i := 0; i < 1000; i++ {
		k := []byte{byte(i), byte(i >> 8), 7}
		p := keyPartition(k, 4)
		if p < 0 || p >= 4 || keyPartition(append([]byte(nil), k...), 4) != p {
			t.Fatalf("key %v: partition %d", k, p)
		}
		seen[p] = true
	}
	if len(seen) != 4 {
		t.Fatalf("1000 keys over 4 partitions reached only %d", len(seen))
	}
	// Pinned: a change of the hash would move keys between partitions of a
	// running application (its state would be on the wrong task).
	if got := keyPartition([]byte("beam"), 7); got != keyPartition([]byte("beam"), 7) || got != pinnedBeam {
		t.Fatalf("keyPartition(\"beam\", 7) = %d, want %d", got, pinnedBeam)
	}
}

// pinnedBeam is FNV-1a("beam") mod 7, computed outside Go.
const pinnedBeam = 1

// TestCheckpointFitsOffsetMetadata guards the commit of a task downstream
// of many partitions (issue 13, Partitions: BenchmarkPartitions' GroupByKey
// stage could not commit at 32 upstream partitions, "Offset metadata string
// too large"; issue 21 §5: the offsets from the smallest watermark took 8
// bytes each as soon as one idle partition reported the start of time, and
// the checkpoint passed the limit near 380 partitions). The checkpoint of
// 1 000 reported partitions of a Kafka source stage (its long name, its
// source details and instance in every report, a tenth idle at the start of
// time, a tenth at the end of time, four years ahead and behind, the rest
// close), beside a stage with only some partitions reported (not 0..n-1),
// one whose reports differ in their total and one whose reports carry
// processing times, stays within Kafka's default offset.metadata.max.bytes
// (4096) and exact (precision 0). The restored task has every partition's
// Manager state (a watermark at or below the upstream's Out as Out), and
// the same input watermark again after partition 0 moves.
func TestCheckpointFitsOffsetMetadata(t *testing.T) {
	const n = 1000
	src := "s0-kafkaio.Read_bench-parts-128-1796092197226"
	up := []string{"clocked", "gaps", "grown", src}
	tk := newTask(7, up)
	base := int64(1_764_547_200_000)
	for p := int32(0); p < n; p++ {
		wm := mtime.Time(base + int64(p%97)*10)
		switch {
		case p%10 == 3:
			wm = mtime.MinTimestamp
		case p%10 == 6:
			wm = mtime.MaxTimestamp
		case p%250 == 1:
			wm = mtime.Time(base + int64(p/250-2)*year)
		}
		r := report(src, p, wm, n, p%10 == 3)
		r.Instance = "slot-0"
		r.Source = &pb.SourcePartition{Topic: "bench-parts-128-1796092197226", HasLastEventTime: true, LastEventTimeMillis: base + 5000, IdlenessTimeoutMillis: 1000}
		if err := tk.observe(r); err != nil {
			t.Fatal(err)
		}
	}
	for p := int32(0); p < 20; p++ {
		r := report("clocked", p, 600, 20, false)
		r.ProcessingTimeMillis = proto.Int64(int64(p%3) * 60_000)
		if err := tk.observe(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*pb.WatermarkReport{
		report("gaps", 0, 500, 6, false), report("gaps", 2, 400, 6, true), report("gaps", 5, mtime.MaxTimestamp, 6, false),
		report("grown", 0, 300, 2, false), report("grown", 1, 350, 2, false), report("grown", 2, 320, 3, false),
	} {
		if err := tk.observe(r); err != nil {
			t.Fatal(err)
		}
	}
	tk.inputWatermark()
	md, err := tk.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if len(md) > 4096 {
		t.Fatalf("checkpoint of %d upstream partitions is %d bytes, more than Kafka's default offset.metadata.max.bytes (4096)", n, len(md))
	}
	if s := checkpointPrecision(t, md); s != 0 {
		t.Fatalf("checkpoint of %d bytes rounded watermarks to %d significant bits: want it exact", len(md), s)
	}
	t.Logf("checkpoint of %d upstream partitions: %d bytes", tk.upstreamPartitions(), len(md))
	back, err := RestoreTask(7, up, md)
	if err != nil {
		t.Fatal(err)
	}
	want, got := tk.agg.Snapshot(), back.agg.Snapshot()
	for i, u := range want.Upstreams {
		g := got.Upstreams[i]
		if g.Name != u.Name || g.Total != u.Total || g.Held != u.Held || g.AllIdle != u.AllIdle || len(g.Partitions) != len(u.Partitions) {
			t.Fatalf("%s restored as %+v, was %+v", u.Name, g.Snapshot, u.Snapshot)
		}
		for p, ps := range u.Partitions {
			if ps.Reported {
				ps.Watermark = max(ps.Watermark, u.Watermark)
			}
			if g.Partitions[p] != ps {
				t.Fatalf("%s/%d restored as %+v, was %+v (Out %d)", u.Name, p, g.Partitions[p], u.Partitions[p], u.Watermark)
			}
		}
	}
	if c, ok := back.inputClock(); c != 0 || !ok {
		t.Fatalf("restored job clock %d %v, want 0 (clocked/0)", c, ok)
	}
	// gaps is held (1, 3, 4 missing), grown re-opened by its total of 3.
	for _, r := range []*pb.WatermarkReport{
		report("gaps", 1, 900, 6, false), report("gaps", 3, 900, 6, false), report("gaps", 4, 900, 6, false),
		report("grown", 0, 400, 3, false), report("grown", 1, 400, 3, false), report(src, 0, mtime.Time(base+20_000), n, false),
	} {
		for _, k := range []*Task{tk, back} {
			if err := k.observe(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	want2, _ := tk.inputWatermark()
	if got, _ := back.inputWatermark(); got != want2 || want2 != 320 {
		t.Fatalf("restored task's input watermark %d, the original's %d, want 320 (grown/2)", got, want2)
	}
}

// checkpointV1 is the previous version's task.checkpoint, verbatim but for
// its name: form 1 UpstreamCheckpoints (offsets from the smallest
// watermark), full reports for a stage whose totals differ or that carries
// a processing time. Tests use it to write the checkpoints a running
// application already committed.
func checkpointV1(t *Task) (string, error) {
	cp := &pb.TaskCheckpoint{OutputWatermarkMillis: int64(t.out)}
	for _, u := range slices.Sorted(maps.Keys(t.last)) {
		m := t.last[u]
		rs := make([]*pb.WatermarkReport, 0, len(m))
		for _, p := range slices.Sorted(maps.Keys(m)) {
			rs = append(rs, m[p])
		}
		if c := compactUpstreamV1(u, rs); c != nil {
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

// compactUpstreamV1 is the previous version's compactUpstream, verbatim
// but for its name.
func compactUpstreamV1(stage string, rs []*pb.WatermarkReport) *pb.UpstreamCheckpoint {
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

// checkpointPrecision decodes a checkpoint and returns the largest
// precision_bits of its upstreams: 0 when every watermark is exact.
func checkpointPrecision(t *testing.T, md string) uint32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(md)
	if err != nil {
		t.Fatal(err)
	}
	cp := &pb.TaskCheckpoint{}
	if err := proto.Unmarshal(b, cp); err != nil {
		t.Fatal(err)
	}
	s := uint32(0)
	for _, c := range cp.GetUpstreams() {
		s = max(s, c.GetPrecisionBits())
	}
	return s
}

const year = 365 * 24 * 3600 * 1000

// wmPool returns a random watermark of the kinds a checkpoint must hold:
// the start and end of time, close to base, years apart, and near out.
func wmPool(rng *rand.Rand, base, out mtime.Time) mtime.Time {
	switch rng.Intn(9) {
	case 0:
		return mtime.MinTimestamp
	case 1:
		return mtime.MaxTimestamp
	case 2:
		return mtime.MinTimestamp + mtime.Time(rng.Intn(3))
	case 3:
		return mtime.MaxTimestamp - mtime.Time(rng.Intn(3))
	case 4:
		return base + mtime.Time(rng.Int63n(2*50*year)-50*year)
	case 5:
		if out > mtime.MinTimestamp+5 && out < mtime.MaxTimestamp-5 {
			return out + mtime.Time(rng.Intn(11)-5)
		}
		return out
	default:
		return base + mtime.Time(rng.Intn(2000))
	}
}

// TestClampingBelowOutChangesNoEmittedWatermark checks, against the real
// Manager, the rule form 2 checkpoints rest on: a Manager rebuilt from
// another's state with every partition watermark at or below Out stored as
// Out (and its Out set first by partition 0 alone, as RestoreTask does)
// emits the same watermark, held and all-idle state (below the end of
// time) after every later
// batch of reports as the original: 3 000 random histories, each cut at a
// random point (between Observe and Advance too), then 40 random batches
// of reports (idle flags, changes of the total, values below, at and above
// Out, the start and end of time) fed to both.
func TestClampingBelowOutChangesNoEmittedWatermark(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	base := mtime.Time(1_764_547_200_000)
	for iter := 0; iter < 3000; iter++ {
		a := watermarkmgr.New()
		total := int32(1 + rng.Intn(5))
		report := func(ms ...*watermarkmgr.Manager) {
			if rng.Intn(12) == 0 {
				total = max(1, total+int32(rng.Intn(3)-1))
			}
			p, wm, idle := int32(rng.Intn(int(total))), wmPool(rng, base, ms[0].Watermark()), rng.Intn(3) == 0
			for _, m := range ms {
				if err := m.Observe(p, wm, total, idle); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, n := 0, rng.Intn(40); i < n; i++ {
			report(a)
			if rng.Intn(3) == 0 {
				a.Advance()
			}
		}
		s := a.Snapshot()
		b := watermarkmgr.New()
		if s.Watermark > mtime.MinTimestamp {
			if !s.Partitions[0].Reported {
				t.Fatalf("iteration %d: Out %d with partition 0 unreported: RestoreTask cannot set Out", iter, s.Watermark)
			}
			_ = b.Observe(0, s.Watermark, 1, false)
			b.Advance()
		}
		for _, ps := range s.Partitions {
			if ps.Reported {
				if err := b.Observe(ps.Partition, max(ps.Watermark, s.Watermark), s.Total, ps.Idle); err != nil {
					t.Fatal(err)
				}
			}
		}
		for step := 0; step < 40; step++ {
			for i, n := 0, rng.Intn(3); i < n; i++ {
				report(a, b)
			}
			wa, wb := a.Advance(), b.Advance()
			// At the end of time the two may differ on AllIdle (a live
			// partition below Out clamped to it is done, issue 21): a
			// stage there is done, idle or not (the Aggregator counts an
			// upstream at the end of time as done whatever its idle flag).
			if wa != wb || a.Held() != b.Held() || a.AllIdle() != b.AllIdle() && wa < mtime.MaxTimestamp {
				t.Fatalf("iteration %d step %d: original %d held %v all idle %v, clamped %d %v %v\ncut at %+v", iter, step, wa, a.Held(), a.AllIdle(), wb, b.Held(), b.AllIdle(), s)
			}
		}
	}
}

// upstreamGen drives a task's upstreams with random reports: 1 000
// partitions in all over several upstreams, a mix of kinds per upstream.
type upstreamGen struct {
	rng    *rand.Rand
	names  []string
	totals map[string]int32
	// kinds[u] are the watermark kinds upstream u's partitions draw from
	// (indices of wmKind); pt[u]: u's reports carry a processing time.
	kinds map[string][]int
	pt    map[string]bool
	base  mtime.Time
}

// wmKind returns a watermark of kind k: 0 start of time (idle), 1 start of
// time, 2 end of time, 3 years apart, 4 close (within a second), 5 hours
// apart.
func (g *upstreamGen) wmKind(k int) (mtime.Time, bool) {
	switch k {
	case 0:
		return mtime.MinTimestamp, true
	case 1:
		return mtime.MinTimestamp, false
	case 2:
		return mtime.MaxTimestamp, g.rng.Intn(2) == 0
	case 3:
		return g.base + mtime.Time(g.rng.Int63n(2*100*year)-100*year), g.rng.Intn(5) == 0
	case 4:
		return g.base + mtime.Time(g.rng.Intn(1000)), g.rng.Intn(10) == 0
	default:
		return g.base + mtime.Time(g.rng.Int63n(48*3600*1000)), g.rng.Intn(10) == 0
	}
}

func (g *upstreamGen) report(u string, p int32) *pb.WatermarkReport {
	ks := g.kinds[u]
	wm, idle := g.wmKind(ks[g.rng.Intn(len(ks))])
	r := report(u, p, wm, g.totals[u], idle)
	if g.pt[u] {
		// A job clock: a TestStream's synthetic processing time, the
		// same few values over many partitions, sometimes hours apart.
		r.ProcessingTimeMillis = proto.Int64(int64(g.rng.Intn(4)) * int64(g.rng.Intn(4*3600*1000)+1))
	}
	return r
}

func newUpstreamGen(rng *rand.Rand, n int) *upstreamGen {
	g := &upstreamGen{rng: rng, totals: map[string]int32{}, kinds: map[string][]int{}, pt: map[string]bool{}, base: mtime.Time(1_764_547_200_000)}
	nu := 1 + rng.Intn(4)
	left := n
	for i := 0; i < nu; i++ {
		u := fmt.Sprintf("s%d-kafkaio.Read_bench-parts-128-1796092197226", i)
		g.names = append(g.names, u)
		tot := left
		if i < nu-1 {
			tot = 1 + rng.Intn(left-(nu-1-i))
		}
		left -= tot
		g.totals[u] = int32(tot)
		for k := 0; k < 6; k++ {
			if rng.Intn(2) == 0 {
				g.kinds[u] = append(g.kinds[u], k)
			}
		}
		if len(g.kinds[u]) == 0 {
			g.kinds[u] = []int{rng.Intn(6)}
		}
		g.pt[u] = rng.Intn(4) == 0
	}
	return g
}

// TestCheckpointRestoresUnderRealWatermarks is the property of issue 21 §5:
// a task downstream of 1 000 upstream partitions (1 to 4 upstreams, each a
// random mix of idle, start-of-time, end-of-time, years-apart, hours-apart
// and close watermarks, some partitions not reported, some totals changed,
// some upstreams with processing times) checkpoints within
// offset.metadata.max.bytes; restored, and fed the same reports as the
// uncheckpointed task, it has the same input watermark, all-idle flag and
// job clock after every batch when the checkpoint is exact (precision 0).
// When it is rounded, its input watermark and job clock are never above the
// original's, and its input watermark equals it once every partition has
// reported again.
func TestCheckpointRestoresUnderRealWatermarks(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	exact, rounded := 0, 0
	for iter := 0; iter < 60; iter++ {
		g := newUpstreamGen(rng, 1000)
		orig := newTask(9, g.names)
		observe := func(r *pb.WatermarkReport, ts ...*Task) {
			for _, k := range ts {
				if err := k.observe(r); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, u := range g.names {
			for p := int32(0); p < g.totals[u]; p++ {
				if rng.Intn(50) != 0 || iter%3 != 0 {
					observe(g.report(u, p), orig)
				}
			}
			if rng.Intn(4) == 0 {
				orig.inputWatermark()
			}
		}
		orig.inputWatermark()
		if iter%5 == 1 { // a total changes: the upstream's hold re-opens.
			u := g.names[rng.Intn(len(g.names))]
			g.totals[u] += int32(rng.Intn(3) - 1)
			if g.totals[u] > 0 {
				observe(g.report(u, 0), orig)
			} else {
				g.totals[u] = 1
			}
		}
		orig.out, orig.reported = orig.agg.Watermark(), true
		md, err := orig.checkpoint()
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if len(md) > maxMetadataBytes {
			t.Fatalf("iteration %d: checkpoint is %d bytes", iter, len(md))
		}
		precision := checkpointPrecision(t, md)
		if precision == 0 {
			exact++
		} else {
			rounded++
		}
		back, err := RestoreTask(9, g.names, md)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if back.out != orig.out || back.upstreamPartitions() != orig.upstreamPartitions() {
			t.Fatalf("iteration %d: restored out %d with %d partitions, was %d with %d", iter, back.out, back.upstreamPartitions(), orig.out, orig.upstreamPartitions())
		}
		compare := func(step string, mustEqual bool) {
			wo, io := orig.inputWatermark()
			wb, ib := back.inputWatermark()
			co, oko := orig.inputClock()
			cb, okb := back.inputClock()
			switch {
			case wb > wo:
				t.Fatalf("iteration %d %s: restored input watermark %d above the original's %d (precision %d)", iter, step, wb, wo, precision)
			case mustEqual && (wb != wo || ib != io):
				t.Fatalf("iteration %d %s: restored input watermark %d idle %v, original %d %v (precision %d)", iter, step, wb, ib, wo, io, precision)
			case oko != okb || cb > co || precision == 0 && cb != co:
				t.Fatalf("iteration %d %s: restored job clock %d %v, original %d %v (precision %d)", iter, step, cb, okb, co, oko, precision)
			}
		}
		compare("restored", precision == 0)
		for step := 0; step < 100; step++ {
			for i, n := 0, rng.Intn(20); i < n; i++ {
				u := g.names[rng.Intn(len(g.names))]
				if rng.Intn(30) == 0 {
					g.totals[u] = max(1, g.totals[u]+int32(rng.Intn(3)-1))
				}
				observe(g.report(u, int32(rng.Intn(int(g.totals[u])))), orig, back)
			}
			compare(fmt.Sprintf("step %d", step), precision == 0)
		}
		// Every partition reports again, at or above what both hold and the
		// original's input watermark: the rounded checkpoint has caught up.
		in, _ := orig.inputWatermark()
		for _, u := range g.names {
			snap := orig.agg.Snapshot()
			for _, us := range snap.Upstreams {
				if us.Name != u {
					continue
				}
				for _, ps := range us.Partitions {
					observe(report(u, ps.Partition, max(ps.Watermark, us.Watermark, in), us.Total, false), orig, back)
				}
			}
		}
		compare("caught up", true)
	}
	t.Logf("%d exact checkpoints, %d rounded", exact, rounded)
	if exact == 0 || rounded == 0 {
		t.Fatalf("the mixes gave %d exact and %d rounded checkpoints: both must be exercised", exact, rounded)
	}
}

// worstTask returns a task downstream of one upstream of n partitions (the
// long name of a Kafka source stage) in the given mix; every partition
// has reported unless held, in which case every 7th has not. clock "few":
// the reports carry one of 4 processing times (a TestStream's clock, which
// every task downstream of it reports as the min over its upstreams);
// "random": any in a day.
func worstTask(n int32, mix string, held bool, clock string) *Task {
	rng := rand.New(rand.NewSource(int64(n)))
	u := "s0-kafkaio.Read_bench-parts-128-1796092197226"
	tk := newTask(0, []string{u})
	now := int64(1_764_547_200_000)
	for p := int32(0); p < n; p++ {
		if held && p%7 == 3 {
			continue
		}
		var wm int64
		idle := p%3 == 1
		switch mix {
		case "issue": // idle at the start of time, finished, close.
			switch p % 3 {
			case 1:
				wm = int64(mtime.MinTimestamp)
			case 2:
				wm = int64(mtime.MaxTimestamp)
			default:
				wm = now + rng.Int63n(1000)
			}
		case "one behind": // one partition years behind, the others close.
			wm, idle = now+rng.Int63n(1000), false
			if p == 0 {
				wm = now - 5*year
			}
		case "hours": // spread over two days.
			wm = now + rng.Int63n(2*24*3600*1000)
		case "years": // spread over 200 years.
			wm = now + rng.Int63n(200*year) - 100*year
		case "anywhere": // spread over Beam's whole range, the start of time non-idle.
			wm = int64(mtime.MinTimestamp) + rng.Int63n(int64(mtime.MaxTimestamp-mtime.MinTimestamp))
			if p == 0 {
				wm, idle = int64(mtime.MinTimestamp), false
			}
		}
		r := report(u, p, mtime.Time(wm), n, idle)
		switch clock {
		case "few":
			r.ProcessingTimeMillis = proto.Int64(int64(p%4) * 3_600_000)
		case "random":
			r.ProcessingTimeMillis = proto.Int64(rng.Int63n(24 * 3600 * 1000))
		}
		_ = tk.observe(r)
	}
	tk.inputWatermark()
	return tk
}

// largestFitting returns the largest n <= hi (hi > 2) for which fits does,
// by bisection from [1, hi].
func largestFitting(hi int32, fits func(n int32) bool) int32 {
	lo := int32(1)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// TestCheckpointLargestUpstream measures the largest upstream (partitions
// of one upstream stage with a Kafka source's long name) whose checkpoint
// fits offset.metadata.max.bytes, for each mix, held (every 7th partition
// unreported) or not, with a job clock or not (worstTask): exactly
// (precision 0), and at all (rounded), and asserts the measured sizes
// (rounded down) so that a change of the encoding that loses them fails.
// The worst mix is "anywhere": independent watermarks over Beam's whole
// range, about 54 bits each, and the worst clock "random", one of 86.4
// million per partition. The mix (idle at the start of time,
// finished, close) and one partition years behind fit exactly far beyond
// 1 000; every mix fits 1 000 partitions rounded.
func TestCheckpointLargestUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: it bisects checkpoints of up to 20 000 partitions (a few seconds); run without -short (as make unit does) to measure the largest upstream")
	}
	type row struct {
		mix          string
		held         bool
		clock        string
		exact, atAll int32 // at least
	}
	for _, r := range []row{
		{"issue", false, "", 2000, 2600}, {"issue", true, "few", 1300, 1500}, {"issue", true, "random", 600, 1500},
		{"one behind", false, "", 1500, 2900}, {"one behind", true, "", 1600, 3000},
		{"hours", false, "", 700, 2600}, {"years", false, "", 450, 2600},
		{"anywhere", false, "", 350, 2600}, {"anywhere", true, "", 400, 2600},
		{"anywhere", true, "few", 350, 1500}, {"anywhere", true, "random", 250, 1500},
	} {
		exact := largestFitting(20000, func(n int32) bool {
			md, err := worstTask(n, r.mix, r.held, r.clock).checkpoint()
			return err == nil && checkpointPrecision(t, md) == 0
		})
		atAll := largestFitting(20000, func(n int32) bool {
			_, err := worstTask(n, r.mix, r.held, r.clock).checkpoint()
			return err == nil
		})
		md, err := worstTask(1000, r.mix, r.held, r.clock).checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-10s held %-5v clock %-6s: exact up to %5d partitions, rounded up to %5d; at 1000: %d bytes, precision %d bits", r.mix, r.held, r.clock, exact, atAll, len(md), checkpointPrecision(t, md))
		if exact < r.exact || atAll < r.atAll {
			t.Errorf("%s held %v clock %q: exact up to %d, at all up to %d; want at least %d and %d", r.mix, r.held, r.clock, exact, atAll, r.exact, r.atAll)
		}
	}
}

// TestOffsetCodeRoundsDownWithinItsPrecision: at precision m an offset d
// comes back as d' with d - d/2^(m-1) < d' <= d (exactly d below 2^m and at
// precision 0), and a larger offset never gets a smaller code.
func TestOffsetCodeRoundsDownWithinItsPrecision(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 200000; i++ {
		m := uint(rng.Intn(maxPrecision + 1))
		d := uint64(rng.Int63n(1 << uint(rng.Intn(62)+1)))
		c := offsetCode(d, m)
		back := offsetFromCode(c, m)
		exact := m == 0 || d < 1<<m
		if back > d || exact && back != d || !exact && d-back >= max(1, d>>(m-1)) {
			t.Fatalf("offset %d at precision %d: code %d, back %d", d, m, c, back)
		}
		if e := d + uint64(rng.Intn(1000)); offsetCode(e, m) < c {
			t.Fatalf("precision %d: offset %d has code %d, the larger %d has %d", m, d, c, e, offsetCode(e, m))
		}
	}
}

// BenchmarkCheckpoint: the checkpoint of 1 000 upstream partitions, exact
// (the mix) and rounded (anywhere: it bisects the precision), and
// the previous version's of the mix (form 1) beside them.
func BenchmarkCheckpoint(b *testing.B) {
	for _, mix := range []string{"issue", "anywhere"} {
		tk := worstTask(1000, mix, false, "")
		b.Run(mix, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := tk.checkpoint(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("previous", func(b *testing.B) {
		tk := worstTask(1000, "issue", false, "")
		for i := 0; i < b.N; i++ {
			_, _ = checkpointV1(tk)
		}
	})
}

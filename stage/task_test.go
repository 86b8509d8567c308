package stage

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

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
	back, err := restoreTask(3, up, md)
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
	back, err := restoreTask(0, up, md)
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

func TestRestoreRefusesBadCheckpoints(t *testing.T) {
	if _, err := restoreTask(2, nil, "not base64!"); err == nil || !strings.Contains(err.Error(), "input partition 2") {
		t.Fatalf("want an error naming partition 2, got %v", err)
	}
	tk := newTask(1, []string{"a"})
	_ = tk.observe(report("a", 0, 5, 1, false))
	md, _ := tk.checkpoint()
	if _, err := restoreTask(1, []string{"other"}, md); !errors.Is(err, watermarkmgr.ErrUnknownUpstream) {
		t.Fatalf("a checkpoint of another plan: want ErrUnknownUpstream, got %v", err)
	}
	if tk, err := restoreTask(4, []string{"a"}, ""); err != nil || tk.out != mtime.MinTimestamp || tk.reported {
		t.Fatalf("no checkpoint: want a fresh task, got %+v, %v", tk, err)
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
// too large"): the checkpoint of 1 000 reported partitions of a Kafka
// source stage (its long name, its source details and instance in every
// report, close watermarks, some idle) stays within Kafka's default
// offset.metadata.max.bytes (4096), and the restored task has every
// partition's watermark and idle flag: its input watermark, and the same
// again after partition 0 moves. A stage with only some partitions
// reported (not 0..n-1), and one whose reports differ in their total,
// round-trip too.
func TestCheckpointFitsOffsetMetadata(t *testing.T) {
	const n = 1000
	src := "s0-kafkaio.Read_bench-parts-128-1796092197226"
	up := []string{"gaps", "grown", src}
	tk := newTask(7, up)
	base := int64(1_764_547_200_000)
	for p := int32(0); p < n; p++ {
		r := report(src, p, mtime.Time(base+int64(p%97)*10), n, p%10 == 3)
		r.Instance = "slot-0"
		r.Source = &pb.SourcePartition{Topic: "bench-parts-128-1796092197226", HasLastEventTime: true, LastEventTimeMillis: base + 5000, IdlenessTimeoutMillis: 1000}
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
	md, err := tk.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if len(md) > 4096 {
		t.Fatalf("checkpoint of %d upstream partitions is %d bytes, more than Kafka's default offset.metadata.max.bytes (4096)", n, len(md))
	}
	back, err := restoreTask(7, up, md)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range up {
		for p, r := range tk.last[u] {
			g := back.last[u][p]
			if g.GetCommittedWatermarkMillis() != r.GetCommittedWatermarkMillis() || g.GetIdle() != r.GetIdle() || g.GetTotalSourcePartitions() != r.GetTotalSourcePartitions() {
				t.Fatalf("%s/%d restored as %v, was %v", u, p, g, r)
			}
		}
		if len(back.last[u]) != len(tk.last[u]) {
			t.Fatalf("%s: %d partitions restored, had %d", u, len(back.last[u]), len(tk.last[u]))
		}
	}
	// gaps is held (1, 3, 4 missing), grown re-opened by its total of 3.
	for _, r := range []*pb.WatermarkReport{
		report("gaps", 1, 900, 6, false), report("gaps", 3, 900, 6, false), report("gaps", 4, 900, 6, false),
		report("grown", 0, 400, 3, false), report("grown", 1, 400, 3, false), report(src, 0, mtime.Time(base+20_000), n, false),
	} {
		for _, k := range []*task{tk, back} {
			if err := k.observe(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, _ := tk.inputWatermark()
	if got, _ := back.inputWatermark(); got != want || want != 320 {
		t.Fatalf("restored task's input watermark %d, the original's %d, want 320 (grown/2)", got, want)
	}
}

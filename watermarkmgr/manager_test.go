package watermarkmgr

import (
	"errors"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// TestLargestPartition covers the largest valid report, partition
// MaxSourcePartitions-1 of MaxSourcePartitions (the fuzzer avoids it for
// speed), and the smallest invalid total above it, then a stale report with
// a smaller count that forgets nothing (the total only grows).
func TestLargestPartition(t *testing.T) {
	m := New()
	top := int32(MaxSourcePartitions - 1)
	if err := m.Observe(top, 7, MaxSourcePartitions, false); err != nil {
		t.Fatal(err)
	}
	if err := m.Observe(0, 5, MaxSourcePartitions+1, false); !errors.Is(err, ErrTotalTooLarge) {
		t.Fatalf("total MaxSourcePartitions+1: err = %v, want ErrTotalTooLarge", err)
	}
	if got := m.Advance(); got != mtime.MinTimestamp || !m.Held() || m.Total() != MaxSourcePartitions {
		t.Fatalf("Advance = %d, Held = %v, Total = %d; want held at min with total %d",
			got, m.Held(), m.Total(), MaxSourcePartitions)
	}
	if miss := m.Missing(); len(miss) != MaxSourcePartitions-1 || miss[len(miss)-1] != top-1 {
		t.Fatalf("Missing: %d partitions ending %d, want %d ending %d",
			len(miss), miss[len(miss)-1], MaxSourcePartitions-1, top-1)
	}
	if got, err := m.ObserveAndAdvance(0, 5, 1, false); err != nil || got != mtime.MinTimestamp || m.Total() != MaxSourcePartitions {
		t.Fatalf("stale report with total 1: %d, %v, total %d; want held at min, total %d", got, err, m.Total(), MaxSourcePartitions)
	}
	if s := m.Snapshot(); len(s.Missing) != MaxSourcePartitions-2 || !s.Partitions[top].Reported {
		t.Fatalf("after the stale report: %d missing, partition %d reported %v", len(s.Missing), top, s.Partitions[top].Reported)
	}
}

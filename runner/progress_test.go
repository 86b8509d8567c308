package runner

import (
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/watermarkmgr"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// TestDescribeWatermark pins the words of the progress log for each state
// of a stage's watermark.
func TestDescribeWatermark(t *testing.T) {
	for _, c := range []struct {
		s    watermarkmgr.Snapshot
		want string
	}{
		{watermarkmgr.Snapshot{Held: true, Missing: []int32{2, 3}, Watermark: mtime.MinTimestamp}, "held: tasks [2 3] have not reported yet"},
		{watermarkmgr.Snapshot{Held: true, Watermark: mtime.MinTimestamp}, "held: waiting for the first report"},
		{watermarkmgr.Snapshot{Watermark: mtime.MaxTimestamp}, "done (end of time)"},
		{watermarkmgr.Snapshot{Watermark: mtime.MinTimestamp}, "not started (beginning of time)"},
		{watermarkmgr.Snapshot{Watermark: mtime.FromMilliseconds(1112911993000)}, service.ISO(mtime.FromMilliseconds(1112911993000))},
	} {
		if got := describeWatermark(service.StageView{Snapshot: c.s}); got != c.want {
			t.Errorf("describeWatermark(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

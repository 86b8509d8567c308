package stage

import (
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// TestReportsEndOfTime: a batch of reports one of which is at the end of
// time ends an input (Loop.poll then commits without waiting out the
// commit interval); an element, a batch below the end, or a value that is
// not an Envelope does not.
func TestReportsEndOfTime(t *testing.T) {
	end := &pb.WatermarkReport{Stage: "s0", SourcePartition: 1, CommittedWatermarkMillis: int64(mtime.MaxTimestamp), TotalSourcePartitions: 4}
	below := &pb.WatermarkReport{Stage: "s0", SourcePartition: 0, CommittedWatermarkMillis: int64(mtime.MaxTimestamp) - 1, TotalSourcePartitions: 4}
	single, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: end}})
	for _, c := range []struct {
		name string
		v    []byte
		want bool
	}{
		{"batch with one at the end", envelope.EncodeReports([]*pb.WatermarkReport{below, end}), true},
		{"single report at the end", single, true},
		{"batch below the end", envelope.EncodeReports([]*pb.WatermarkReport{below}), false},
		{"element", envelope.EncodeElement([]byte("x")), false},
		{"not an Envelope", []byte{0xff, 0xff, 0xff}, false},
	} {
		if got := reportsEndOfTime(c.v); got != c.want {
			t.Errorf("%s: reportsEndOfTime = %v, want %v", c.name, got, c.want)
		}
	}
}

package step

import (
	"context"
	"fmt"
	"testing"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// BenchmarkDecideElements is the step's hot path: one attempt of 10 000
// element records of a stateless stage and a record of reports per task,
// as the loop hands it over (issue 23 measured the trust checks with it
// against main: go test ./stage/step -run '^$' -bench DecideElements).
func BenchmarkDecideElements(b *testing.B) {
	const tasks, n = 4, 10000
	spec := Spec{ApplicationID: "app", Name: stepName, InputTopic: "in", Partitions: tasks, Upstreams: []string{"up"}, HeadOutput: mainPC,
		Outputs: []Output{{PCollection: mainPC, Topics: []OutputTopic{{Name: "out", Partitions: tasks, Copies: 1}}}}}
	s, err := New(Config{Spec: spec, Head: &Passthrough{}, ReportTopic: reportTopic})
	if err != nil {
		b.Fatal(err)
	}
	hs := []Header{{Key: "kafkastreams.application_id", Value: []byte("app")}} // envelope.WriterHeader
	var batch []In
	off := make([]int64, tasks)
	for i := 0; i < n; i++ {
		p := int32(i % tasks)
		batch = append(batch, In{Task: p, Offset: off[p], Value: envelope.EncodeElement([]byte(fmt.Sprintf("element-%06d-0123456789-0123456789", i)))})
		off[p]++
	}
	for p := int32(0); p < tasks; p++ {
		batch = append(batch, In{Task: p, Offset: off[p], Headers: hs, Value: envelope.EncodeReports([]*pb.WatermarkReport{{Stage: "up", SourcePartition: p, TotalSourcePartitions: tasks, CommittedWatermarkMillis: 1000}})})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ts := map[int32]*Task{}
		for p := int32(0); p < tasks; p++ {
			ts[p] = newTask(p, []string{"up"})
		}
		if _, err := s.Decide(context.Background(), ts, batch, nil); err != nil {
			b.Fatal(err)
		}
	}
}

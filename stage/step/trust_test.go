package step

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// TestStepSkipsUntrusted guards issue 23's "records in internal topics
// that the runner did not write": a value that is not an Envelope, a
// well-formed report without the application's header (a plain
// producer's: here at the end of time), a report of a stage that is no
// upstream and one of a partition out of range are skipped (named in
// Ready.Untrusted), the task commits past them, the elements around them
// go through, and the forged end of time moves nothing. Before, the first
// failed every attempt of the task (Decide's error), and the second ended
// the upstream for the task.
func TestStepSkipsUntrusted(t *testing.T) {
	const app = "app"
	spec := Spec{ApplicationID: app, Name: stepName, InputTopic: "in", Partitions: 1, Upstreams: []string{"up"}, HeadOutput: mainPC,
		Outputs: []Output{{PCollection: mainPC, Topics: []OutputTopic{{Name: "out", Partitions: 1, Copies: 1}}}}}
	s, err := New(Config{Spec: spec, Head: &Passthrough{}, ReportTopic: reportTopic})
	if err != nil {
		t.Fatal(err)
	}
	report := func(stage string, sp, total int32, wm int64, hs []Header) In {
		return In{Value: envelope.EncodeReports([]*pb.WatermarkReport{{Stage: stage, SourcePartition: sp, TotalSourcePartitions: total, CommittedWatermarkMillis: wm}}), Headers: hs}
	}
	batch := []In{
		{Value: envelope.EncodeElement([]byte("a"))},
		{Value: []byte("garbage: not an Envelope")},
		report("up", 0, 1, 1000, writerHeaders(app)),
		report("up", 0, 1, int64(mtime.MaxTimestamp), nil),     // the end of time, from a plain producer
		report("up", 0, 1, 5000, writerHeaders("another-app")), // another application's
		report("elsewhere", 0, 1, 5000, writerHeaders(app)),    // no upstream of st
		report("up", 3, 1, 5000, writerHeaders(app)),           // partition out of range
		{Value: envelope.EncodeElement([]byte("b"))},
	}
	for i := range batch {
		batch[i].Offset = int64(i)
	}
	tasks := map[int32]*Task{0: newTask(0, []string{"up"})}
	r, err := s.Decide(context.Background(), tasks, batch, nil)
	if err != nil {
		t.Fatalf("Decide failed on untrusted records: %v", err)
	}
	var skipped []int64
	for _, u := range r.Untrusted {
		skipped = append(skipped, u.Offset)
	}
	if want := []int64{1, 3, 4, 5, 6}; !slices.Equal(skipped, want) {
		t.Fatalf("skipped offsets %v, want %v (%+v)", skipped, want, r.Untrusted)
	}
	for _, u := range r.Untrusted {
		if u.Offset == 1 && !strings.Contains(u.Reason, "not an Envelope") || u.Offset == 3 && !strings.Contains(u.Reason, envelope.WriterHeader) {
			t.Errorf("offset %d: reason %q", u.Offset, u.Reason)
		}
	}
	if len(r.Offsets) != 1 || r.Offsets[0].Next != int64(len(batch)) {
		t.Fatalf("offsets %+v, want task 0 committed at %d (past every skipped record)", r.Offsets, len(batch))
	}
	if wm, _ := tasks[0].inputWatermark(); wm != 1000 {
		t.Fatalf("input watermark %s, want 1000: only the application's report of up/0 counts", stepTime(wm))
	}
	var out []string
	for _, rec := range r.Records {
		if rec.Topic == "out" {
			if e, _, err := envelope.Decode(rec.Value); err == nil && e != nil {
				out = append(out, string(e))
			}
		}
	}
	if strings.Join(out, ",") != "a,b" {
		t.Fatalf("elements out %v, want a,b", out)
	}
}

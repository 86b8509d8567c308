package step

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// clockHead is a Passthrough that records the job clock the step hands it
// (JobClockReader) beside each Element and Advance, and, with source set,
// drives the clock as a TestStream does (JobClockSource): an element
// "v~C" means "the clock reads C once this record is committed".
type clockHead struct {
	Passthrough
	trace  []string
	clock  map[int32]int64
	source bool
	cur    map[int32]int64
}

func (h *clockHead) SetProcessingTime(p int32, ms int64) {
	h.clock[p] = ms
	h.trace = append(h.trace, fmt.Sprintf("clock(%d)=%d", p, ms))
}

func (h *clockHead) Element(p int32, r In) (Work, error) {
	v := string(r.Value)
	if h.source {
		var c int64
		v, _, _ = strings.Cut(v, "~")
		fmt.Sscan(string(r.Value[len(v)+1:]), &c)
		h.cur[p] = c
		h.trace = append(h.trace, "Element "+v)
		return Work{Elements: [][]byte{[]byte(v)}, Point: true}, nil
	}
	h.trace = append(h.trace, "Element "+v)
	return Work{Elements: [][]byte{[]byte(v)}}, nil
}

func (h *clockHead) Advance(p int32, in mtime.Time) (Work, error) {
	if ms, ok := h.clock[p]; ok {
		h.trace = append(h.trace, fmt.Sprintf("Advance at clock %d", ms))
	}
	return Work{}, nil
}

func (h *clockHead) Hold(int32) mtime.Time { return mtime.MaxTimestamp }

// clockSourceHead adds JobClockSource to clockHead.
type clockSourceHead struct{ *clockHead }

func (h clockSourceHead) ProcessingTime(p int32) (int64, bool) {
	c, ok := h.cur[p]
	return c, ok
}

func clockReport(stage string, sp int32, wm mtime.Time, clock int64) []byte {
	r := &pb.WatermarkReport{Stage: stage, SourcePartition: sp, CommittedWatermarkMillis: int64(wm), TotalSourcePartitions: 1, ProcessingTimeMillis: proto.Int64(clock)}
	b, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: r}})
	return b
}

func clockElement(v string) []byte {
	b, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Element{Element: []byte(v)}})
	return b
}

// readyTrace renders a Ready's records to the output topic: "v" for an
// element, "report clock=C" (or "report no clock") for a report.
func readyTrace(t *testing.T, r *Ready) []string {
	var out []string
	for _, rec := range r.Records {
		if rec.Topic != "out" || rec.Partition != 0 {
			continue
		}
		el, reps, err := envelope.Decode(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, rep := range reps {
			if rep.ProcessingTimeMillis == nil {
				out = append(out, "report no clock")
			} else {
				out = append(out, fmt.Sprintf("report clock=%d", rep.GetProcessingTimeMillis()))
			}
		}
		if el != nil {
			out = append(out, string(el))
		}
	}
	return out
}

func identity(_ context.Context, w Work, _ Emit) (*Bundle, error) {
	return &Bundle{Outputs: map[string][][]byte{"main": w.Elements}}, nil
}

// TestStepJobClock: with Config.JobClock a downstream task's
// processing time is its upstream's reported clock; a report that moves
// only the clock is a point (Advance runs there, before the next record,
// in one batch as in many), and the task's own report carries the clock
// on. Without JobClock the head never hears of it.
func TestStepJobClock(t *testing.T) {
	spec := Spec{Name: "st", InputTopic: "in", Partitions: 1, Upstreams: []string{"up"}, HeadOutput: "main",
		Outputs: []Output{{PCollection: "main", Topics: []OutputTopic{{Name: "out", Partitions: 1, Copies: 1}}}}}
	batch := []In{
		{Task: 0, Offset: 0, Value: clockReport("up", 0, mtime.MinTimestamp, 100), Headers: writerHeaders(spec.ApplicationID)},
		{Task: 0, Offset: 1, Value: clockElement("a")},
		{Task: 0, Offset: 2, Value: clockReport("up", 0, mtime.MinTimestamp, 5100), Headers: writerHeaders(spec.ApplicationID)},
		{Task: 0, Offset: 3, Value: clockElement("b")},
	}
	run := func(jobClock bool, split bool) ([]string, []string) {
		h := &clockHead{clock: map[int32]int64{}}
		s, err := New(Config{Spec: spec, Head: h, Process: identity, ReportTopic: "reports", JobClock: jobClock})
		if err != nil {
			t.Fatal(err)
		}
		tasks := map[int32]*Task{0: newTask(0, spec.Upstreams)}
		var out []string
		batches := [][]In{batch}
		if split {
			batches = [][]In{batch[:1], batch[1:2], batch[2:3], batch[3:]}
		}
		for _, b := range batches {
			r, err := s.Decide(context.Background(), tasks, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, readyTrace(t, r)...)
		}
		return h.trace, out
	}
	for _, split := range []bool{false, true} {
		trace, out := run(true, split)
		got := strings.Join(trace, "; ")
		// b's element follows the Advance at clock 5100 whatever the batching.
		if !strings.Contains(got, "clock(0)=100") || !strings.Contains(got, "Element a") ||
			strings.Index(got, "Advance at clock 5100") > strings.Index(got, "Element b") || !strings.Contains(got, "Advance at clock 5100") {
			t.Errorf("split=%v: head trace %q: want the clock 100 before a, an Advance at clock 5100 before b", split, got)
		}
		outs := strings.Join(out, "; ")
		if strings.Index(outs, "report clock=5100") < strings.Index(outs, "a") || strings.Index(outs, "report clock=5100") > strings.Index(outs, "b") {
			t.Errorf("split=%v: output %q: want a report carrying clock 5100 between a and b", split, outs)
		}
	}
	trace, out := run(false, false)
	if got := strings.Join(trace, "; "); strings.Contains(got, "clock") {
		t.Errorf("without JobClock the head heard of a clock: %q", got)
	}
	if got := strings.Join(out, "; "); strings.Contains(got, "clock=") {
		t.Errorf("without JobClock a report carried a clock: %q", got)
	}
}

// TestStepJobClockSource: a JobClockSource head's task reports the clock
// after each point's outputs, and a point that moves only the clock (the
// watermark stays) still reports, so downstream sees the clock move
// before the next segment's elements.
func TestStepJobClockSource(t *testing.T) {
	spec := Spec{Name: "ts", InputTopic: "in", Partitions: 1, RawInput: true, HeadOutput: "main",
		Outputs: []Output{{PCollection: "main", Topics: []OutputTopic{{Name: "out", Partitions: 1, Copies: 1}}}}}
	h := clockSourceHead{&clockHead{clock: map[int32]int64{}, source: true, cur: map[int32]int64{}}}
	s, err := New(Config{Spec: spec, Head: h, Process: identity, ReportTopic: "reports", JobClock: true})
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[int32]*Task{0: newTask(0, nil)}
	r, err := s.Decide(context.Background(), tasks, []In{
		{Task: 0, Offset: 0, Value: []byte("a~100")},
		{Task: 0, Offset: 1, Value: []byte("b~5100")},
		{Task: 0, Offset: 2, Value: []byte("c~5100")},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(readyTrace(t, r), "; ")
	want := "a; report clock=100; b; report clock=5100; c"
	if got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

package step

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// TestStepSpill: with Config.Spill, an attempt hands its records on
// in order whenever they hold SpillBytes, while the bundles run (outputs
// a ProcessFunc streams through Emit included), and Ready keeps only the
// rest: the records spilled followed by Ready.Records are exactly, in
// order, those of the same attempt without Spill. An error from Spill
// fails Decide.
func TestStepSpill(t *testing.T) {
	spec := Spec{Name: "st", InputTopic: "in", Partitions: 2, Upstreams: []string{"up"}, HeadOutput: "main",
		Outputs: []Output{{PCollection: "out", Topics: []OutputTopic{{Name: "out", Partitions: 3, Copies: 1}}}}}
	// Each element becomes 40 outputs streamed through emit, in 4 calls,
	// and one more returned in the Bundle.
	process := func(_ context.Context, w Work, emit Emit) (*Bundle, error) {
		var last [][]byte
		for _, e := range w.Elements {
			for c := 0; c < 4; c++ {
				var es [][]byte
				for i := 0; i < 10; i++ {
					es = append(es, []byte(fmt.Sprintf("%s/%d/%d-%0100d", e, c, i, 0)))
				}
				if err := emit("out", es); err != nil {
					return nil, err
				}
			}
			last = append(last, append([]byte("last-"), e...))
		}
		return &Bundle{Outputs: map[string][][]byte{"out": last}}, nil
	}
	var batch []In
	for i := 0; i < 30; i++ {
		batch = append(batch, In{Task: int32(i % 2), Offset: int64(i / 2), Value: envelope.EncodeElement([]byte(fmt.Sprint("e", i)))})
	}
	type rec struct {
		Topic     string
		Partition int32
		Key       string
		Value     string
	}
	run := func(spillBytes int, spillErr error) (all []rec, spills int, r *Ready, err error) {
		cfg := Config{Spec: spec, Head: &Passthrough{}, Process: process, ReportTopic: "reports"}
		if spillBytes > 0 {
			cfg.SpillBytes = spillBytes
			cfg.Spill = func(rs []Record) error {
				spills++
				for _, x := range rs {
					all = append(all, rec{x.Topic, x.Partition, string(x.Key), string(x.Value)})
				}
				return spillErr
			}
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tasks := map[int32]*Task{0: newTask(0, spec.Upstreams), 1: newTask(1, spec.Upstreams)}
		if r, err = s.Decide(context.Background(), tasks, batch, nil); err != nil {
			return nil, spills, nil, err
		}
		if r.Spilled != len(all) {
			t.Errorf("Ready.Spilled = %d, Spill took %d records", r.Spilled, len(all))
		}
		for _, x := range r.Records {
			all = append(all, rec{x.Topic, x.Partition, string(x.Key), string(x.Value)})
		}
		return all, spills, r, nil
	}
	want, _, wr, err := run(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if wr.ElementsOut != 30*41 {
		t.Fatalf("without Spill: %d elements out, want %d", wr.ElementsOut, 30*41)
	}
	got, spills, r, err := run(8<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if spills < 10 {
		t.Errorf("Spill ran %d times over ~150 KB of records in steps of 8 KiB", spills)
	}
	if len(r.Records) >= len(want)/10 {
		t.Errorf("Ready still holds %d of %d records", len(r.Records), len(want))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("spilled + Ready.Records (%d records) differ from the attempt without Spill (%d)", len(got), len(want))
	}
	refused := fmt.Errorf("producer fenced")
	if _, _, _, err := run(8<<10, refused); err == nil {
		t.Fatal("Decide succeeded though Spill failed")
	}
}

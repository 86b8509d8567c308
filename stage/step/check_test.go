package step

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// TestDecideChecksElements (issue 23, a well-formed Envelope with garbage
// element bytes): with Spec.CheckElement, an element record it refuses
// fails Decide with ErrUndecodable naming the record (input topic,
// partition, offset) and the check's error, before the head sees it; the
// others pass.
func TestDecideChecksElements(t *testing.T) {
	spec := Spec{ApplicationID: "app", Name: stepName, InputTopic: "in", Partitions: 2, Upstreams: []string{"up"}, HeadOutput: mainPC,
		Outputs: []Output{{PCollection: mainPC, Topics: []OutputTopic{{Name: "out", Partitions: 2, Copies: 1}}}},
		CheckElement: func(e []byte) error {
			if bytes.HasPrefix(e, []byte("good")) {
				return nil
			}
			return errors.New("2 bytes, short of a windowed value's header")
		}}
	s, err := New(Config{Spec: spec, Head: &Passthrough{}, ReportTopic: reportTopic})
	if err != nil {
		t.Fatal(err)
	}
	tasks := func() map[int32]*Task {
		return map[int32]*Task{0: newTask(0, []string{"up"}), 1: newTask(1, []string{"up"})}
	}
	good := []In{{Task: 0, Offset: 4, Value: envelope.EncodeElement([]byte("good-1"))}, {Task: 1, Offset: 7, Value: envelope.EncodeElement([]byte("good-2"))}}
	if _, err := s.Decide(context.Background(), tasks(), good, nil); err != nil {
		t.Fatalf("elements the check takes: %v", err)
	}
	s.Abort([]int32{0, 1})
	bad := append(good, In{Task: 1, Offset: 8, Value: envelope.EncodeElement([]byte{0xde, 0xad})})
	_, err = s.Decide(context.Background(), tasks(), bad, nil)
	if !errors.Is(err, ErrUndecodable) || !strings.Contains(err.Error(), "element at in[1]@8") || !strings.Contains(err.Error(), "short of a windowed value's header") {
		t.Fatalf("an element the check refuses: %v, want ErrUndecodable naming in[1]@8 and why", err)
	}
}

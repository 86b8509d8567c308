package step

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"unsafe"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// stateHead is a Passthrough that has one changelog record of state per
// element it took, and records how the attempt was acknowledged.
type stateHead struct {
	Passthrough
	pending [][]byte
	calls   []string
	failAck bool
}

func (h *stateHead) Element(p int32, r In) (Work, error) {
	h.pending = append(h.pending, r.Value)
	return h.Passthrough.Element(p, r)
}

func (h *stateHead) Prepare(produce ProduceFunc) error {
	h.calls = append(h.calls, "prepare")
	for _, v := range h.pending {
		if err := produce("changelog", 0, []byte("k"), v); err != nil {
			return err
		}
	}
	return nil
}

func (h *stateHead) Committed() error {
	h.calls = append(h.calls, "committed")
	h.pending = nil
	if h.failAck {
		return errors.New("disk full")
	}
	return nil
}

func (h *stateHead) Aborted(ps []int32) error {
	h.calls = append(h.calls, "aborted")
	h.pending = nil
	return nil
}

// TestReadyCarriesTheHeadsState (issue 22, "the head's state to commit
// travels in the Ready"): Decide puts the head's Prepare records in
// Ready.State, and Advance is the one acknowledgement: the head's
// Committed, then the bundles' callbacks; Abort drops the state instead.
// Before, the Loop called Prepare inside its transaction, Committed after
// it and the callbacks itself.
func TestReadyCarriesTheHeadsState(t *testing.T) {
	h := &stateHead{}
	var calls []string
	process := func(_ context.Context, w Work, _ Emit) (*Bundle, error) {
		return &Bundle{Outputs: map[string][][]byte{"out": w.Elements}, Committed: func() { calls = append(calls, "bundle") }}, nil
	}
	s, err := New(Config{
		Spec: Spec{Name: "st", InputTopic: "in", Partitions: 1, Upstreams: []string{"up"}, HeadOutput: "main",
			Outputs: []Output{{PCollection: "out", Topics: []OutputTopic{{Name: "down", Partitions: 1, Copies: 1}}}}},
		Head: h, Process: process, ReportTopic: "reports",
	})
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[int32]*Task{0: NewTask(0, []string{"up"})}
	batch := []In{{Task: 0, Offset: 0, Value: envelope.EncodeElement([]byte("a"))}, {Task: 0, Offset: 1, Value: envelope.EncodeElement([]byte("b"))}}
	rd, err := s.Decide(context.Background(), tasks, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	var state []string
	for _, r := range rd.State {
		state = append(state, r.Topic+":"+string(r.Value))
	}
	if want := []string{"changelog:a", "changelog:b"}; !reflect.DeepEqual(state, want) {
		t.Fatalf("Ready.State = %v, want %v", state, want)
	}
	if rd.Empty() {
		t.Fatal("Ready with records, state and offsets is Empty")
	}
	if want := []string{"prepare"}; !reflect.DeepEqual(h.calls, want) || len(calls) != 0 {
		t.Fatalf("before Advance: head calls %v, callbacks %v; want %v and none", h.calls, calls, want)
	}
	calls = append(calls, "advance")
	if err := s.Advance(rd); err != nil {
		t.Fatal(err)
	}
	if want := []string{"prepare", "committed"}; !reflect.DeepEqual(h.calls, want) {
		t.Fatalf("head calls %v, want %v", h.calls, want)
	}
	if want := []string{"advance", "bundle"}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("callbacks %v, want %v (after the head's Committed)", calls, want)
	}

	// A failed acknowledgement runs no callback; Abort reaches the head.
	h.calls, calls, h.failAck = nil, nil, true
	tasks[0] = NewTask(0, []string{"up"})
	if rd, err = s.Decide(context.Background(), tasks, batch[:1], nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(rd); err == nil || len(calls) != 0 {
		t.Fatalf("Advance with a failing head: err %v, callbacks %v; want an error and none", err, calls)
	}
	if err := s.Abort([]int32{0}); err != nil || h.calls[len(h.calls)-1] != "aborted" {
		t.Fatalf("Abort: err %v, head calls %v", err, h.calls)
	}
}

// oneTaskStep is a one-task Step headed by h, reading "in" from the
// upstream "up", its bundles empty.
func oneTaskStep(t *testing.T, h Head) *Step {
	t.Helper()
	s, err := New(Config{
		Spec: Spec{Name: "st", InputTopic: "in", Partitions: 1, Upstreams: []string{"up"}, HeadOutput: "main",
			Outputs: []Output{{PCollection: "out", Topics: []OutputTopic{{Name: "down", Partitions: 1, Copies: 1}}}}},
		Head:        h,
		Process:     func(context.Context, Work, Emit) (*Bundle, error) { return &Bundle{}, nil },
		ReportTopic: "reports",
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadyCarriesStateWithoutOffsets: an attempt that touches no task (no
// record, no task woken) still carries the head's pending state in its
// Ready. Advance applies every pending change (Head.Committed), so a Ready
// without the changelog records of a change would make the local store
// hold what the changelog never saw. Decide's early way out for an
// attempt without tasks skipped Prepare when it moved out of the Loop.
func TestReadyCarriesStateWithoutOffsets(t *testing.T) {
	h := &stateHead{pending: [][]byte{[]byte("left")}}
	s := oneTaskStep(t, h)
	rd, err := s.Decide(context.Background(), map[int32]*Task{0: NewTask(0, []string{"up"})}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.State) != 1 || string(rd.State[0].Value) != "left" || rd.Empty() {
		t.Fatalf("Ready.State = %v (Empty %v), want the head's pending record \"left\"", rd.State, rd.Empty())
	}
}

// sizedHead is a stateHead that says how many records its Prepare makes
// (StateSizer).
type sizedHead struct {
	stateHead
}

func (h *sizedHead) PendingState() int { return len(h.pending) }

// TestReadyStateSizedOnce: a head that is a StateSizer gets Ready.State
// sized for its records before Prepare, so no record's append reallocates
// it (a GroupByKey's last commit of a backlog read over 128 partitions
// carried 1.66 M changelog records, and growing the slice was 10% of its
// stage's CPU).
func TestReadyStateSizedOnce(t *testing.T) {
	h := &sizedHead{}
	s := oneTaskStep(t, h)
	for i := 0; i < 5000; i++ {
		h.pending = append(h.pending, []byte{byte(i)})
	}
	rd, err := s.Decide(context.Background(), map[int32]*Task{0: NewTask(0, []string{"up"})}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Sized once: 5000 records and the allocation's rounding up to a
	// whole page, no more (growing by appends leaves a quarter or more).
	if most := 5000 + 8192/int(unsafe.Sizeof(Record{})); len(rd.State) != 5000 || cap(rd.State) > most {
		t.Fatalf("Ready.State: %d records in a capacity of %d, want 5000 in at most %d (sized once from PendingState)", len(rd.State), cap(rd.State), most)
	}
}

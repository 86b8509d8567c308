package stage

import (
	"context"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// ProduceFunc writes one record into the open transaction.
type ProduceFunc func(topic string, partition int32, key, value []byte) error

// Head is the runner-side transform at the head of a stage: it turns the
// element records of a task's input partition into the elements of the
// stage's bundle. All calls come from the goroutine running Loop.Run.
//
// One transaction attempt is: Element for each element record of the batch
// (in offset order per task), Advance once for every task the batch touched,
// then, inside the open transaction, Prepare; a GroupByKey head also gets an
// Advance right after each report that moves a task's input watermark,
// before the task's next record (Loop.advanceOnReport), so that a value's
// lateness follows the partition's order; then Committed if the
// transaction committed, or Aborted if it did not (the Loop then rewinds the
// aborted tasks to their committed offsets).
type Head interface {
	// Assign is called when task p (input partition p) is assigned, before
	// any of its records: the head restores the task's state.
	Assign(ctx context.Context, p int32) error
	// Revoke is called when task p has moved to another instance.
	Revoke(p int32)
	// Element handles one element record of task p: key is the record's
	// Kafka key (the encoded Beam key on a GroupByKey topic), value the
	// element encoded with the upstream output's wire coder. It returns the
	// elements to run through the bundle now, in order.
	Element(p int32, key, value []byte) ([][]byte, error)
	// Advance is called once per attempt for every task it touched, after
	// Element, with the task's input watermark (mtime.Time, ms). It returns
	// the elements that fire now and the task's hold: no element the head
	// emits later has a timestamp before it (mtime.MaxTimestamp when it
	// buffers nothing). The task's output watermark is
	// max(previous output, min(input watermark, hold)).
	Advance(p int32, inputWatermark mtime.Time) (fired [][]byte, hold mtime.Time, err error)
	// Prepare writes the attempt's state changes (e.g. changelog records)
	// into the open transaction.
	Prepare(produce ProduceFunc) error
	// Committed makes the attempt's state changes durable locally.
	Committed() error
	// Aborted discards the attempt's state changes of tasks ps.
	Aborted(ps []int32) error
}

// passthrough is the head of Reshuffle and Flatten stages (and, with an
// impulse element, of Impulse stages): each record is one element.
type passthrough struct {
	// impulse, if non-nil, replaces every record's value (Impulse stages).
	impulse []byte
}

func (h *passthrough) Assign(context.Context, int32) error { return nil }
func (h *passthrough) Revoke(int32)                        {}
func (h *passthrough) Element(_ int32, _, value []byte) ([][]byte, error) {
	if h.impulse != nil {
		return [][]byte{h.impulse}, nil
	}
	return [][]byte{value}, nil
}
func (h *passthrough) Advance(int32, mtime.Time) ([][]byte, mtime.Time, error) {
	return nil, mtime.MaxTimestamp, nil
}
func (h *passthrough) Prepare(ProduceFunc) error { return nil }
func (h *passthrough) Committed() error          { return nil }
func (h *passthrough) Aborted([]int32) error     { return nil }

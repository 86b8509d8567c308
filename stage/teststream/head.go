package teststream

import (
	"context"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/step"
)

// Head replays a TestStream (step.Head). Its stage has one task (input
// partition 0) whose records are the segment records (Record), in order;
// the loop commits each on its own (see the package comment).
//
// Element(record i of n) returns segment i's elements, encoded, as a
// watermark point (step.Work.Point); Hold is then segment i's watermark,
// so the task's output watermark, max(previous, min(end of time, hold)),
// is exactly the segment's watermark, reported right after the segment's
// elements and before the next segment's (the step's rule for a point).
// (The hold here is the stream's declaration, not a bound on later
// timestamps: a later segment may hold elements behind it, which
// downstream sees as late, as the script says.) The head keeps no state
// but the segment last read: a crash or an abort resumes at the committed
// offset, the next segment.
type Head struct {
	step.InternalInput
	name     string
	segments []Segment
	encoded  [][][]byte // encoded[i] are segment i's wire elements
	// clock[i] is the job clock after segment i (ms from 0): the sum of
	// the processing-time advances of segments 0..i.
	clock []int64
	// cur[p] is the segment task p read in the current attempt.
	cur map[int32]int
}

var (
	_ step.Head           = (*Head)(nil)
	_ step.JobClockSource = (*Head)(nil)
)

// NewHead returns the head replaying segments (Parse), whose elements enc
// encodes; name names the stage in errors. Every element is encoded now,
// so a bad element fails the job before anything runs.
func NewHead(name string, segments []Segment, enc *Encoder) (*Head, error) {
	h := &Head{name: name, segments: segments, encoded: make([][][]byte, len(segments)), clock: make([]int64, len(segments)), cur: map[int32]int{}}
	var clock int64
	for i, s := range segments {
		clock += s.ProcessingAdvance
		h.clock[i] = clock
		for j, e := range s.Elements {
			b, err := enc.Encode(e)
			if err != nil {
				return nil, fmt.Errorf("teststream: stage %s: segment %d element %d: %w", name, i, j, err)
			}
			h.encoded[i] = append(h.encoded[i], b)
		}
	}
	return h, nil
}

// Assign implements step.Head: nothing to restore.
func (h *Head) Assign(context.Context, int32) error { return nil }

// Revoke implements step.Head.
func (h *Head) Revoke(p int32) { delete(h.cur, p) }

// Unskippable implements step.Unskippable: a record is a segment, many
// elements and a watermark.
func (h *Head) Unskippable() string {
	return "a TestStream's record is a segment of elements and a watermark: setting it aside would drop them all"
}

// Element implements step.Head: value is segment record i of n, and n must
// be the head's segment count (a different count means the recorded plan
// was made from another TestStream: an error, never a guess).
func (h *Head) Element(p int32, r step.In) (step.Work, error) {
	i, n, err := ParseRecord(r.Value)
	if err != nil {
		return step.Work{}, fmt.Errorf("teststream: stage %s: %w", h.name, err)
	}
	if n != len(h.segments) {
		return step.Work{}, fmt.Errorf("%w: stage %s: record %q, but this pipeline's TestStream has %d segments (the application was recorded with another TestStream)", ErrMalformed, h.name, r.Value, len(h.segments))
	}
	h.cur[p] = i
	return step.Work{Elements: h.encoded[i], Point: true}, nil
}

// Advance implements step.Head: a TestStream has no input watermark to
// act on.
func (h *Head) Advance(int32, mtime.Time) (step.Work, error) { return step.Work{}, nil }

// Hold implements step.Head: the watermark of the segment read last in
// this attempt (mtime.MinTimestamp if none: the previous output watermark
// stays).
func (h *Head) Hold(p int32) mtime.Time {
	i, ok := h.cur[p]
	if !ok {
		return mtime.MinTimestamp
	}
	return h.segments[i].Watermark
}

// ProcessingTime implements step.JobClockSource: the job clock once
// segment cur[p] is committed, the sum of the stream's processing-time
// advances up to the end of that segment (ms from 0); ok is false when p
// read no segment in this attempt.
func (h *Head) ProcessingTime(p int32) (int64, bool) {
	i, ok := h.cur[p]
	if !ok {
		return 0, false
	}
	return h.clock[i], true
}

// Results implements step.Head: nothing to do.
func (h *Head) Results(*step.Bundle) (step.Work, error) { return step.Work{}, nil }

// Prepare implements step.Head: no state.
func (h *Head) Prepare(step.ProduceFunc) error { return nil }

// Committed implements step.Head.
func (h *Head) Committed() error { h.cur = map[int32]int{}; return nil }

// Aborted implements step.Head.
func (h *Head) Aborted(ps []int32) error {
	for _, p := range ps {
		delete(h.cur, p)
	}
	return nil
}

package teststream

import (
	"errors"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Sentinel errors.
var (
	// ErrUnsupported: the payload uses a feature this runner does not
	// replay (an event service endpoint, outputs by tag to several
	// PCollections). Not retryable: the pipeline is refused before any topic
	// is created.
	ErrUnsupported = errors.New("teststream: not supported by the kafkastreams runner")
	// ErrMalformed: the payload or a record does not decode, or the events
	// contradict the model (a watermark moving back).
	ErrMalformed = errors.New("teststream: malformed")
)

// Element is one element of the stream: its bytes encoded with the output
// PCollection's coder (not windowed) and its event timestamp (ms).
type Element struct {
	Encoded   []byte
	Timestamp mtime.Time
}

// Segment is the unit of replay and of commit: elements, in the stream's
// order, then the watermark the stream declares after them.
type Segment struct {
	Elements []Element
	// Watermark is the stage's output watermark once the segment's elements
	// are written (mtime.Time, ms). Never decreases from one segment to the
	// next; the last segment's is mtime.MaxTimestamp.
	Watermark mtime.Time
	// ProcessingAdvance is the processing time (ms) the stream advanced by
	// at the segment's end (0 if it ended at a watermark advance or the end
	// of the stream): it moves the job clock (see the package comment).
	ProcessingAdvance int64
}

// Parse cuts p's events into segments:
//
//	segment boundary ⇔ after AdvanceWatermark or AdvanceProcessingTime
//	W(i) = the last AdvanceWatermark before segment i's boundary, clamped
//	       to mtime.MaxTimestamp; mtime.MinTimestamp before any
//	W(last) = mtime.MaxTimestamp (the stream ends: the end of time)
//
// AddElements events inside a segment concatenate. A segment with no
// elements is kept if it moves the watermark or advances processing time;
// the stream always has at least one segment (the last). Element
// timestamps are clamped to [mtime.MinTimestamp, mtime.MaxTimestamp].
// Errors: a watermark below the previous one (ErrMalformed); an event
// service endpoint, or element and watermark events for more than one
// output tag (ErrUnsupported). name names the transform in errors.
func Parse(name string, p *pipepb.TestStreamPayload) ([]Segment, error) {
	if url := p.GetEndpoint().GetUrl(); url != "" {
		return nil, fmt.Errorf("%w: TestStream %s: events from the service at %s (only events in the payload are replayed)", ErrUnsupported, name, url)
	}
	var out []Segment
	cur := Segment{Watermark: mtime.MinTimestamp}
	wm := mtime.MinTimestamp
	tag, tagSet := "", false
	checkTag := func(t string) error {
		if tagSet && t != tag {
			return fmt.Errorf("%w: TestStream %s: events for output tags %q and %q (one output only)", ErrUnsupported, name, tag, t)
		}
		tag, tagSet = t, true
		return nil
	}
	for i, ev := range p.GetEvents() {
		switch e := ev.GetEvent().(type) {
		case *pipepb.TestStreamPayload_Event_ElementEvent:
			if err := checkTag(e.ElementEvent.GetTag()); err != nil {
				return nil, err
			}
			for _, te := range e.ElementEvent.GetElements() {
				cur.Elements = append(cur.Elements, Element{Encoded: te.GetEncodedElement(), Timestamp: clamp(te.GetTimestamp())})
			}
		case *pipepb.TestStreamPayload_Event_WatermarkEvent:
			if err := checkTag(e.WatermarkEvent.GetTag()); err != nil {
				return nil, err
			}
			nw := clamp(e.WatermarkEvent.GetNewWatermark())
			if nw < wm {
				return nil, fmt.Errorf("%w: TestStream %s: event %d moves the watermark back from %d to %d", ErrMalformed, name, i, int64(wm), int64(nw))
			}
			wm = nw
			cur.Watermark = wm
			out = append(out, cur)
			cur = Segment{Watermark: wm}
		case *pipepb.TestStreamPayload_Event_ProcessingTimeEvent:
			cur.ProcessingAdvance = e.ProcessingTimeEvent.GetAdvanceDuration()
			out = append(out, cur)
			cur = Segment{Watermark: wm}
		default:
			return nil, fmt.Errorf("%w: TestStream %s: event %d has no kind", ErrMalformed, name, i)
		}
	}
	cur.Watermark = mtime.MaxTimestamp
	return append(out, cur), nil
}

func clamp(ms int64) mtime.Time {
	return min(max(mtime.Time(ms), mtime.MinTimestamp), mtime.MaxTimestamp)
}

// Record is the value of the input record of segment i of n (0 ≤ i < n):
// "teststream segment i of n".
func Record(i, n int) []byte {
	return fmt.Appendf(nil, "teststream segment %d of %d", i, n)
}

// ParseRecord reads a Record value. Errors (ErrMalformed) quote it.
func ParseRecord(v []byte) (i, n int, err error) {
	if _, err := fmt.Sscanf(string(v), "teststream segment %d of %d", &i, &n); err != nil || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("%w: record %q is not a TestStream segment record", ErrMalformed, v)
	}
	if string(Record(i, n)) != string(v) {
		return 0, 0, fmt.Errorf("%w: record %q is not a TestStream segment record", ErrMalformed, v)
	}
	return i, n, nil
}

// Records are the input records of segments, in order.
func Records(segments []Segment) [][]byte {
	out := make([][]byte, len(segments))
	for i := range segments {
		out[i] = Record(i, len(segments))
	}
	return out
}

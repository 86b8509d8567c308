package fnapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// urnCoderTimer is the standard timer coder (beam:coder:timer:v1), whose
// components are the key coder and the window coder.
const urnCoderTimer = "beam:coder:timer:v1"

// Time domains of a timer family (beam_runner_api.proto, TimeDomain).
const (
	TimeDomainEventTime      = pipepb.TimeDomain_EVENT_TIME
	TimeDomainProcessingTime = pipepb.TimeDomain_PROCESSING_TIME
)

// TimerFamilyID names one timer family of one transform: the pair the Data
// API's Elements.Timers carry (transform_id, timer_family_id).
type TimerFamilyID struct{ Transform, Family string }

func (id TimerFamilyID) String() string { return id.Transform + "/" + id.Family }

// waitKey is the bundle's waiting-set key of the family's is_last (sink ids
// are transform ids and never contain a NUL).
func (id TimerFamilyID) waitKey() string { return "\x00timer\x00" + id.Transform + "\x00" + id.Family }

// TimerFamily is one timer family of a stage's descriptor: its time domain
// and the codec of its timers on the Data API. BuildStage makes the family's
// coder timer(wireSafe(K), window coder), so the key of a timer is the same
// bytes as the key of the element that set it on the wire (the Kafka record
// key of the keyed input topic).
type TimerFamily struct {
	TimerFamilyID
	Domain pipepb.TimeDomain_Enum
	// WindowCoderURN is beam:coder:global_window:v1 or
	// beam:coder:interval_window:v1.
	WindowCoderURN string

	skipKey, skipWindow skipFn
}

// Timer is one timer as the SDK encodes it (the standard timer coder):
//
//	key | tag (varint length, UTF-8) | windows (int32 count, windows) |
//	clear (1 byte) | [fire (8 bytes) | hold (8 bytes) | pane]
//
// Every slice aliases the parsed bytes.
type Timer struct {
	// Key is the encoded key; Tag the dynamic timer tag ("" for a plain timer).
	Key []byte
	Tag string
	// Window is the timer's one window, encoded without a count (empty for
	// the global window).
	Window []byte
	// Clear is set for a cleared timer: Fire, Hold are zero.
	Clear bool
	// Fire is when the timer fires (event time, or processing time for a
	// processing-time family; ms). Hold is its output timestamp: the
	// timestamp of what its callback emits, and the watermark hold while
	// it is set (Beam: a timer holds its output watermark at its output
	// timestamp; mtime.MaxTimestamp with WithNoOutputTimestamp).
	Fire, Hold mtime.Time
	// Encoded is the whole timer: what the runner sends back to fire it.
	Encoded []byte
}

// Parse reads one timer from the front of b and returns it and the rest.
// A timer in more than one window is an error (the Go SDK writes one per
// window).
func (f *TimerFamily) Parse(b []byte) (Timer, []byte, error) {
	fail := func(what string, err error) (Timer, []byte, error) {
		return Timer{}, nil, fmt.Errorf("fnapi: timer of %s: %s: %w", f.TimerFamilyID, what, err)
	}
	rest, err := f.skipKey(b)
	if err != nil {
		return fail("key", err)
	}
	t := Timer{Key: b[:len(b)-len(rest)]}
	n, r, err := readVarint(rest)
	if err != nil || uint64(len(r)) < n {
		return fail("tag", errShortElement)
	}
	t.Tag, rest = string(r[:n]), r[n:]
	if len(rest) < 4 {
		return fail("windows", errShortElement)
	}
	if c := int32(binary.BigEndian.Uint32(rest)); c != 1 {
		return fail("windows", fmt.Errorf("%d windows, want 1", c))
	}
	rest = rest[4:]
	r, err = f.skipWindow(rest)
	if err != nil {
		return fail("window", err)
	}
	t.Window, rest = rest[:len(rest)-len(r)], r
	if len(rest) < 1 {
		return fail("clear", errShortElement)
	}
	t.Clear, rest = rest[0] != 0, rest[1:]
	if !t.Clear {
		if len(rest) < 17 {
			return fail("timestamps", errShortElement)
		}
		t.Fire = decodeEventTime(rest)
		t.Hold = decodeEventTime(rest[8:])
		extra := rest[16] >> 4
		if extra > 2 {
			return fail("pane", fmt.Errorf("pane encoding %d not supported", extra))
		}
		rest = rest[17:]
		for i := byte(0); i < extra; i++ {
			if rest, err = skipVarint(rest); err != nil {
				return fail("pane", err)
			}
		}
	}
	t.Encoded = b[:len(b)-len(rest)]
	return t, rest, nil
}

// ParseAll cuts data, a concatenation of encoded timers, into timers.
func (f *TimerFamily) ParseAll(data []byte) ([]Timer, error) {
	var out []Timer
	for len(data) > 0 {
		t, rest, err := f.Parse(data)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		data = rest
	}
	return out, nil
}

// WindowMaxTimestamp is the max timestamp of an encoded window of the
// family's window coder (BoundedWindow.maxTimestamp): End-1 for an interval
// window (encoded as End, 8 bytes, then the span), mtime.EndOfGlobalWindowTime
// for the global window.
func WindowMaxTimestamp(windowCoderURN string, w []byte) (mtime.Time, error) {
	switch windowCoderURN {
	case urnCoderGlobalWindow:
		return mtime.EndOfGlobalWindowTime, nil
	case urnCoderIntervalWindow:
		if len(w) < 8 {
			return 0, errShortElement
		}
		return decodeEventTime(w) - 1, nil
	}
	return 0, fmt.Errorf("fnapi: window coder %s not supported (global and interval windows only)", windowCoderURN)
}

// decodeEventTime reads the Beam encoding of an instant: milliseconds as a
// big-endian uint64 shifted by 2^63 (coder.EncodeEventTime).
func decodeEventTime(b []byte) mtime.Time {
	return mtime.Time(int64(binary.BigEndian.Uint64(b) ^ (1 << 63)))
}

// timerFamilies reads the timer families of the ParDos of a descriptor,
// sorted by transform and family.
func timerFamilies(desc *fnpb.ProcessBundleDescriptor) ([]TimerFamily, error) {
	var out []TimerFamily
	for tid, t := range desc.GetTransforms() {
		if t.GetSpec().GetUrn() != urnParDo {
			continue
		}
		pd := &pipepb.ParDoPayload{}
		if err := proto.Unmarshal(t.GetSpec().GetPayload(), pd); err != nil {
			return nil, fmt.Errorf("transform %q: bad ParDoPayload: %v", tid, err)
		}
		for fam, spec := range pd.GetTimerFamilySpecs() {
			f := TimerFamily{TimerFamilyID: TimerFamilyID{tid, fam}, Domain: spec.GetTimeDomain()}
			c, ok := desc.GetCoders()[spec.GetTimerFamilyCoderId()]
			if !ok || c.GetSpec().GetUrn() != urnCoderTimer || len(c.GetComponentCoderIds()) != 2 {
				return nil, fmt.Errorf("timer family %s: coder %q is not a timer coder with a key and a window coder", f.TimerFamilyID, spec.GetTimerFamilyCoderId())
			}
			var err error
			if f.skipKey, err = newSkipper(c.GetComponentCoderIds()[0], desc.GetCoders(), 0); err != nil {
				return nil, fmt.Errorf("timer family %s key: %w", f.TimerFamilyID, err)
			}
			wc := c.GetComponentCoderIds()[1]
			f.WindowCoderURN = desc.GetCoders()[wc].GetSpec().GetUrn()
			if f.WindowCoderURN != urnCoderGlobalWindow && f.WindowCoderURN != urnCoderIntervalWindow {
				return nil, fmt.Errorf("timer family %s: window coder %q (%s) not supported", f.TimerFamilyID, wc, f.WindowCoderURN)
			}
			if f.skipWindow, err = newSkipper(wc, desc.GetCoders(), 0); err != nil {
				return nil, fmt.Errorf("timer family %s window: %w", f.TimerFamilyID, err)
			}
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Transform != out[j].Transform {
			return out[i].Transform < out[j].Transform
		}
		return out[i].Family < out[j].Family
	})
	return out, nil
}

// wireSafeTimerCoders gives every timer family of a ParDo in the stage the
// coder timer(wireSafe(K), W): the SDK then encodes a timer's key like the
// key of the element that set it on the wire. pardo is modified in place
// (the caller re-marshals it).
func wireSafeTimerCoders(cs *coderSet, tid string, pardo *pipepb.ParDoPayload) error {
	for _, fam := range slices.Sorted(maps.Keys(pardo.GetTimerFamilySpecs())) {
		spec := pardo.GetTimerFamilySpecs()[fam]
		c, ok := cs.get(spec.GetTimerFamilyCoderId())
		if !ok || c.GetSpec().GetUrn() != urnCoderTimer || len(c.GetComponentCoderIds()) != 2 {
			return fmt.Errorf("transform %q timer family %q: coder %q is not a timer coder with a key and a window coder", tid, fam, spec.GetTimerFamilyCoderId())
		}
		key, err := cs.wireSafe(c.GetComponentCoderIds()[0], 0)
		if err != nil {
			return fmt.Errorf("transform %q timer family %q: %w", tid, fam, err)
		}
		if key == c.GetComponentCoderIds()[0] {
			continue
		}
		id := cs.freshID(spec.GetTimerFamilyCoderId() + "_wire")
		cs.added[id] = &pipepb.Coder{Spec: c.GetSpec(), ComponentCoderIds: []string{key, c.GetComponentCoderIds()[1]}}
		spec.TimerFamilyCoderId = id
	}
	return nil
}

// deliverTimers routes one chunk of timers the harness set to its bundle.
func (s *Server) deliverTimers(t *fnpb.Elements_Timers) {
	s.mu.Lock()
	p, ok := s.mu.pending[t.GetInstructionId()]
	s.mu.Unlock()
	if !ok || p.bundle == nil {
		s.log.Debug("fnapi: timers for unknown instruction", "instruction", t.GetInstructionId(), "transform", t.GetTransformId())
		return
	}
	id := TimerFamilyID{t.GetTransformId(), t.GetTimerFamilyId()}
	if err := p.bundle.receiveTimers(id, t.GetTimers(), t.GetIsLast()); err != nil {
		s.failInstruction(t.GetInstructionId(), err)
	}
}

// receiveTimers appends one chunk of timers of a family.
func (b *bundle) receiveTimers(id TimerFamilyID, data []byte, isLast bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := id.waitKey()
	if !b.waiting[k] {
		return fmt.Errorf("fnapi: timers of family %s after its is_last or of an unknown family", id)
	}
	if b.timers == nil {
		b.timers = map[TimerFamilyID][]byte{}
	}
	b.timers[id] = append(b.timers[id], data...)
	if isLast {
		delete(b.waiting, k)
		if len(b.waiting) == 0 {
			close(b.allLast)
		}
	}
	return nil
}

// errTimerFamily is wrapped when a bundle's timer input names a family the
// descriptor does not have.
var errTimerFamily = errors.New("fnapi: not a timer family of the descriptor")

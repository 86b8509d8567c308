package fnapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Side input access patterns (beam_runner_api.proto, StandardSideInputTypes)
// the State service serves.
const (
	URNSideInputIterable = "beam:side_input:iterable:v1"
	URNSideInputMultimap = "beam:side_input:multimap:v1"
)

// maxStatePageBytes is the target size of one page of a state Get response,
// in bytes: a larger answer is cut, at element boundaries, into pages linked
// by continuation tokens. An element larger than this goes alone in its page.
const maxStatePageBytes = 1 << 20

// ErrSideInputNotReady is wrapped by a SideInput's answer for a window whose
// side input is not complete yet. The harness fails the bundle; the caller's
// transaction aborts and is retried. The runner never lets this happen on
// purpose (it holds back main input until the window is ready): the error is
// the safety net that turns a readiness bug into a retry, never into a wrong
// answer.
var ErrSideInputNotReady = errors.New("fnapi: side input window not ready")

// SideInput serves one side input of one transform to the harness's state
// requests. window is the side input window as the SDK encodes it in the
// state key: with the side input PCollection's window coder (empty for the
// global window). Every returned element is encoded with the side input's
// element coder in the descriptor (BuildStage: wireSafe(coder(P))); for a
// multimap, keys with wireSafe(K) and values with wireSafe(V). The slices
// must not change afterwards (pages of one answer are cut from them on
// successive calls). Methods are called from the State stream's goroutine,
// concurrently with anything else the caller does.
type SideInput interface {
	// Iterable returns every element of the side input in window
	// (beam:side_input:iterable:v1).
	Iterable(window []byte) ([][]byte, error)
	// MultimapKeys returns the distinct keys in window
	// (beam:side_input:multimap:v1, StateKey.MultimapKeysSideInput).
	MultimapKeys(window []byte) ([][]byte, error)
	// Multimap returns the values of key in window
	// (StateKey.MultimapSideInput); none for an absent key.
	Multimap(window, key []byte) ([][]byte, error)
}

// sideInputKey names one side input: a pipeline transform id (unique across
// every stage of a pipeline) and the side input's local name.
type sideInputKey struct{ transform, local string }

// RegisterSideInput makes the State service answer requests for side input
// sideInputID (its local name, "i1", …) of transform transformID from src.
// Transform ids are unique in a pipeline, so one registration serves every
// bundle of the stage holding the transform. Registering the same pair
// again replaces src.
func (s *Server) RegisterSideInput(transformID, sideInputID string, src SideInput) {
	s.sides.Store(sideInputKey{transformID, sideInputID}, src)
}

// answerState computes the response to one state request: side input Gets
// are served from the registered SideInputs, paged; everything else (user
// state, appends, clears) is refused with an error naming the key.
func (s *Server) answerState(req *fnpb.StateRequest) *fnpb.StateResponse {
	fail := func(format string, args ...any) *fnpb.StateResponse {
		msg := fmt.Sprintf(format, args...)
		s.log.Warn("fnapi: state request refused", "instruction", req.GetInstructionId(), "error", msg)
		return &fnpb.StateResponse{Id: req.GetId(), Error: msg}
	}
	kind := fmt.Sprintf("%T", req.GetStateKey().GetType())
	get := req.GetGet()
	if get == nil {
		return fail("fnapi: state request %T for key %s (instruction %s): only Get of side inputs is supported", req.GetRequest(), kind, req.GetInstructionId())
	}
	lookup := func(transform, local string) (SideInput, error) {
		v, ok := s.sides.Load(sideInputKey{transform, local})
		if !ok {
			return nil, fmt.Errorf("fnapi: no side input %q of transform %q is registered", local, transform)
		}
		return v.(SideInput), nil
	}
	var elms [][]byte
	var err error
	switch k := req.GetStateKey().GetType().(type) {
	case *fnpb.StateKey_IterableSideInput_:
		var src SideInput
		if src, err = lookup(k.IterableSideInput.GetTransformId(), k.IterableSideInput.GetSideInputId()); err == nil {
			elms, err = src.Iterable(k.IterableSideInput.GetWindow())
		}
	case *fnpb.StateKey_MultimapSideInput_:
		var src SideInput
		if src, err = lookup(k.MultimapSideInput.GetTransformId(), k.MultimapSideInput.GetSideInputId()); err == nil {
			elms, err = src.Multimap(k.MultimapSideInput.GetWindow(), k.MultimapSideInput.GetKey())
		}
	case *fnpb.StateKey_MultimapKeysSideInput_:
		var src SideInput
		if src, err = lookup(k.MultimapKeysSideInput.GetTransformId(), k.MultimapKeysSideInput.GetSideInputId()); err == nil {
			elms, err = src.MultimapKeys(k.MultimapKeysSideInput.GetWindow())
		}
	default:
		return fail("fnapi: state requests are not supported yet (key %s, instruction %s): side inputs only", kind, req.GetInstructionId())
	}
	if err != nil {
		return fail("fnapi: %s (instruction %s): %v", kind, req.GetInstructionId(), err)
	}
	data, token, err := statePage(elms, get.GetContinuationToken())
	if err != nil {
		return fail("fnapi: %s (instruction %s): %v", kind, req.GetInstructionId(), err)
	}
	return &fnpb.StateResponse{Id: req.GetId(), Response: &fnpb.StateResponse_Get{Get: &fnpb.StateGetResponse{Data: data, ContinuationToken: token}}}
}

// statePage returns the page of elms that starts at the continuation token
// (the decimal index of its first element; empty for the first page): the
// concatenation of whole elements from there, up to maxStatePageBytes (at
// least one element), and the token of the next page (nil after the last).
// A token is only meaningful for the same elms.
func statePage(elms [][]byte, token []byte) ([]byte, []byte, error) {
	start := 0
	if len(token) > 0 {
		n, err := strconv.Atoi(string(token))
		if err != nil || n < 0 || n > len(elms) {
			return nil, nil, fmt.Errorf("bad continuation token %q for %d elements", token, len(elms))
		}
		start = n
	}
	var data []byte
	i := start
	for ; i < len(elms); i++ {
		if i > start && len(data)+len(elms[i]) > maxStatePageBytes {
			break
		}
		data = append(data, elms[i]...)
	}
	if i < len(elms) {
		return data, []byte(strconv.Itoa(i)), nil
	}
	return data, nil, nil
}

// WireElements cuts the wire elements of one PCollection, encoded by
// BuildStage's rule windowed_value(wireSafe(coder(P)), windowCoder(P)), into
// what the State API serves: the encoded windows and the element, and for a
// KV PCollection the key and the value. Every cut aliases its input.
type WireElements struct {
	// WindowCoderURN is beam:coder:global_window:v1 or
	// beam:coder:interval_window:v1.
	WindowCoderURN string

	skipWindow, skipElement, skipKey, skipValue skipFn
}

// NewWireElements describes the wire elements of PCollection pcoll of comps
// (the pipeline's components). With kv, its coder must be a KV coder and
// SplitKV works. Errors name the PCollection and the coder.
func NewWireElements(comps *pipepb.Components, pcoll string, kv bool) (*WireElements, error) {
	col, ws, elm, coders, err := wireCodersOf(comps, pcoll)
	if err != nil {
		return nil, err
	}
	w := &WireElements{}
	wc, ok := coders[ws.GetWindowCoderId()]
	if !ok {
		return nil, fmt.Errorf("fnapi: pcollection %q: window coder %q not found", pcoll, ws.GetWindowCoderId())
	}
	w.WindowCoderURN = wc.GetSpec().GetUrn()
	if w.WindowCoderURN != urnCoderGlobalWindow && w.WindowCoderURN != urnCoderIntervalWindow {
		return nil, fmt.Errorf("fnapi: pcollection %q: window coder %q (%s) not supported (global and interval windows only)", pcoll, ws.GetWindowCoderId(), w.WindowCoderURN)
	}
	if w.skipWindow, err = newSkipper(ws.GetWindowCoderId(), coders, 0); err != nil {
		return nil, fmt.Errorf("fnapi: pcollection %q: %w", pcoll, err)
	}
	if w.skipElement, err = newSkipper(elm, coders, 0); err != nil {
		return nil, fmt.Errorf("fnapi: pcollection %q: %w", pcoll, err)
	}
	if kv {
		c := coders[elm]
		if c.GetSpec().GetUrn() != urnCoderKV || len(c.GetComponentCoderIds()) != 2 {
			return nil, fmt.Errorf("fnapi: pcollection %q: coder %q (%s) is not a KV coder", pcoll, col.GetCoderId(), c.GetSpec().GetUrn())
		}
		if w.skipKey, err = newSkipper(c.GetComponentCoderIds()[0], coders, 0); err != nil {
			return nil, fmt.Errorf("fnapi: pcollection %q key: %w", pcoll, err)
		}
		if w.skipValue, err = newSkipper(c.GetComponentCoderIds()[1], coders, 0); err != nil {
			return nil, fmt.Errorf("fnapi: pcollection %q value: %w", pcoll, err)
		}
	}
	return w, nil
}

// Check returns nil if wire is exactly one wire element of the
// PCollection: a windowed-value header (timestamp, windows, pane) and one
// element, no byte after it; else an error saying what is wrong. It
// allocates nothing. The SDK harness reads a bundle's elements as one
// stream, so an element that is not exactly one would be read together
// with its neighbours (a header cut short at the end of the stream is
// taken for its end, and the element is dropped without an error).
func (w *WireElements) Check(wire []byte) error {
	_, _, err := w.split(wire, false)
	return err
}

// Split cuts one wire element into its windows, each as the window coder
// encodes it (empty for the global window), and the element bytes after the
// windowed-value header (timestamp, windows, pane). Trailing bytes are an
// error.
func (w *WireElements) Split(wire []byte) (windows [][]byte, element []byte, err error) {
	return w.split(wire, true)
}

// split is Split, and Check without windows.
func (w *WireElements) split(wire []byte, windowsToo bool) (windows [][]byte, element []byte, err error) {
	if len(wire) < 12 {
		return nil, nil, errShortElement
	}
	n := int32(binary.BigEndian.Uint32(wire[8:]))
	if n < 0 {
		return nil, nil, fmt.Errorf("fnapi: windowed value with %d windows", n)
	}
	b := wire[12:]
	for i := int32(0); i < n; i++ {
		rest, err := w.skipWindow(b)
		if err != nil {
			return nil, nil, fmt.Errorf("fnapi: window %d: %w", i, err)
		}
		if windowsToo {
			windows = append(windows, b[:len(b)-len(rest):len(b)-len(rest)])
		}
		b = rest
	}
	// The pane: one byte whose high nibble says how many varints follow.
	if len(b) < 1 {
		return nil, nil, errShortElement
	}
	extra := b[0] >> 4
	if extra > 2 {
		return nil, nil, fmt.Errorf("fnapi: pane encoding %d not supported", extra)
	}
	b = b[1:]
	for i := byte(0); i < extra; i++ {
		if b, err = skipVarint(b); err != nil {
			return nil, nil, err
		}
	}
	element = b
	end, err := w.skipElement(element)
	if err != nil {
		return nil, nil, fmt.Errorf("fnapi: element: %w", err)
	}
	if len(end) != 0 {
		return nil, nil, fmt.Errorf("fnapi: %d bytes after the element", len(end))
	}
	return windows, element, nil
}

// SplitKV cuts an element (from Split) of a KV PCollection into the key and
// the value bytes. Only for a WireElements made with kv.
func (w *WireElements) SplitKV(element []byte) (key, value []byte, err error) {
	if w.skipKey == nil {
		return nil, nil, errors.New("fnapi: SplitKV of a PCollection described without kv")
	}
	rest, err := w.skipKey(element)
	if err != nil {
		return nil, nil, fmt.Errorf("fnapi: key: %w", err)
	}
	end, err := w.skipValue(rest)
	if err != nil {
		return nil, nil, fmt.Errorf("fnapi: value: %w", err)
	}
	if len(end) != 0 {
		return nil, nil, fmt.Errorf("fnapi: %d bytes after the value", len(end))
	}
	return element[:len(element)-len(rest)], rest, nil
}

// checkSideInputs refuses side inputs of ParDo tid that the State service
// cannot serve: access patterns other than iterable and multimap.
func checkSideInputs(tid string, t *pipepb.PTransform, pardo *pipepb.ParDoPayload) error {
	for local, si := range pardo.GetSideInputs() {
		switch ap := si.GetAccessPattern().GetUrn(); ap {
		case URNSideInputIterable, URNSideInputMultimap:
		default:
			return fmt.Errorf("transform %q (%s) side input %q: access pattern %q not supported (iterable and multimap only)", tid, t.GetUniqueName(), local, ap)
		}
		if _, ok := t.GetInputs()[local]; !ok {
			return fmt.Errorf("transform %q (%s) side input %q is not one of its inputs", tid, t.GetUniqueName(), local)
		}
	}
	return nil
}

// sideInputCoders gives every side input PCollection of the stage the coder
// wireSafe(coder(P)) in the descriptor: the harness decodes side input data
// with it, and the runner serves the element bytes the producer stage wrote
// on the wire, which are encoded with exactly that coder. Its window coder
// must be global or interval (the runner cuts windows out of the wire).
func sideInputCoders(comps *pipepb.Components, cs *coderSet, pcols map[string]*pipepb.PCollection, sides map[string]map[string]*pipepb.SideInput) error {
	for tid, ss := range sides {
		for local := range ss {
			pid := comps.GetTransforms()[tid].GetInputs()[local]
			col := comps.GetPcollections()[pid]
			ws, ok := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
			if !ok {
				return fmt.Errorf("side input %q of transform %q: pcollection %q: windowing strategy %q not found", local, tid, pid, col.GetWindowingStrategyId())
			}
			wc, ok := cs.get(ws.GetWindowCoderId())
			if u := wc.GetSpec().GetUrn(); !ok || (u != urnCoderGlobalWindow && u != urnCoderIntervalWindow) {
				return fmt.Errorf("side input %q of transform %q: pcollection %q: window coder %q (%s) not supported yet (global and interval windows only)", local, tid, pid, ws.GetWindowCoderId(), u)
			}
			elm, err := cs.wireSafe(col.GetCoderId(), 0)
			if err != nil {
				return fmt.Errorf("side input %q of transform %q: pcollection %q: %w", local, tid, pid, err)
			}
			c := proto.Clone(col).(*pipepb.PCollection)
			c.CoderId = elm
			pcols[pid] = c
		}
	}
	return nil
}

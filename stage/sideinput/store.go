package sideinput

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

// ErrUnsupported wraps every refusal of a side input this package cannot
// materialise; the message names the transform and the side input.
var ErrUnsupported = errors.New("sideinput: side input not supported")

// Mapping is a side input's window mapping fn: which side input window a
// main input window reads (Beam: SideInput.window_mapping_fn). The Go SDK
// maps a main window w to the window its side input's WindowFn assigns to
// w.MaxTimestamp(), the earliest one for sliding windows
// (exec.windowMapper); the runner must use the same rule to know which
// window the harness will ask for.
type Mapping struct {
	// Kind is window.GlobalWindows, window.FixedWindows or
	// window.SlidingWindows.
	Kind window.Kind
	// Size and Period in milliseconds (Period for sliding windows only).
	Size, Period int64
}

// ParseMapping reads a window mapping fn written by the Go SDK (graphx):
// graphx.URNWindowMapping{Global,Fixed,Sliding} with the side input WindowFn's
// payload. Other URNs wrap ErrUnsupported.
func ParseMapping(spec *pipepb.FunctionSpec) (Mapping, error) {
	switch spec.GetUrn() {
	case graphx.URNWindowMappingGlobal:
		return Mapping{Kind: window.GlobalWindows}, nil
	case graphx.URNWindowMappingFixed:
		p := &pipepb.FixedWindowsPayload{}
		if err := proto.Unmarshal(spec.GetPayload(), p); err != nil {
			return Mapping{}, fmt.Errorf("sideinput: fixed window mapping payload: %w", err)
		}
		if p.GetOffset().AsTime().UnixMilli() != 0 {
			return Mapping{}, fmt.Errorf("%w: fixed windows with an offset", ErrUnsupported)
		}
		m := Mapping{Kind: window.FixedWindows, Size: p.GetSize().AsDuration().Milliseconds()}
		if m.Size <= 0 {
			return Mapping{}, fmt.Errorf("sideinput: fixed window mapping of size %v", p.GetSize().AsDuration())
		}
		return m, nil
	case graphx.URNWindowMappingSliding:
		p := &pipepb.SlidingWindowsPayload{}
		if err := proto.Unmarshal(spec.GetPayload(), p); err != nil {
			return Mapping{}, fmt.Errorf("sideinput: sliding window mapping payload: %w", err)
		}
		if p.GetOffset().AsTime().UnixMilli() != 0 {
			return Mapping{}, fmt.Errorf("%w: sliding windows with an offset", ErrUnsupported)
		}
		m := Mapping{Kind: window.SlidingWindows, Size: p.GetSize().AsDuration().Milliseconds(), Period: p.GetPeriod().AsDuration().Milliseconds()}
		if m.Size <= 0 || m.Period <= 0 {
			return Mapping{}, fmt.Errorf("sideinput: sliding window mapping of size %d ms, period %d ms", m.Size, m.Period)
		}
		return m, nil
	}
	return Mapping{}, fmt.Errorf("%w: window mapping fn %q", ErrUnsupported, spec.GetUrn())
}

// Map returns the side input window main window w reads:
//
//	global:  the global window
//	fixed:   [s, s+Size)  with s = t - ((t+Size) mod Size),  t = w.MaxTimestamp()
//	sliding: [s, s+Size)  the earliest window containing t: s = the smallest
//	         start k·Period (integer k) with s > t - Size
//
// (the same windows the SDK's WindowFns assign to timestamp t; Go's mod
// keeps the sign of t, which the formulas account for as the SDK does).
func (m Mapping) Map(w typex.Window) typex.Window {
	t := w.MaxTimestamp()
	switch m.Kind {
	case window.FixedWindows:
		s := t - mtime.Time((int64(t)+m.Size)%m.Size)
		e := s + mtime.Time(m.Size)
		if lim := mtime.EndOfGlobalWindowTime + 1; e > lim {
			e = lim
		}
		return window.IntervalWindow{Start: s, End: e}
	case window.SlidingWindows:
		last := t - mtime.Time(int64(t)%m.Period)
		s := last
		for s-mtime.Time(m.Period) > t-mtime.Time(m.Size) {
			s -= mtime.Time(m.Period)
		}
		return window.IntervalWindow{Start: s, End: s + mtime.Time(m.Size)}
	}
	return window.GlobalWindow{}
}

// Ready reports whether side input window w is complete at side watermark
// wm (mtime.Time, ms): wm > w.MaxTimestamp(). Beam: a side input window is
// ready once the side input's watermark has passed the window's end; a
// producer reporting wm has committed every element with a timestamp
// before wm, and no element of w has a timestamp after w.MaxTimestamp().
// For the global window of a bounded producer this means its end-of-time
// report (mtime.MaxTimestamp > mtime.EndOfGlobalWindowTime).
func Ready(w typex.Window, wm mtime.Time) bool { return wm > w.MaxTimestamp() }

// Input is one side input of a stage, as the runner's plan names it
// (runner/plan.SideInput, which the runner copies into it): what this
// package needs of the plan, and nothing else of it.
type Input struct {
	// Transform is the id of the ParDo reading the side input, and
	// TransformName its unique name.
	Transform, TransformName string
	// LocalName is the side input's local input name in the ParDo ("i1",
	// …): the side_input_id of the harness's state requests.
	LocalName string
	// PCollection is the side input's PCollection id.
	PCollection string
	// Topic is the side input's topic (one partition): its elements and the
	// producer stage's watermark reports.
	Topic string
	// Upstream is the name of the stage producing PCollection (the stage
	// of the reports in Topic).
	Upstream string
}

// Spec describes one side input of a stage, for a Store.
type Spec struct {
	// Side is the side input (transform, local name, topic, producer).
	Side Input
	// Mapping maps main windows to this side input's windows.
	Mapping Mapping
	// Wire cuts the producer's wire elements; made with kv for a multimap.
	Wire *fnapi.WireElements
	// Multimap is set for beam:side_input:multimap:v1.
	Multimap bool
}

// NewSpec reads side input si of the pipeline (comps): its access pattern,
// window mapping and wire encoding. Errors name the transform and the side
// input, and wrap ErrUnsupported for what this package cannot serve.
func NewSpec(comps *pipepb.Components, si Input) (*Spec, error) {
	name := fmt.Sprintf("side input %q of transform %q (%s)", si.LocalName, si.TransformName, si.Transform)
	t := comps.GetTransforms()[si.Transform]
	pd := &pipepb.ParDoPayload{}
	if err := proto.Unmarshal(t.GetSpec().GetPayload(), pd); err != nil {
		return nil, fmt.Errorf("sideinput: %s: ParDoPayload: %w", name, err)
	}
	sp, ok := pd.GetSideInputs()[si.LocalName]
	if !ok {
		return nil, fmt.Errorf("sideinput: %s: not in the ParDo's payload", name)
	}
	s := &Spec{Side: si}
	switch sp.GetAccessPattern().GetUrn() {
	case graphx.URNIterableSideInput:
	case graphx.URNMultimapSideInput:
		s.Multimap = true
	default:
		return nil, fmt.Errorf("%w: %s: access pattern %q", ErrUnsupported, name, sp.GetAccessPattern().GetUrn())
	}
	var err error
	if s.Mapping, err = ParseMapping(sp.GetWindowMappingFn()); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if s.Wire, err = fnapi.NewWireElements(comps, si.PCollection, s.Multimap); err != nil {
		return nil, fmt.Errorf("sideinput: %s: %w", name, err)
	}
	return s, nil
}

// windowData is one window of a materialised side input.
type windowData struct {
	elms  [][]byte            // every element, in topic order
	keys  [][]byte            // distinct keys, in first-seen order (multimap)
	byKey map[string][][]byte // key -> values, in topic order (multimap)
}

// Store is one side input of a stage, materialised in memory from its topic:
// the elements per window (keyed by the window's encoding, as the harness
// sends it in state keys) and the producer's watermark from the reports in
// the topic. In memory, rebuilt by reading the topic from its start when
// the instance starts: fine for the side inputs Beam pipelines usually have
// (dimensions, passert's expectations); a very large one needs a spillable
// store (not yet).
//
// A Store is safe for concurrent use: its Reader adds records while the
// State service reads windows and the stage loop asks for readiness.
type Store struct {
	spec *Spec
	// winDec decodes the window bytes of a state request (readiness check).
	winDec exec.WindowDecoder

	mu struct {
		sync.Mutex
		agg  *watermarkmgr.Aggregator
		wm   mtime.Time
		wins map[string]*windowData
		late uint64 // elements added to a window already ready
	}
}

// NewStore returns an empty Store of spec, held at mtime.MinTimestamp until
// every task of the producer stage has reported.
func NewStore(spec *Spec) *Store {
	s := &Store{spec: spec}
	if spec.Wire.WindowCoderURN == "beam:coder:interval_window:v1" {
		s.winDec = exec.MakeWindowDecoder(coder.NewIntervalWindow())
	} else {
		s.winDec = exec.MakeWindowDecoder(coder.NewGlobalWindow())
	}
	s.mu.agg = watermarkmgr.NewAggregator(spec.Side.Upstream)
	s.mu.wm = mtime.MinTimestamp
	s.mu.wins = map[string]*windowData{}
	return s
}

// Spec returns the Store's spec.
func (s *Store) Spec() *Spec { return s.spec }

// ErrUntrusted: a record of a side input's topic that the application's
// runner did not write as it stands (stage/envelope's trust rules): not an
// Envelope, an element that does not split into windows and value,
// reports without the application's envelope.WriterHeader, or a report
// the side input's manager refuses (a stage other than its producer, a
// partition out of range). The record changed nothing (but the other
// reports of its batch); the Set skips it with a log line and a count,
// where any other error stops it.
var ErrUntrusted = errors.New("sideinput: record not written by this application's runner")

// Record applies one record of the side input's topic (envelope.Decode, as
// the stage loop reads it): an Envelope holding an element (wire-encoded; added to each of its windows) or reports of the
// producer stage (one, or a batch; they advance the watermark), which
// count only fromApp: when the record carries the application's
// envelope.WriterHeader. Records must come in the topic's
// order, committed ones only. A record the runner did not write is an
// error wrapping ErrUntrusted and changes nothing (a refused report of a
// batch: the others apply). An element for a window already ready is kept (never
// dropped) and counted in Late: an answer already served for that window did
// not include it, so a producer must not emit late data into a side input
// for exactly-once answers.
func (s *Store) Record(value []byte, fromApp bool) error {
	element, reports, err := envelope.Decode(value)
	switch {
	case errors.Is(err, envelope.ErrEmpty):
		return fmt.Errorf("%w: empty Envelope in %s", ErrUntrusted, s.spec.Side.Topic)
	case err != nil:
		return fmt.Errorf("%w: record of %s is not an Envelope: %w", ErrUntrusted, s.spec.Side.Topic, err)
	case element != nil:
		return s.add(element)
	case !fromApp:
		return fmt.Errorf("%w: watermark reports in %s without the header %s", ErrUntrusted, s.spec.Side.Topic, envelope.WriterHeader)
	}
	return s.observe(reports)
}

// observe applies the reports of one record (one, or a batch: several
// tasks' reports written at one place of the producer's transaction), in
// order. A report the aggregator refuses is skipped, the others apply,
// and the error (ErrUntrusted) names the first refused.
func (s *Store) observe(rs []*pb.WatermarkReport) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var refused error
	n := 0
	for _, r := range rs {
		if err := s.mu.agg.ObserveReport(r.Core()); err != nil {
			if n++; refused == nil {
				refused = err
			}
		}
	}
	s.mu.wm = s.mu.agg.Advance()
	if refused != nil {
		return fmt.Errorf("%w: %d of %d reports in %s refused (the first: %w)", ErrUntrusted, n, len(rs), s.spec.Side.Topic, refused)
	}
	return nil
}

func (s *Store) add(wire []byte) error {
	wins, elm, err := s.spec.Wire.Split(wire)
	if err != nil {
		return fmt.Errorf("%w: element in %s: %w", ErrUntrusted, s.spec.Side.Topic, err)
	}
	var key, val []byte
	if s.spec.Multimap {
		if key, val, err = s.spec.Wire.SplitKV(elm); err != nil {
			return fmt.Errorf("%w: element in %s: %w", ErrUntrusted, s.spec.Side.Topic, err)
		}
	}
	// Copies: the record's buffer is not ours to keep.
	elm = bytes.Clone(elm)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range wins {
		if ok, _ := s.readyLocked(w); ok {
			s.mu.late++
		}
		d := s.mu.wins[string(w)]
		if d == nil {
			d = &windowData{byKey: map[string][][]byte{}}
			s.mu.wins[string(w)] = d
		}
		d.elms = append(d.elms, elm)
		if s.spec.Multimap {
			if _, seen := d.byKey[string(key)]; !seen {
				d.keys = append(d.keys, bytes.Clone(key))
			}
			d.byKey[string(key)] = append(d.byKey[string(key)], bytes.Clone(val))
		}
	}
	return nil
}

// Watermark is the producer's watermark as read from the topic (mtime.Time,
// ms); mtime.MinTimestamp until every producer task has reported.
func (s *Store) Watermark() mtime.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.wm
}

// Late is how many elements arrived for a window already ready.
func (s *Store) Late() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.late
}

// Idle reports whether the side input's producer is idle: every one of its
// tasks reports idle (watermarkmgr.Aggregator.AllIdle). An idle side input
// is left out of the main input's readiness, as an idle upstream is left
// out of a watermark's minimum (DESIGN.md "Watermarks", seed 002): its
// windows are served with what it has delivered, and an element it
// delivers later for a window already served is kept and counted in Late.
// Without this a side input read from a quiet topic held the main input
// for ever.
func (s *Store) Idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.agg.AllIdle()
}

// ReadyFor reports whether the side input window that main window w reads
// (Spec.Mapping) is complete (Ready), or the side input is idle (Idle).
func (s *Store) ReadyFor(w typex.Window) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Ready(s.spec.Mapping.Map(w), s.mu.wm) || s.mu.agg.AllIdle()
}

// readyLocked decodes an encoded side window and says whether it is ready
// (complete, or the side input idle: ReadyFor). Must be called with s.mu
// held.
func (s *Store) readyLocked(win []byte) (bool, error) {
	w, err := s.winDec.DecodeSingle(bytes.NewReader(win))
	if err != nil {
		return false, fmt.Errorf("sideinput: window %x: %w", win, err)
	}
	return Ready(w, s.mu.wm) || s.mu.agg.AllIdle(), nil
}

// window returns the data of encoded window win, or an error wrapping
// fnapi.ErrSideInputNotReady if it is not complete.
func (s *Store) window(win []byte) (*windowData, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok, err := s.readyLocked(win)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: side input %q of %q, window %x, side watermark %v", fnapi.ErrSideInputNotReady, s.spec.Side.LocalName, s.spec.Side.TransformName, win, s.mu.wm)
	}
	d := s.mu.wins[string(win)]
	if d == nil {
		return &windowData{}, nil
	}
	// Capped copies of the slice headers: later appends never show through
	// an answer being paged.
	return &windowData{elms: d.elms[:len(d.elms):len(d.elms)], keys: d.keys[:len(d.keys):len(d.keys)], byKey: d.byKey}, nil
}

// Iterable serves fnapi.SideInput: every element of window win.
func (s *Store) Iterable(win []byte) ([][]byte, error) {
	d, err := s.window(win)
	if err != nil {
		return nil, err
	}
	return d.elms, nil
}

// MultimapKeys serves fnapi.SideInput: the distinct keys of window win.
func (s *Store) MultimapKeys(win []byte) ([][]byte, error) {
	if !s.spec.Multimap {
		return nil, fmt.Errorf("sideinput: side input %q of %q is not a multimap", s.spec.Side.LocalName, s.spec.Side.TransformName)
	}
	d, err := s.window(win)
	if err != nil {
		return nil, err
	}
	return d.keys, nil
}

// Multimap serves fnapi.SideInput: the values of key in window win.
func (s *Store) Multimap(win, key []byte) ([][]byte, error) {
	if !s.spec.Multimap {
		return nil, fmt.Errorf("sideinput: side input %q of %q is not a multimap", s.spec.Side.LocalName, s.spec.Side.TransformName)
	}
	d, err := s.window(win)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	vs := d.byKey[string(key)]
	s.mu.Unlock()
	return vs[:len(vs):len(vs)], nil
}

// describe is one line about the store for "waiting" logs.
func (s *Store) describe() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.mu.agg.Snapshot()
	return fmt.Sprintf("side input %q of %q from stage %s via %s: watermark %v, held %v, %d windows (%+v)", s.spec.Side.LocalName, s.spec.Side.TransformName, s.spec.Side.Upstream, s.spec.Side.Topic, s.mu.wm, s.mu.agg.Held(), len(s.mu.wins), snap)
}

var _ fnapi.SideInput = (*Store)(nil)

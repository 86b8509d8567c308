package sideinput

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
)

// TestMappingAgainstBruteForce checks Map against a reference that lists
// every window of the WindowFn containing the main window's max timestamp
// and picks the earliest (the SDK's rule).
func TestMappingAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		size := int64(1 + rng.Intn(100))
		period := int64(1 + rng.Intn(int(size)))
		// Non-negative: for negative timestamps the SDK's formulas (which Map
		// follows, since the harness computes the same window) use Go's
		// truncated mod and can name a window not containing ts.
		ts := mtime.Time(rng.Int63n(2000))
		main := window.IntervalWindow{Start: ts - 5, End: ts + 1} // max timestamp ts
		for _, m := range []Mapping{{Kind: window.FixedWindows, Size: size}, {Kind: window.SlidingWindows, Size: size, Period: period}} {
			step := m.Period
			if m.Kind == window.FixedWindows {
				step = m.Size
			}
			// Reference: starts are multiples of step; the earliest window
			// [s, s+Size) with s <= ts < s+Size.
			var want window.IntervalWindow
			found := false
			for s := (int64(ts)/step - m.Size/step - 2) * step; s <= int64(ts); s += step {
				if s <= int64(ts) && int64(ts) < s+m.Size {
					want = window.IntervalWindow{Start: mtime.Time(s), End: mtime.Time(s + m.Size)}
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("reference found no window for %v", ts)
			}
			if got := m.Map(main); got != want {
				t.Fatalf("%+v.Map(max ts %d) = %v, want %v", m, ts, got, want)
			}
		}
	}
	if got := (Mapping{Kind: window.GlobalWindows}).Map(window.IntervalWindow{Start: 0, End: 10}); got != (window.GlobalWindow{}) {
		t.Errorf("global mapping: %v", got)
	}
}

// TestReadyIsAfterMaxTimestamp: Beam's "the watermark has passed the end of
// the window" is wm > max timestamp; the global window needs the end of time.
func TestReadyIsAfterMaxTimestamp(t *testing.T) {
	w := window.IntervalWindow{Start: 0, End: 10} // max timestamp 9
	for _, tc := range []struct {
		wm   mtime.Time
		want bool
	}{{8, false}, {9, false}, {10, true}, {mtime.MaxTimestamp, true}} {
		if got := Ready(w, tc.wm); got != tc.want {
			t.Errorf("Ready([0,10), wm %d) = %v, want %v", tc.wm, got, tc.want)
		}
	}
	if Ready(window.GlobalWindow{}, mtime.EndOfGlobalWindowTime) || !Ready(window.GlobalWindow{}, mtime.MaxTimestamp) {
		t.Error("global window: ready only after the end of the global window")
	}
}

func pairUp(s string) (string, int) { return s, len(s) }
func withSide(s string, side []string) string {
	return s
}
func withMap(s string, side func(string) func(*int) bool) string { return s }

func init() {
	beam.RegisterFunction(pairUp)
	beam.RegisterFunction(withSide)
	beam.RegisterFunction(withMap)
}

// fixture is a pipeline with one ParDo reading a side input, planned.
type fixture struct {
	comps *pipepb.Components
	stage *plan.Stage
	side  Input               // stage.SideInputs[0], as the runner copies it
	enc   exec.ElementEncoder // windowed value encoder of the side input's wire coder
}

func newFixture(t *testing.T, multimap bool, wfn *window.Fn) fixture {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	var side beam.PCollection
	if multimap {
		side = beam.ParDo(s, pairUp, beam.Create(s, "x"))
	} else {
		side = beam.Create(s, "x")
	}
	main := beam.Create(s, "m")
	if wfn != nil {
		side = beam.WindowInto(s, wfn, side)
		main = beam.WindowInto(s, wfn, main)
	}
	if multimap {
		beam.ParDo(s, withMap, main, beam.SideInput{Input: side})
	} else {
		beam.ParDo(s, withSide, main, beam.SideInput{Input: side})
	}
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	pp, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(pp, plan.Options{ApplicationID: "app", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{comps: pp.GetComponents()}
	for _, st := range pl.Stages {
		if len(st.SideInputs) > 0 {
			f.stage = st
		}
	}
	if f.stage == nil {
		t.Fatal("no stage with a side input")
	}
	si := f.stage.SideInputs[0]
	f.side = Input{Transform: si.Transform, TransformName: si.TransformName, LocalName: si.LocalName, PCollection: si.PCollection, Topic: si.Topic, Upstream: si.Upstream}
	col := f.comps.GetPcollections()[f.stage.SideInputs[0].PCollection]
	c, err := graphx.NewCoderUnmarshaller(f.comps.GetCoders()).Coder(col.GetCoderId())
	if err != nil {
		t.Fatal(err)
	}
	wc := coder.NewGlobalWindow()
	if wfn != nil {
		wc = coder.NewIntervalWindow()
	}
	f.enc = exec.MakeElementEncoder(coder.NewW(c, wc))
	return f
}

func (f fixture) element(t *testing.T, fv *exec.FullValue) []byte {
	t.Helper()
	if fv.Windows == nil {
		fv.Windows = window.SingleGlobalWindow
	}
	fv.Pane = typex.NoFiringPane()
	var buf bytes.Buffer
	if err := f.enc.Encode(fv, &buf); err != nil {
		t.Fatal(err)
	}
	b, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Element{Element: buf.Bytes()}})
	return b
}

func (f fixture) report(part, total int32, wm mtime.Time) []byte {
	b, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{
		Stage: f.stage.SideInputs[0].Upstream, SourcePartition: part, TotalSourcePartitions: total, CommittedWatermarkMillis: int64(wm),
	}}})
	return b
}

// TestStoreGlobalIterable: elements are held until the producer reports the
// end of time, then served in topic order; a not-ready window is an error
// wrapping fnapi.ErrSideInputNotReady.
func TestStoreGlobalIterable(t *testing.T) {
	f := newFixture(t, false, nil)
	spec, err := NewSpec(f.comps, f.side)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(spec)
	for _, v := range []string{"a", "bb"} {
		if err := st.Record(f.element(t, &exec.FullValue{Elm: v}), true); err != nil {
			t.Fatal(err)
		}
	}
	global := []byte{}
	if _, err := st.Iterable(global); !errors.Is(err, fnapi.ErrSideInputNotReady) {
		t.Fatalf("before any report: %v, want ErrSideInputNotReady", err)
	}
	if st.ReadyFor(window.GlobalWindow{}) {
		t.Fatal("ready before any report")
	}
	// A report at the end of time without the application's header (a
	// plain producer's) is skipped and moves nothing (issue 23).
	if err := st.Record(f.report(0, 1, mtime.MaxTimestamp), false); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a report without the application's header: %v, want ErrUntrusted (skipped)", err)
	}
	if st.ReadyFor(window.GlobalWindow{}) {
		t.Fatal("ready after a report without the application's header")
	}
	if err := st.Record(f.report(0, 1, mtime.EndOfGlobalWindowTime), true); err != nil {
		t.Fatal(err)
	}
	if st.ReadyFor(window.GlobalWindow{}) {
		t.Fatal("ready at the end of the global window itself (needs wm > max timestamp)")
	}
	if err := st.Record(f.report(0, 1, mtime.MaxTimestamp), true); err != nil {
		t.Fatal(err)
	}
	if !st.ReadyFor(window.GlobalWindow{}) || !st.ReadyFor(window.IntervalWindow{Start: 0, End: 5}) {
		t.Fatal("not ready after the end of time")
	}
	got, err := st.Iterable(global)
	if err != nil {
		t.Fatal(err)
	}
	// Elements are string_utf8: varint length then bytes.
	if fmt.Sprintf("%q", got) != `["\x01a" "\x02bb"]` {
		t.Errorf("served %q", got)
	}
	if err := st.Record([]byte("not an envelope \xff"), true); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a record that is not an Envelope: %v, want ErrUntrusted (skipped)", err)
	}

	if _, err := st.Multimap(global, nil); err == nil {
		t.Error("Multimap of an iterable side input: want an error")
	}
}

// TestStoreWindowedMultimap: fixed windows of a KV side input; the window
// [0,10) is ready once the producer's two tasks both report past 9, while
// [10,20) is not; values are grouped by key bytes.
func TestStoreWindowedMultimap(t *testing.T) {
	f := newFixture(t, true, window.NewFixedWindows(10*time.Millisecond))
	spec, err := NewSpec(f.comps, f.side)
	if err != nil {
		t.Fatal(err)
	}
	if !spec.Multimap || spec.Mapping.Kind != window.FixedWindows || spec.Mapping.Size != 10 {
		t.Fatalf("spec %+v", spec)
	}
	st := NewStore(spec)
	w0, w1 := window.IntervalWindow{Start: 0, End: 10}, window.IntervalWindow{Start: 10, End: 20}
	for _, e := range []struct {
		k string
		v int
		w window.IntervalWindow
	}{{"a", 1, w0}, {"b", 2, w0}, {"a", 3, w0}, {"a", 4, w1}} {
		if err := st.Record(f.element(t, &exec.FullValue{Elm: e.k, Elm2: e.v, Windows: []typex.Window{e.w}}), true); err != nil {
			t.Fatal(err)
		}
	}
	enc := func(w typex.Window) []byte {
		b, err := exec.EncodeWindow(exec.MakeWindowEncoder(coder.NewIntervalWindow()), w)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, r := range [][]byte{f.report(0, 2, 12), f.report(1, 2, 10)} {
		if err := st.Record(r, true); err != nil {
			t.Fatal(err)
		}
	}
	if !st.ReadyFor(window.IntervalWindow{Start: 3, End: 4}) || st.ReadyFor(window.IntervalWindow{Start: 13, End: 14}) {
		t.Fatalf("watermark %v: want [0,10) ready and [10,20) not", st.Watermark())
	}
	keys, err := st.MultimapKeys(enc(w0))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%q", keys) != `["\x01a" "\x01b"]` {
		t.Errorf("keys %q", keys)
	}
	vals, err := st.Multimap(enc(w0), []byte("\x01a"))
	if err != nil {
		t.Fatal(err)
	}
	// Go ints have a custom (zigzag varint) coder, length-prefixed on the
	// wire by wireSafe: 1 -> [1 2], 3 -> [1 6].
	if fmt.Sprintf("%v", vals) != "[[1 2] [1 6]]" {
		t.Errorf("values of a: %v", vals)
	}
	if _, err := st.Multimap(enc(w1), []byte("\x01a")); !errors.Is(err, fnapi.ErrSideInputNotReady) {
		t.Errorf("window [10,20): %v, want not ready", err)
	}
	if vals, err := st.Multimap(enc(w0), []byte("\x01z")); err != nil || len(vals) != 0 {
		t.Errorf("absent key: %v %v", vals, err)
	}
	// Late data into a ready window is kept and counted, never dropped.
	if err := st.Record(f.element(t, &exec.FullValue{Elm: "c", Elm2: 9, Windows: []typex.Window{w0}}), true); err != nil {
		t.Fatal(err)
	}
	if st.Late() != 1 {
		t.Errorf("late = %d, want 1", st.Late())
	}
}

// TestStoreReportBatch: a record holding a batch of reports
// (Envelope.reports, one per task of the producer written at one place of
// its transaction) is the same as the reports in consecutive records: the
// global window is ready once both of the producer's two tasks reported
// the end of time, and not before.
func TestStoreReportBatch(t *testing.T) {
	f := newFixture(t, false, nil)
	spec, err := NewSpec(f.comps, f.side)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(spec)
	batch := func(parts ...int32) []byte {
		var rs []*pb.WatermarkReport
		for _, p := range parts {
			rs = append(rs, &pb.WatermarkReport{Stage: f.stage.SideInputs[0].Upstream, SourcePartition: p, TotalSourcePartitions: 2,
				CommittedWatermarkMillis: int64(mtime.MaxTimestamp)})
		}
		b, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Reports{Reports: &pb.WatermarkReports{Reports: rs}}})
		return b
	}
	if err := st.Record(batch(1), true); err != nil {
		t.Fatal(err)
	}
	if st.ReadyFor(window.GlobalWindow{}) {
		t.Fatal("ready with one of two tasks reported")
	}
	if err := st.Record(batch(0, 1), true); err != nil {
		t.Fatal(err)
	}
	if !st.ReadyFor(window.GlobalWindow{}) {
		t.Fatal("not ready after a batch of both tasks' reports at the end of time")
	}
	if err := st.Record(batch(), true); err == nil {
		t.Fatal("a batch of no report: no error")
	}
}

// TestStoreIdleSideInputIsReady: a side input whose producer's every task
// is idle is left out of the main input's readiness (DESIGN.md
// "Watermarks": idleness where upstreams meet), at whatever watermark it
// idled: its windows are served with what it has; an element it delivers
// later for a served window is kept and counted Late; when it wakes it
// holds again. Before, a side input from a quiet topic held the main input
// for ever.
func TestStoreIdleSideInputIsReady(t *testing.T) {
	f := newFixture(t, false, nil)
	spec, err := NewSpec(f.comps, f.side)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(spec)
	if err := st.Record(f.element(t, &exec.FullValue{Elm: "a"}), true); err != nil {
		t.Fatal(err)
	}
	idle := func(p, total int32, wm mtime.Time, idle bool) []byte {
		b, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{Stage: f.stage.SideInputs[0].Upstream,
			SourcePartition: p, TotalSourcePartitions: total, CommittedWatermarkMillis: int64(wm), Idle: idle}}})
		return b
	}
	// One of two producer tasks idle: held (the other has not reported).
	if err := st.Record(idle(0, 2, mtime.MinTimestamp, true), true); err != nil {
		t.Fatal(err)
	}
	if st.ReadyFor(window.GlobalWindow{}) || st.Idle() {
		t.Fatal("ready (or idle) while a producer task has not reported")
	}
	if err := st.Record(idle(1, 2, 1000, true), true); err != nil {
		t.Fatal(err)
	}
	if !st.Idle() || !st.ReadyFor(window.GlobalWindow{}) || !st.ReadyFor(window.IntervalWindow{Start: 5000, End: 6000}) {
		t.Fatalf("every producer task idle: idle=%v, want ready for every window", st.Idle())
	}
	got, err := st.Iterable([]byte{})
	if err != nil || fmt.Sprintf("%q", got) != `["\x01a"]` {
		t.Fatalf("served %q, %v; want the element delivered so far", got, err)
	}
	if err := st.Record(f.element(t, &exec.FullValue{Elm: "bb"}), true); err != nil {
		t.Fatal(err)
	}
	if st.Late() != 1 {
		t.Errorf("Late = %d after an element for a served window, want 1", st.Late())
	}
	// A task wakes: the side input holds again (its watermark 1000 is below
	// the global window's end).
	if err := st.Record(idle(1, 2, 1000, false), true); err != nil {
		t.Fatal(err)
	}
	if st.Idle() || st.ReadyFor(window.GlobalWindow{}) {
		t.Fatal("ready after a producer task woke")
	}
}

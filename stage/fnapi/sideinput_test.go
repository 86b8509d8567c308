package fnapi

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// sideSum appends the side input's size and sum to each element.
func sideSum(s string, side []int) string {
	sum := 0
	for _, v := range side {
		sum += v
	}
	return fmt.Sprintf("%s:%d:%d", s, len(side), sum)
}

// sideCount appends the side input's count and total length.
func sideCount(s string, iter func(*string) bool) string {
	n, total := 0, 0
	var v string
	for iter(&v) {
		n++
		total += len(v)
	}
	return fmt.Sprintf("%s:%d:%d", s, n, total)
}

// sideLookup appends the values of the element's key in a multimap side
// input, sorted.
func sideLookup(s string, m func(string) func(*int) bool) string {
	var vs []int
	var v int
	iter := m(s)
	for iter(&v) {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	return fmt.Sprintf("%s=%v", s, vs)
}

func init() {
	register.Function2x1(sideSum)
	register.Function2x1(sideCount)
	register.Function2x1(sideLookup)
	register.Iter1[string]()
	register.Iter1[int]()
}

// fakeSide is a SideInput over wire elements cut with WireElements, as the
// runner's store does, global window only.
type fakeSide struct {
	notReady bool
	elms     [][]byte
	byKey    map[string][][]byte
	keys     [][]byte
}

func newFakeSide(t *testing.T, w *WireElements, wires [][]byte, kv bool) *fakeSide {
	t.Helper()
	f := &fakeSide{byKey: map[string][][]byte{}}
	for _, wire := range wires {
		wins, e, err := w.Split(wire)
		if err != nil {
			t.Fatal(err)
		}
		if len(wins) != 1 || len(wins[0]) != 0 {
			t.Fatalf("windows %q, want the global window (empty bytes)", wins)
		}
		f.elms = append(f.elms, e)
		if kv {
			k, v, err := w.SplitKV(e)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := f.byKey[string(k)]; !ok {
				f.keys = append(f.keys, k)
			}
			f.byKey[string(k)] = append(f.byKey[string(k)], v)
		}
	}
	return f
}

func (f *fakeSide) check(window []byte) error {
	if f.notReady {
		return ErrSideInputNotReady
	}
	if len(window) != 0 {
		return fmt.Errorf("window %x, want the global window", window)
	}
	return nil
}

func (f *fakeSide) Iterable(window []byte) ([][]byte, error) { return f.elms, f.check(window) }
func (f *fakeSide) MultimapKeys(window []byte) ([][]byte, error) {
	return f.keys, f.check(window)
}
func (f *fakeSide) Multimap(window, key []byte) ([][]byte, error) {
	return f.byKey[string(key)], f.check(window)
}

// sideStage builds and registers the stage of the one ParDo named fn, whose
// main input is a Create of main and whose side input is the PCollection
// side; it returns the stage, the main input and output ids, and the wire
// encoder of the side input's PCollection.
func sideStage(t *testing.T, id string, p *beam.Pipeline, fn string) (st *Stage, in, out, sideID, sideLocal string, sideWire *WireElements, sideEnc exec.ElementEncoder) {
	t.Helper()
	comps := marshal(t, p)
	tid, tr := leaf(t, comps, fn)
	for local, pid := range tr.GetInputs() {
		if local == "i0" {
			in = pid
		} else {
			sideID, sideLocal = pid, local
		}
	}
	out = only(tr.GetOutputs())
	st, err := BuildStage(comps, StageSpec{ID: id, Transforms: []string{tid}, Input: in, Outputs: []string{out}}, shared.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.RegisterStage(ctx, st.Descriptor); err != nil {
		t.Fatal(err)
	}
	// The side input's PCollection carries its wire-safe element coder in
	// the descriptor: the producer's wire coder is that in a windowed value.
	ec, err := graphx.NewCoderUnmarshaller(st.Descriptor.GetCoders()).Coder(st.Descriptor.GetPcollections()[sideID].GetCoderId())
	if err != nil {
		t.Fatal(err)
	}
	sideEnc = exec.MakeElementEncoder(coder.NewW(ec, coder.NewGlobalWindow()))
	sideWire, err = NewWireElements(comps, sideID, coder.IsKV(ec))
	if err != nil {
		t.Fatal(err)
	}
	return st, in, out, sideID, sideLocal, sideWire, sideEnc
}

func encodeSide(t *testing.T, enc exec.ElementEncoder, vals []*exec.FullValue) [][]byte {
	t.Helper()
	var out [][]byte
	for _, fv := range vals {
		fv.Windows, fv.Pane = window.SingleGlobalWindow, typex.NoFiringPane()
		var buf bytes.Buffer
		if err := enc.Encode(fv, &buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}

func runSideStage(t *testing.T, st *Stage, in, out string, main []string) ([]string, error) {
	t.Helper()
	var es []elm
	for i, m := range main {
		es = append(es, elm{m, typex.EventTime(i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, wireCoder(t, st, in), es)})
	if err != nil {
		return nil, err
	}
	var got []string
	for _, e := range decodeAll(t, wireCoder(t, st, out), res.Outputs[st.Sinks[out]]) {
		got = append(got, e.V)
	}
	return got, nil
}

// TestStateServesIterableSideInput runs a ParDo with a []int side input on
// the real harness: the State service answers its IterableSideInput Gets with
// the element bytes cut from the producer's wire encoding.
func TestStateServesIterableSideInput(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.Create(s, 0)
	_ = beam.ParDo(s, sideSum, beam.Create(s, "x"), beam.SideInput{Input: side})
	st, in, out, _, local, w, enc := sideStage(t, "side-iterable", p, "sideSum")
	var vals []*exec.FullValue
	for _, v := range []int{1, 2, 3, 40} {
		vals = append(vals, &exec.FullValue{Elm: v})
	}
	f := newFakeSide(t, w, encodeSide(t, enc, vals), false)
	shared.RegisterSideInput(sideTransform(t, st), local, f)
	got, err := runSideStage(t, st, in, out, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a:4:46 b:4:46]" {
		t.Errorf("outputs %v, want [a:4:46 b:4:46]", got)
	}

	// Not ready: the bundle fails with the source's error; nothing is served.
	f.notReady = true
	_, err = runSideStage(t, st, in, out, []string{"c"})
	if err == nil || !strings.Contains(err.Error(), ErrSideInputNotReady.Error()) {
		t.Fatalf("bundle with a side input not ready: %v, want %q", err, ErrSideInputNotReady)
	}
}

// sideTransform is the id of the one ParDo with side inputs in st.
func sideTransform(t *testing.T, st *Stage) string {
	t.Helper()
	for tid, tr := range st.Descriptor.GetTransforms() {
		if len(tr.GetInputs()) > 1 {
			return tid
		}
	}
	t.Fatal("no transform with a side input in the descriptor")
	return ""
}

// TestStateServesLargeSideInputInPages checks paging: a side input of about
// 6 MiB crosses the State API in pages of about maxStatePageBytes linked by
// continuation tokens, and the DoFn sees every element once.
func TestStateServesLargeSideInputInPages(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.Create(s, "v")
	_ = beam.ParDo(s, sideCount, beam.Create(s, "x"), beam.SideInput{Input: side})
	st, in, out, _, local, w, enc := sideStage(t, "side-paged", p, "sideCount")
	const n, size = 6000, 1000
	var vals []*exec.FullValue
	for i := 0; i < n; i++ {
		vals = append(vals, &exec.FullValue{Elm: strings.Repeat(strconv.Itoa(i%10), size)})
	}
	f := newFakeSide(t, w, encodeSide(t, enc, vals), false)
	pages := &countingSide{SideInput: f}
	shared.RegisterSideInput(sideTransform(t, st), local, pages)
	got, err := runSideStage(t, st, in, out, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("[a:%d:%d]", n, n*size); fmt.Sprint(got) != want {
		t.Errorf("outputs %v, want %s", got, want)
	}
	if calls := pages.calls; calls < 5 {
		t.Errorf("%d Get requests for ~6 MiB, want one per page of ~1 MiB (at least 5)", calls)
	}
}

type countingSide struct {
	SideInput
	calls int // only the State stream's goroutine calls
}

func (c *countingSide) Iterable(w []byte) ([][]byte, error) {
	c.calls++
	return c.SideInput.Iterable(w)
}

// TestStateServesMultimapSideInput runs a ParDo with a map side input
// (func(string) func(*int) bool): MultimapSideInput Gets are answered with
// the values of the key the SDK encoded, and an absent key has none.
func TestStateServesMultimapSideInput(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.ParDo(s, toKV, beam.Create(s, "k"))
	_ = beam.ParDo(s, sideLookup, beam.Create(s, "x"), beam.SideInput{Input: side})
	st, in, out, _, local, w, enc := sideStage(t, "side-multimap", p, "sideLookup")
	var vals []*exec.FullValue
	for _, kv := range []struct {
		k string
		v int
	}{{"a", 1}, {"b", 2}, {"a", 3}, {"c", 4}} {
		vals = append(vals, &exec.FullValue{Elm: kv.k, Elm2: kv.v})
	}
	f := newFakeSide(t, w, encodeSide(t, enc, vals), true)
	shared.RegisterSideInput(sideTransform(t, st), local, f)
	got, err := runSideStage(t, st, in, out, []string{"a", "b", "z"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a=[1 3] b=[2] z=[]]" {
		t.Errorf("outputs %v, want [a=[1 3] b=[2] z=[]]", got)
	}
	if len(f.keys) != 3 {
		t.Errorf("distinct keys %d, want 3", len(f.keys))
	}
}

// TestStatePage checks the paging rule: whole elements, a page at least one
// element, the token the index of the next page's first element.
func TestStatePage(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxStatePageBytes)
	elms := [][]byte{[]byte("a"), big, []byte("b"), []byte("c")}
	var pages []string
	var token []byte
	for {
		data, next, err := statePage(elms, token)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, fmt.Sprintf("%d@%s", len(data), token))
		if next == nil {
			break
		}
		token = next
	}
	if want := fmt.Sprint([]string{"1@", fmt.Sprintf("%d@1", maxStatePageBytes), "2@2"}); fmt.Sprint(pages) != want {
		t.Errorf("pages %v, want %s", pages, want)
	}
	if data, next, err := statePage(nil, nil); err != nil || data != nil || next != nil {
		t.Errorf("empty side input: %q %q %v", data, next, err)
	}
	for _, bad := range []string{"x", "-1", "5"} {
		if _, _, err := statePage(elms, []byte(bad)); err == nil {
			t.Errorf("token %q: want an error", bad)
		}
	}
}

package fnapi

import (
	"bytes"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
)

// TestWireElementsCheck (issue 23, a well-formed Envelope with garbage
// element bytes): Check takes an element the SDK encoded, and refuses one
// cut short, one with a byte after it, garbage too short for a header,
// and two elements in one (the harness would read them as two).
func TestWireElementsCheck(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo(s, func(k string) (string, int) { return k, 1 }, beam.Create(s, "k")) // a KV PCollection
	comps := marshal(t, p)
	var id string
	var ec *coder.Coder
	for pid, col := range comps.GetPcollections() {
		c, err := graphx.NewCoderUnmarshaller(comps.GetCoders()).Coder(col.GetCoderId())
		if err == nil && coder.IsKV(c) {
			id, ec = pid, c
		}
	}
	if id == "" {
		t.Fatal("no KV PCollection")
	}
	w, err := NewWireElements(comps, id, false)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	fv := &exec.FullValue{Elm: "key", Elm2: 42, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}
	if err := exec.MakeElementEncoder(coder.NewW(ec, coder.NewGlobalWindow())).Encode(fv, &buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	if err := w.Check(good); err != nil {
		t.Fatalf("Check(an element the SDK encoded % x): %v", good, err)
	}
	for name, bad := range map[string][]byte{
		"cut short":      good[:len(good)-1],
		"a byte after":   append(bytes.Clone(good), 0),
		"two in one":     append(bytes.Clone(good), good...),
		"garbage":        {0xde, 0xad},
		"empty":          {},
		"bad window cnt": append(bytes.Clone(good[:8]), 0xff, 0xff, 0xff, 0xff),
	} {
		if err := w.Check(bad); err == nil {
			t.Errorf("Check(%s: % x) = nil, want an error", name, bad)
		}
	}
}

// BenchmarkWireElementsCheck is the check's cost per element record of an
// internal topic (KV(string, int) in the global window): go test
// ./stage/fnapi -run '^$' -bench WireElementsCheck.
func BenchmarkWireElementsCheck(b *testing.B) {
	p, s := beam.NewPipelineWithRoot()
	beam.ParDo(s, func(k string) (string, int) { return k, 1 }, beam.Create(s, "k"))
	comps := marshal(b, p)
	var id string
	var ec *coder.Coder
	for pid, col := range comps.GetPcollections() {
		c, err := graphx.NewCoderUnmarshaller(comps.GetCoders()).Coder(col.GetCoderId())
		if err == nil && coder.IsKV(c) {
			id, ec = pid, c
		}
	}
	w, err := NewWireElements(comps, id, false)
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	fv := &exec.FullValue{Elm: "key-0123456789", Elm2: 42, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}
	if err := exec.MakeElementEncoder(coder.NewW(ec, coder.NewGlobalWindow())).Encode(fv, &buf); err != nil {
		b.Fatal(err)
	}
	e := buf.Bytes()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := w.Check(e); err != nil {
			b.Fatal(err)
		}
	}
}

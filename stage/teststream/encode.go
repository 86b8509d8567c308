package teststream

import (
	"bytes"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
)

// Encoder turns a stream Element into a wire element of the TestStream's
// output PCollection: the windowed value (global window, the element's
// timestamp, no-firing pane) of the decoded element, encoded with the wire
// coder (fnapi.WireCoder). Decoding and encoding go through the Go SDK's
// coders, as in the harness: a coder the runner length-prefixes on the
// wire (a custom or row coder) gets its prefix, a known one (varint,
// string, KV of them) stays as it is. The element's types must be
// registered in this process (the pipeline was built here).
type Encoder struct {
	dec exec.ElementDecoder
	enc exec.ElementEncoder
}

// NewEncoder returns the encoder of PCollection pcoll of comps, the output
// of a TestStream, whose events' elements are encoded with the
// PCollection's coder. Only the global window: the TestStream assigns it.
func NewEncoder(comps *pipepb.Components, pcoll string) (*Encoder, error) {
	col, ok := comps.GetPcollections()[pcoll]
	if !ok {
		return nil, fmt.Errorf("%w: pcollection %q not found", ErrMalformed, pcoll)
	}
	elm, err := graphx.NewCoderUnmarshaller(comps.GetCoders()).Coder(col.GetCoderId())
	if err != nil {
		return nil, fmt.Errorf("%w: pcollection %q: coder %q: %v", ErrMalformed, pcoll, col.GetCoderId(), err)
	}
	id, coders, err := fnapi.WireCoder(comps, pcoll)
	if err != nil {
		return nil, err
	}
	wv, err := graphx.NewCoderUnmarshaller(coders).Coder(id)
	if err != nil {
		return nil, fmt.Errorf("%w: pcollection %q: wire coder: %v", ErrMalformed, pcoll, err)
	}
	if wv.Kind != coder.WindowedValue || wv.Window.Kind != coder.GlobalWindow {
		return nil, fmt.Errorf("%w: TestStream output %q is not in the global window (wire coder %v)", ErrUnsupported, pcoll, wv)
	}
	return &Encoder{dec: exec.MakeElementDecoder(elm), enc: exec.MakeElementEncoder(wv)}, nil
}

// Encode returns e as a wire element. An element that does not decode
// with the PCollection's coder is an error (ErrMalformed).
func (x *Encoder) Encode(e Element) ([]byte, error) {
	fv, err := x.dec.Decode(bytes.NewReader(e.Encoded))
	if err != nil {
		return nil, fmt.Errorf("%w: element %x: %v", ErrMalformed, e.Encoded, err)
	}
	var buf bytes.Buffer
	out := &exec.FullValue{Elm: fv.Elm, Elm2: fv.Elm2, Timestamp: e.Timestamp, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}
	if err := x.enc.Encode(out, &buf); err != nil {
		return nil, fmt.Errorf("%w: element %x: encode for the wire: %v", ErrMalformed, e.Encoded, err)
	}
	return buf.Bytes(), nil
}

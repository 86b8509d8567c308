package gbk

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
)

// Codec decodes a GroupByKey's input elements and encodes its fired panes,
// in the wire coders of the input and output PCollections (fnapi.BuildStage's
// rule):
//
//	input:  windowed_value(KV(K, V), W)
//	output: windowed_value(KV(K, Iterable(V)), W)
//
// where K and V are the wire-safe key and value coders, the same on both
// sides: key and value bytes are copied, never re-encoded, so the output key
// is byte-identical to the input key (and to what the SDK writes).
type Codec struct {
	in, out *fnapi.KVWire
	winDec  exec.WindowDecoder
	winEnc  exec.WindowEncoder
}

// NewCodec builds the codec of the GroupByKey reading PCollection in and
// writing PCollection out of comps. It fails, naming them, if in is not a KV,
// out not KV(K, Iterable(V)) with in's K and V, or their window coders
// differ.
func NewCodec(comps *pipepb.Components, in, out string) (*Codec, error) {
	iw, err := fnapi.NewKVWire(comps, in, false)
	if err != nil {
		return nil, fmt.Errorf("%w: GroupByKey input: %w", ErrMalformed, err)
	}
	ow, err := fnapi.NewKVWire(comps, out, true)
	if err != nil {
		return nil, fmt.Errorf("%w: GroupByKey output: %w", ErrMalformed, err)
	}
	if iw.Key != ow.Key || iw.Value != ow.Value || iw.WindowCoderURN != ow.WindowCoderURN {
		return nil, fmt.Errorf("%w: GroupByKey %s -> %s: input KV(%s, %s) in %s, output KV(%s, Iterable(%s)) in %s", ErrMalformed, in, out, iw.Key, iw.Value, iw.WindowCoderURN, ow.Key, ow.Value, ow.WindowCoderURN)
	}
	wc := coder.NewGlobalWindow()
	if iw.WindowCoderURN != "beam:coder:global_window:v1" {
		wc = coder.NewIntervalWindow()
	}
	return &Codec{in: iw, out: ow, winDec: exec.MakeWindowDecoder(wc), winEnc: exec.MakeWindowEncoder(wc)}, nil
}

// CheckDecodes returns nil if the elements of PCollection pcoll of comps
// decode with Decode: pcoll is KV(K, V) in the input's window coder, with
// the input's wire K and V (a lifted combine's MergeAccumulators output,
// KV(K, Acc), against its GroupByKey's input of accumulators); else an
// error naming both encodings.
func (c *Codec) CheckDecodes(comps *pipepb.Components, pcoll string) error {
	w, err := fnapi.NewKVWire(comps, pcoll, false)
	if err != nil {
		return err
	}
	if w.Key != c.in.Key || w.Value != c.in.Value || w.WindowCoderURN != c.in.WindowCoderURN {
		return fmt.Errorf("%s is KV(%s, %s) in %s, the GroupByKey's input KV(%s, %s) in %s", pcoll, w.Key, w.Value, w.WindowCoderURN, c.in.Key, c.in.Value, c.in.WindowCoderURN)
	}
	return nil
}

// KeyOf returns the key bytes of an input element (aliasing it): the Kafka
// key of the record carrying it to the GroupByKey's topic.
func (c *Codec) KeyOf(element []byte) ([]byte, error) { return c.in.KeyOf(element) }

// Decoded is one input element.
type Decoded struct {
	Timestamp mtime.Time
	Windows   []Window
	Key       []byte
	Value     []byte
}

// Decode cuts an input element into its timestamp, windows, key and value
// bytes (aliasing element).
func (c *Codec) Decode(element []byte) (Decoded, error) {
	r := bytes.NewReader(element)
	ws, ts, _, err := exec.DecodeWindowedValueHeader(c.winDec, r)
	if err != nil {
		return Decoded{}, fmt.Errorf("%w: element header: %v", ErrMalformed, err)
	}
	kv := element[len(element)-r.Len():]
	key, value, err := c.in.SplitKV(kv)
	if err != nil {
		return Decoded{}, fmt.Errorf("%w: element: %v", ErrMalformed, err)
	}
	d := Decoded{Timestamp: mtime.Time(ts), Key: key, Value: value}
	for _, w := range ws {
		switch w := w.(type) {
		case window.GlobalWindow:
			d.Windows = append(d.Windows, GlobalWindow)
		case window.IntervalWindow:
			d.Windows = append(d.Windows, Window{Start: mtime.Time(w.Start), End: mtime.Time(w.End)})
		default:
			return Decoded{}, fmt.Errorf("%w: window %v of type %T", ErrMalformed, w, w)
		}
	}
	return d, nil
}

// Encode encodes a pane as an output element: header (timestamp, the
// pane's window, pane info), the key bytes, then the values as an iterable
// (big-endian int32 count, then each value's bytes).
func (c *Codec) Encode(p Pane) ([]byte, error) {
	var buf bytes.Buffer
	var w typex.Window = window.GlobalWindow{}
	if !p.Window.Global {
		w = window.IntervalWindow{Start: typex.EventTime(p.Window.Start), End: typex.EventTime(p.Window.End)}
	}
	if err := exec.EncodeWindowedValueHeader(c.winEnc, []typex.Window{w}, typex.EventTime(p.Timestamp), p.Info, &buf); err != nil {
		return nil, err
	}
	buf.Write(p.Key)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(p.Values)))
	buf.Write(n[:])
	for _, v := range p.Values {
		buf.Write(v)
	}
	return buf.Bytes(), nil
}

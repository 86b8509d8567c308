package fnapi

import (
	"encoding/hex"
	"fmt"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// KVWire is the wire encoding of a PCollection of KVs, by BuildStage's rule
//
//	windowed_value(wireSafe(KV(K, V)), windowCoder(P))
//
// for the runner to cut elements into header, key and value without
// knowing K and V: the key bytes are exactly those the SDK writes for the
// key on the wire (so equal keys have equal bytes, the runner's GroupByKey
// groups and partitions by them), and the value bytes those of the value.
type KVWire struct {
	// WindowCoderURN is beam:coder:global_window:v1 or
	// beam:coder:interval_window:v1.
	WindowCoderURN string
	// Key and Value describe wireSafe(K) and wireSafe(V) (or, for a
	// grouped PCollection KV(K, Iterable(V)), of V): equal strings mean
	// equal encodings.
	Key, Value string
	// Grouped is set for KV(K, Iterable(V)) (a GroupByKey's output).
	Grouped bool

	skipWindow, skipKey, skipValue skipFn
}

// NewKVWire describes the wire encoding of PCollection pcoll of comps (the
// pipeline's components), which must be KV(K, V), or with grouped
// KV(K, Iterable(V)). Errors name the PCollection and the coder.
func NewKVWire(comps *pipepb.Components, pcoll string, grouped bool) (*KVWire, error) {
	col, ws, elm, coders, err := wireCodersOf(comps, pcoll)
	if err != nil {
		return nil, err
	}
	kv := coders[elm]
	if kv.GetSpec().GetUrn() != urnCoderKV || len(kv.GetComponentCoderIds()) != 2 {
		return nil, fmt.Errorf("fnapi: pcollection %q: coder %q (%s) is not a KV coder", pcoll, col.GetCoderId(), kv.GetSpec().GetUrn())
	}
	kid, vid := kv.GetComponentCoderIds()[0], kv.GetComponentCoderIds()[1]
	w := &KVWire{Grouped: grouped}
	if w.skipKey, err = newSkipper(kid, coders, 0); err != nil {
		return nil, fmt.Errorf("fnapi: pcollection %q key: %w", pcoll, err)
	}
	if w.skipValue, err = newSkipper(vid, coders, 0); err != nil {
		return nil, fmt.Errorf("fnapi: pcollection %q value: %w", pcoll, err)
	}
	w.Key = describeCoder(kid, coders, 0)
	if grouped {
		it := coders[vid]
		if it.GetSpec().GetUrn() != urnCoderIterable || len(it.GetComponentCoderIds()) != 1 {
			return nil, fmt.Errorf("fnapi: pcollection %q: value coder %q (%s) is not an iterable coder", pcoll, vid, it.GetSpec().GetUrn())
		}
		vid = it.GetComponentCoderIds()[0]
	}
	w.Value = describeCoder(vid, coders, 0)
	wc, ok := coders[ws.GetWindowCoderId()]
	if !ok {
		return nil, fmt.Errorf("fnapi: pcollection %q: window coder %q not found", pcoll, ws.GetWindowCoderId())
	}
	w.WindowCoderURN = wc.GetSpec().GetUrn()
	if w.WindowCoderURN != urnCoderGlobalWindow && w.WindowCoderURN != urnCoderIntervalWindow {
		return nil, fmt.Errorf("fnapi: pcollection %q: window coder %q (%s) not supported (global and interval windows only)", pcoll, ws.GetWindowCoderId(), w.WindowCoderURN)
	}
	if w.skipWindow, err = newSkipper(ws.GetWindowCoderId(), coders, 0); err != nil {
		return nil, err
	}
	return w, nil
}

// KeyOf returns the key bytes of a wire element (aliasing element).
func (w *KVWire) KeyOf(element []byte) ([]byte, error) {
	hdr, err := w.HeaderLen(element)
	if err != nil {
		return nil, err
	}
	rest, err := w.skipKey(element[hdr:])
	if err != nil {
		return nil, fmt.Errorf("fnapi: key: %w", err)
	}
	return element[hdr : len(element)-len(rest)], nil
}

// HeaderLen is the length of element's windowed-value header (timestamp,
// windows, pane): the KV starts after it.
func (w *KVWire) HeaderLen(element []byte) (int, error) {
	var rest []byte
	_, err := skipWindowedValue(w.skipWindow, func(b []byte) ([]byte, error) {
		rest = b
		return b, nil
	})(element)
	if err != nil {
		return 0, err
	}
	return len(element) - len(rest), nil
}

// SplitKV cuts an encoded KV (the element after its header) into the key
// and value bytes (aliasing kv). For a grouped PCollection value is the
// encoded iterable. Trailing bytes are an error.
func (w *KVWire) SplitKV(kv []byte) (key, value []byte, err error) {
	rest, err := w.skipKey(kv)
	if err != nil {
		return nil, nil, fmt.Errorf("fnapi: key: %w", err)
	}
	key = kv[:len(kv)-len(rest)]
	skipV := w.skipValue
	if w.Grouped {
		skipV = skipIterable(w.skipValue)
	}
	end, err := skipV(rest)
	if err != nil {
		return nil, nil, fmt.Errorf("fnapi: value: %w", err)
	}
	if len(end) != 0 {
		return nil, nil, fmt.Errorf("fnapi: %d bytes after the value", len(end))
	}
	return key, rest, nil
}

// describeCoder is a canonical text of coder id: its URN, payload and
// components, recursively; ids do not appear.
func describeCoder(id string, coders map[string]*pipepb.Coder, depth int) string {
	c := coders[id]
	if c == nil || depth > 64 {
		return "?" + id
	}
	var b strings.Builder
	b.WriteString(c.GetSpec().GetUrn())
	if p := c.GetSpec().GetPayload(); len(p) > 0 {
		b.WriteString("#" + hex.EncodeToString(p))
	}
	if cs := c.GetComponentCoderIds(); len(cs) > 0 {
		b.WriteString("(")
		for i, cc := range cs {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(describeCoder(cc, coders, depth+1))
		}
		b.WriteString(")")
	}
	return b.String()
}

// wireCodersOf returns PCollection pcoll of comps, its windowing strategy,
// the id of its wire-safe element coder (see coderSet.wireSafe) and every
// coder that id may refer to (the pipeline's and the ones wireSafe added).
// Errors name the PCollection.
func wireCodersOf(comps *pipepb.Components, pcoll string) (*pipepb.PCollection, *pipepb.WindowingStrategy, string, map[string]*pipepb.Coder, error) {
	col, ok := comps.GetPcollections()[pcoll]
	if !ok {
		return nil, nil, "", nil, fmt.Errorf("fnapi: pcollection %q not found", pcoll)
	}
	ws, ok := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
	if !ok {
		return nil, nil, "", nil, fmt.Errorf("fnapi: pcollection %q: windowing strategy %q not found", pcoll, col.GetWindowingStrategyId())
	}
	cs := &coderSet{base: comps.GetCoders(), added: map[string]*pipepb.Coder{}}
	elm, err := cs.wireSafe(col.GetCoderId(), 0)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("fnapi: pcollection %q: %w", pcoll, err)
	}
	coders := make(map[string]*pipepb.Coder, len(cs.base)+len(cs.added))
	for id, c := range cs.base {
		coders[id] = c
	}
	for id, c := range cs.added {
		coders[id] = c
	}
	return col, ws, elm, coders, nil
}

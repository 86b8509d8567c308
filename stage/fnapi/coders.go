package fnapi

import (
	"encoding/binary"
	"errors"
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// Coder URNs this package reads on the wire (beam_runner_api.proto, StandardCoders).
const (
	urnCoderBytes          = "beam:coder:bytes:v1"
	urnCoderStringUTF8     = "beam:coder:string_utf8:v1"
	urnCoderLengthPrefix   = "beam:coder:length_prefix:v1"
	urnCoderVarInt         = "beam:coder:varint:v1"
	urnCoderDouble         = "beam:coder:double:v1"
	urnCoderBool           = "beam:coder:bool:v1"
	urnCoderGlobalWindow   = "beam:coder:global_window:v1"
	urnCoderIntervalWindow = "beam:coder:interval_window:v1"
	urnCoderKV             = "beam:coder:kv:v1"
	urnCoderIterable       = "beam:coder:iterable:v1"
	urnCoderNullable       = "beam:coder:nullable:v1"
	urnCoderShardedKey     = "beam:coder:sharded_key:v1"
	urnCoderWindowedValue  = "beam:coder:windowed_value:v1"
)

// knownLeaf are coders whose encoding this package can skip over and that have
// no components that need rewriting. length_prefix counts as a leaf: its
// component is never looked at.
var knownLeaf = map[string]bool{
	urnCoderBytes:          true,
	urnCoderStringUTF8:     true,
	urnCoderLengthPrefix:   true,
	urnCoderVarInt:         true,
	urnCoderDouble:         true,
	urnCoderBool:           true,
	urnCoderGlobalWindow:   true,
	urnCoderIntervalWindow: true,
}

// knownComposite are coders whose encoding this package can skip over once
// their components can be.
var knownComposite = map[string]bool{
	urnCoderKV:         true,
	urnCoderIterable:   true,
	urnCoderNullable:   true,
	urnCoderShardedKey: true,
}

// errShortElement is returned when an encoded element ends before its coder
// says it should.
var errShortElement = errors.New("fnapi: encoded element is truncated")

// coderSet is the coders of one descriptor being built: the pipeline's coders
// (base, never modified) and the ones added for the wire (added).
type coderSet struct {
	base  map[string]*pipepb.Coder
	added map[string]*pipepb.Coder
	safe  map[string]string // memo of wireSafe: coder id -> wire-safe id
}

func (cs *coderSet) get(id string) (*pipepb.Coder, bool) {
	if c, ok := cs.added[id]; ok {
		return c, true
	}
	c, ok := cs.base[id]
	return c, ok
}

// freshID returns an id starting with want that names no coder yet.
func (cs *coderSet) freshID(want string) string {
	id := want
	for i := 1; ; i++ {
		if _, ok := cs.get(id); !ok {
			return id
		}
		id = fmt.Sprintf("%s%d", want, i)
	}
}

// wireSafe returns the id of a coder that encodes like coder id but that this
// package can split into elements without understanding every coder in it:
//
//	wireSafe(c) = c                                  if c is a known leaf
//	            = c' with components wireSafe(ci)    if c is a known composite
//	            = length_prefix(c)                   otherwise
//
// (c' is c itself when no component changed.) The SDK encodes and decodes
// with the returned coder, so the runner sees every unknown coder's bytes
// behind a varint length and never needs to parse them. New coders are added
// to cs.added under ids derived from the original id. depth guards against
// cyclic coder graphs in malformed input.
func (cs *coderSet) wireSafe(id string, depth int) (string, error) {
	if depth > 64 {
		return "", fmt.Errorf("fnapi: coder %q nests more than 64 levels (cyclic?)", id)
	}
	if safe, ok := cs.safe[id]; ok {
		return safe, nil
	}
	safe, err := cs.wireSafeUncached(id, depth)
	if err != nil {
		return "", err
	}
	if cs.safe == nil {
		cs.safe = map[string]string{}
	}
	cs.safe[id] = safe
	return safe, nil
}

func (cs *coderSet) wireSafeUncached(id string, depth int) (string, error) {
	c, ok := cs.get(id)
	if !ok {
		return "", fmt.Errorf("fnapi: coder %q not found in pipeline components", id)
	}
	urn := c.GetSpec().GetUrn()
	switch {
	case knownLeaf[urn]:
		return id, nil
	case knownComposite[urn]:
		changed := false
		comps := make([]string, len(c.GetComponentCoderIds()))
		for i, cc := range c.GetComponentCoderIds() {
			safe, err := cs.wireSafe(cc, depth+1)
			if err != nil {
				return "", fmt.Errorf("fnapi: component %d of coder %q (%s): %w", i, id, urn, err)
			}
			comps[i] = safe
			changed = changed || safe != cc
		}
		if !changed {
			return id, nil
		}
		nid := cs.freshID(id + "_wire")
		cs.added[nid] = &pipepb.Coder{Spec: c.GetSpec(), ComponentCoderIds: comps}
		return nid, nil
	default:
		nid := cs.freshID(id + "_lp")
		cs.added[nid] = &pipepb.Coder{
			Spec:              &pipepb.FunctionSpec{Urn: urnCoderLengthPrefix},
			ComponentCoderIds: []string{id},
		}
		return nid, nil
	}
}

// skipFn consumes one encoded value from the front of b and returns the rest.
type skipFn func(b []byte) ([]byte, error)

// newSkipper returns a skipFn for the coder id in coders. It fails on coders it
// cannot skip over (anything not length-prefixed that is not a known leaf,
// known composite or windowed_value with a global or interval window coder).
func newSkipper(id string, coders map[string]*pipepb.Coder, depth int) (skipFn, error) {
	if depth > 64 {
		return nil, fmt.Errorf("fnapi: coder %q nests more than 64 levels (cyclic?)", id)
	}
	c, ok := coders[id]
	if !ok {
		return nil, fmt.Errorf("fnapi: coder %q not found in descriptor", id)
	}
	urn := c.GetSpec().GetUrn()
	comps := c.GetComponentCoderIds()
	sub := func(want int) ([]skipFn, error) {
		if len(comps) != want {
			return nil, fmt.Errorf("fnapi: coder %q (%s) has %d components, want %d", id, urn, len(comps), want)
		}
		out := make([]skipFn, want)
		for i, cc := range comps {
			s, err := newSkipper(cc, coders, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	switch urn {
	case urnCoderBytes, urnCoderStringUTF8, urnCoderLengthPrefix:
		return skipLengthPrefixed, nil
	case urnCoderVarInt:
		return skipVarint, nil
	case urnCoderDouble:
		return skipFixed(8), nil
	case urnCoderBool:
		return skipFixed(1), nil
	case urnCoderGlobalWindow:
		return skipFixed(0), nil
	case urnCoderIntervalWindow:
		// End timestamp (8 bytes) and the span in milliseconds (varint).
		return func(b []byte) ([]byte, error) {
			if len(b) < 8 {
				return nil, errShortElement
			}
			return skipVarint(b[8:])
		}, nil
	case urnCoderKV:
		s, err := sub(2)
		if err != nil {
			return nil, err
		}
		return seq(s...), nil
	case urnCoderShardedKey:
		// The shard id is length-prefixed bytes, then the key.
		s, err := sub(1)
		if err != nil {
			return nil, err
		}
		return seq(skipLengthPrefixed, s[0]), nil
	case urnCoderNullable:
		s, err := sub(1)
		if err != nil {
			return nil, err
		}
		return func(b []byte) ([]byte, error) {
			if len(b) < 1 {
				return nil, errShortElement
			}
			if b[0] == 0 {
				return b[1:], nil
			}
			return s[0](b[1:])
		}, nil
	case urnCoderIterable:
		s, err := sub(1)
		if err != nil {
			return nil, err
		}
		return skipIterable(s[0]), nil
	case urnCoderWindowedValue:
		if len(comps) != 2 {
			return nil, fmt.Errorf("fnapi: coder %q (%s) has %d components, want 2", id, urn, len(comps))
		}
		elm, err := newSkipper(comps[0], coders, depth+1)
		if err != nil {
			return nil, err
		}
		win, err := newSkipper(comps[1], coders, depth+1)
		if err != nil {
			return nil, err
		}
		if u := coders[comps[1]].GetSpec().GetUrn(); u != urnCoderGlobalWindow && u != urnCoderIntervalWindow {
			return nil, fmt.Errorf("fnapi: window coder %q (%s) is not supported (global and interval windows only)", comps[1], u)
		}
		return skipWindowedValue(win, elm), nil
	default:
		return nil, fmt.Errorf("fnapi: coder %q (%s) cannot be split into elements by the runner; length-prefix it", id, urn)
	}
}

func seq(fs ...skipFn) skipFn {
	return func(b []byte) ([]byte, error) {
		var err error
		for _, f := range fs {
			if b, err = f(b); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
}

func skipFixed(n int) skipFn {
	return func(b []byte) ([]byte, error) {
		if len(b) < n {
			return nil, errShortElement
		}
		return b[n:], nil
	}
}

func readVarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errShortElement
	}
	return v, b[n:], nil
}

func skipVarint(b []byte) ([]byte, error) {
	_, rest, err := readVarint(b)
	return rest, err
}

func skipLengthPrefixed(b []byte) ([]byte, error) {
	l, rest, err := readVarint(b)
	if err != nil {
		return nil, err
	}
	if uint64(len(rest)) < l {
		return nil, errShortElement
	}
	return rest[l:], nil
}

// skipIterable skips a Beam iterable: a big-endian int32 count n and n
// elements, or n = -1 and blocks of (varint count, elements) ending with a
// zero count.
func skipIterable(elm skipFn) skipFn {
	return func(b []byte) ([]byte, error) {
		if len(b) < 4 {
			return nil, errShortElement
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		var err error
		if n >= 0 {
			for i := int32(0); i < n; i++ {
				if b, err = elm(b); err != nil {
					return nil, err
				}
			}
			return b, nil
		}
		if n != -1 {
			return nil, fmt.Errorf("fnapi: iterable with count %d", n)
		}
		for {
			var k uint64
			if k, b, err = readVarint(b); err != nil {
				return nil, err
			}
			if k == 0 {
				return b, nil
			}
			for i := uint64(0); i < k; i++ {
				if b, err = elm(b); err != nil {
					return nil, err
				}
			}
		}
	}
}

// skipWindowedValue skips a full windowed value: event time (8 bytes), a
// big-endian int32 window count and the windows, the pane (one byte whose high
// nibble says how many varints follow: 0, 1 or 2), then the element.
func skipWindowedValue(win, elm skipFn) skipFn {
	return func(b []byte) ([]byte, error) {
		if len(b) < 12 {
			return nil, errShortElement
		}
		n := int32(binary.BigEndian.Uint32(b[8:]))
		if n < 0 {
			return nil, fmt.Errorf("fnapi: windowed value with %d windows", n)
		}
		b = b[12:]
		var err error
		for i := int32(0); i < n; i++ {
			if b, err = win(b); err != nil {
				return nil, err
			}
		}
		if len(b) < 1 {
			return nil, errShortElement
		}
		extra := b[0] >> 4
		if extra > 2 {
			return nil, fmt.Errorf("fnapi: pane encoding %d not supported", extra)
		}
		b = b[1:]
		for i := byte(0); i < extra; i++ {
			if b, err = skipVarint(b); err != nil {
				return nil, err
			}
		}
		return elm(b)
	}
}

// splitElements cuts data, a concatenation of encoded elements, into one slice
// per element. The slices alias data.
func splitElements(skip skipFn, data []byte) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		rest, err := skip(data)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", len(out), err)
		}
		out = append(out, data[:len(data)-len(rest):len(data)-len(rest)])
		data = rest
	}
	return out, nil
}

// splitWhole is splitElements for data that may end inside an element (a
// chunk of a stream): the whole elements up to the first that does not
// split, and the bytes from there on (a malformed element stays in rest
// until the final splitElements names it).
func splitWhole(skip skipFn, data []byte) (elements [][]byte, rest []byte) {
	for len(data) > 0 {
		r, err := skip(data)
		if err != nil {
			break
		}
		elements = append(elements, data[:len(data)-len(r):len(data)-len(r)])
		data = r
	}
	return elements, data
}

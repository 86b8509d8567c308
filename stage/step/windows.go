package step

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformedElement: an element's windowed-value header could not be cut
// (ExplodeWindows).
var ErrMalformedElement = errors.New("step: malformed windowed value")

// ExplodeWindows cuts element e, encoded with Beam's full windowed value
// coder over the interval window coder, into one element per window:
//
//	timestamp (8 bytes) | window count (big-endian int32) |
//	count × (end (8 bytes) | duration in ms (varint)) | pane | value
//
// becomes count elements "timestamp | 1 | window_i | pane | value" (Beam's
// model: a value in N windows is N elements, each in one window; Java's
// WindowedValue.explodeWindows). An element in at most one window is
// returned as it is, without copying: the common case (fixed windows,
// sessions, any aggregation's output) costs a 4-byte read. The bytes are
// cut, never decoded, so the pane and value are kept byte for byte.
// Errors (wrapping ErrMalformedElement) name what is short or negative.
func ExplodeWindows(e []byte) ([][]byte, error) {
	const head = 8 + 4
	if len(e) < head {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a timestamp and a window count", ErrMalformedElement, len(e))
	}
	n := int32(binary.BigEndian.Uint32(e[8:head]))
	if n < 0 {
		return nil, fmt.Errorf("%w: window count %d", ErrMalformedElement, n)
	}
	if n <= 1 {
		return [][]byte{e}, nil
	}
	windows := make([][]byte, n)
	at := head
	for i := range windows {
		if len(e) < at+8 {
			return nil, fmt.Errorf("%w: window %d of %d cut short", ErrMalformedElement, i+1, n)
		}
		_, m := protowire.ConsumeVarint(e[at+8:])
		if m < 0 {
			return nil, fmt.Errorf("%w: window %d of %d: bad duration varint", ErrMalformedElement, i+1, n)
		}
		windows[i] = e[at : at+8+m]
		at += 8 + m
	}
	rest := e[at:]
	out := make([][]byte, n)
	for i, w := range windows {
		b := make([]byte, 0, head+len(w)+len(rest))
		b = append(b, e[:8]...)
		b = binary.BigEndian.AppendUint32(b, 1)
		b = append(b, w...)
		out[i] = append(b, rest...)
	}
	return out, nil
}

package gbk

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Window is a Beam window: the global window, or the interval [Start, End)
// (mtime.Time, ms).
type Window struct {
	Global     bool
	Start, End mtime.Time
}

// GlobalWindow is the global window.
var GlobalWindow = Window{Global: true}

// MaxTimestamp is the window's last timestamp: End-1 for an interval
// window, mtime.EndOfGlobalWindowTime for the global window (the Go SDK's
// window.GlobalWindow.MaxTimestamp; the end of time reported by a finished
// stage, mtime.MaxTimestamp, is one day later).
func (w Window) MaxTimestamp() mtime.Time {
	if w.Global {
		return mtime.EndOfGlobalWindowTime
	}
	return w.End - 1
}

// String is "global" or "[start,end)" in ms.
func (w Window) String() string {
	if w.Global {
		return "global"
	}
	return fmt.Sprintf("[%d,%d)", int64(w.Start), int64(w.End))
}

// less orders windows by max timestamp, then start: the order windows fire in.
func (w Window) less(o Window) bool {
	if w.MaxTimestamp() != o.MaxTimestamp() {
		return w.MaxTimestamp() < o.MaxTimestamp()
	}
	if w.Global != o.Global {
		return !w.Global
	}
	return w.Start < o.Start
}

// intersects reports whether interval windows w and o overlap (or touch:
// sessions [0,10) and [10,20) do not merge; Beam merges only overlapping
// proto-sessions, as in MergeOverlappingIntervalWindows).
func (w Window) intersects(o Window) bool {
	return !w.Global && !o.Global && w.Start < o.End && o.Start < w.End
}

// span is the smallest interval window covering w and o.
func (w Window) span(o Window) Window {
	return Window{Start: min(w.Start, o.Start), End: max(w.End, o.End)}
}

// windowKeyLen is the length of an encoded window in store keys.
const windowKeyLen = 17

// appendWindow appends the store-key form of w: a kind byte (0 interval,
// 1 global), then max timestamp and start, each big-endian with the sign
// bit flipped, so that keys sort in firing order.
func appendWindow(b []byte, w Window) []byte {
	kind := byte(0)
	if w.Global {
		kind = 1
	}
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, uint64(w.MaxTimestamp())^(1<<63))
	return binary.BigEndian.AppendUint64(b, uint64(w.Start)^(1<<63))
}

// parseWindow reads a window written by appendWindow.
func parseWindow(b []byte) (Window, error) {
	if len(b) < windowKeyLen {
		return Window{}, fmt.Errorf("%w: window key of %d bytes", ErrMalformed, len(b))
	}
	if b[0] == 1 {
		return GlobalWindow, nil
	}
	maxTs := mtime.Time(binary.BigEndian.Uint64(b[1:]) ^ (1 << 63))
	start := mtime.Time(binary.BigEndian.Uint64(b[9:]) ^ (1 << 63))
	return Window{Start: start, End: maxTs + 1}, nil
}

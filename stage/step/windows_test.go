package step

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
)

// windowed encodes value under the SDK's own windowed-value header.
func windowed(t *testing.T, ws []typex.Window, ts mtime.Time, pane typex.PaneInfo, value []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := exec.EncodeWindowedValueHeader(exec.MakeWindowEncoder(coder.NewIntervalWindow()), ws, ts, pane, &buf); err != nil {
		t.Fatal(err)
	}
	buf.Write(value)
	return buf.Bytes()
}

func TestExplodeWindows(t *testing.T) {
	pane := typex.PaneInfo{Timing: typex.PaneEarly, IsFirst: true, Index: 3, NonSpeculativeIndex: -1}
	value := []byte("the value, kept byte for byte")
	for _, tc := range []struct {
		name string
		ws   []typex.Window
	}{
		{"one window", []typex.Window{window.IntervalWindow{Start: 0, End: 5000}}},
		// Four sliding windows of 20 s every 5 s; a long window's duration
		// takes a multi-byte varint.
		{"sliding", []typex.Window{
			window.IntervalWindow{Start: 10_000, End: 30_000}, window.IntervalWindow{Start: 5_000, End: 25_000},
			window.IntervalWindow{Start: 0, End: 20_000}, window.IntervalWindow{Start: -5_000, End: 15_000}}},
		{"long windows", []typex.Window{window.IntervalWindow{Start: -1 << 40, End: 7}, window.IntervalWindow{Start: 1, End: 1 << 41}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := windowed(t, tc.ws, 12_345, pane, value)
			got, err := ExplodeWindows(e)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.ws) {
				t.Fatalf("%d elements, want one per window: %d", len(got), len(tc.ws))
			}
			if len(tc.ws) == 1 && &got[0][0] != &e[0] {
				t.Error("an element in one window was copied, want it as it is")
			}
			for i, g := range got {
				r := bytes.NewReader(g)
				ws, ts, p, err := exec.DecodeWindowedValueHeader(exec.MakeWindowDecoder(coder.NewIntervalWindow()), r)
				if err != nil {
					t.Fatalf("element %d: %v", i, err)
				}
				if len(ws) != 1 || !ws[0].Equals(tc.ws[i]) || ts != 12_345 || p != pane {
					t.Errorf("element %d: windows %v, timestamp %v, pane %+v; want [%v], 12345, %+v", i, ws, ts, p, tc.ws[i], pane)
				}
				if rest := g[len(g)-r.Len():]; !bytes.Equal(rest, value) {
					t.Errorf("element %d: value %q, want %q", i, rest, value)
				}
			}
		})
	}
}

func TestExplodeWindowsGlobalAndMalformed(t *testing.T) {
	var buf bytes.Buffer
	if err := exec.EncodeWindowedValueHeader(exec.MakeWindowEncoder(coder.NewGlobalWindow()), window.SingleGlobalWindow, 7, typex.NoFiringPane(), &buf); err != nil {
		t.Fatal(err)
	}
	if got, err := ExplodeWindows(buf.Bytes()); err != nil || len(got) != 1 {
		t.Errorf("global window: %d elements, %v; want 1, nil", len(got), err)
	}
	two := windowed(t, []typex.Window{window.IntervalWindow{Start: 0, End: 5}, window.IntervalWindow{Start: 1, End: 6}}, 3, typex.NoFiringPane(), nil)
	for name, e := range map[string][]byte{
		"short":            two[:10],
		"negative count":   append(append([]byte{}, two[:8]...), 0xff, 0xff, 0xff, 0xff),
		"windows cut":      two[:12+8+1+4],
		"duration cut off": append(append([]byte{}, two[:12+8]...), 0x80),
	} {
		if _, err := ExplodeWindows(e); !errors.Is(err, ErrMalformedElement) {
			t.Errorf("%s: %v, want ErrMalformedElement", name, err)
		}
	}
}

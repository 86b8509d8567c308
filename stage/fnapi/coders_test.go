package fnapi

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// protoCoders marshals c with the SDK and returns its id and the coder protos.
func protoCoders(t testing.TB, c *coder.Coder) (string, map[string]*pipepb.Coder) {
	t.Helper()
	cm := graphx.NewCoderMarshaller()
	id, err := cm.Add(c)
	if err != nil {
		t.Fatal(err)
	}
	return id, cm.Build()
}

// The splitter cuts a stream encoded by the SDK's own encoders into exactly
// the elements that were encoded, for every header shape: both window coders,
// several windows, the three pane encodings, negative timestamps.
func TestSplitterMatchesSDKEncoding(t *testing.T) {
	elm := coder.NewKV([]*coder.Coder{coder.NewString(), coder.NewI(coder.NewN(coder.NewDouble()))})
	iw := func(s, e int64) typex.Window { return window.IntervalWindow{Start: mtime.Time(s), End: mtime.Time(e)} }
	panes := []typex.PaneInfo{
		typex.NoFiringPane(),
		{Timing: typex.PaneEarly, IsFirst: true, Index: 3, NonSpeculativeIndex: -1},
		{Timing: typex.PaneLate, IsLast: true, Index: 7, NonSpeculativeIndex: 2},
	}
	for _, tc := range []struct {
		name string
		wc   *coder.WindowCoder
		wins [][]typex.Window
	}{
		{"global", coder.NewGlobalWindow(), [][]typex.Window{window.SingleGlobalWindow}},
		{"interval", coder.NewIntervalWindow(), [][]typex.Window{{iw(0, 10)}, {iw(-500, 300), iw(1<<40, 1<<41)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wv := coder.NewW(elm, tc.wc)
			id, protos := protoCoders(t, wv)
			skip, err := newSkipper(id, protos, 0)
			if err != nil {
				t.Fatal(err)
			}
			enc := exec.MakeElementEncoder(wv)
			var want [][]byte
			var stream []byte
			i := 0
			for _, ws := range tc.wins {
				for _, p := range panes {
					for _, vals := range [][]any{nil, {1.5}, {nil, 2.5, nil}} {
						var buf bytes.Buffer
						fv := &exec.FullValue{Elm: "key", Elm2: vals, Timestamp: mtime.Time(int64(i*1000) - 5000), Windows: ws, Pane: p}
						if err := enc.Encode(fv, &buf); err != nil {
							t.Fatal(err)
						}
						want = append(want, buf.Bytes())
						stream = append(stream, buf.Bytes()...)
						i++
					}
				}
			}
			got, err := splitElements(skip, stream)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("split into %d elements, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("element %d: % x, want % x", i, got[i], want[i])
				}
			}
			if _, err := splitElements(skip, stream[:len(stream)-1]); !errors.Is(err, errShortElement) {
				t.Errorf("truncated stream: %v, want errShortElement", err)
			}
		})
	}
}

// An iterable of unknown length (count -1, then blocks ending with a zero
// count) is skipped whole.
func TestSplitterIterableOfUnknownLength(t *testing.T) {
	id, protos := protoCoders(t, coder.NewI(coder.NewVarInt()))
	skip, err := newSkipper(id, protos, 0)
	if err != nil {
		t.Fatal(err)
	}
	one := []byte{0xff, 0xff, 0xff, 0xff, 2, 1, 2, 1, 3, 0}
	got, err := splitElements(skip, append(append([]byte{}, one...), one...))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], one) || !bytes.Equal(got[1], one) {
		t.Errorf("got %v, want two copies of % x", got, one)
	}
}

func TestWireSafeLengthPrefixesUnknownCoders(t *testing.T) {
	base := map[string]*pipepb.Coder{
		"s":   {Spec: &pipepb.FunctionSpec{Urn: urnCoderStringUTF8}},
		"row": {Spec: &pipepb.FunctionSpec{Urn: "beam:coder:row:v1"}},
		"kv":  {Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{"s", "row"}},
		"it":  {Spec: &pipepb.FunctionSpec{Urn: urnCoderIterable}, ComponentCoderIds: []string{"kv"}},
		"lp":  {Spec: &pipepb.FunctionSpec{Urn: urnCoderLengthPrefix}, ComponentCoderIds: []string{"row"}},
		"kvs": {Spec: &pipepb.FunctionSpec{Urn: urnCoderKV}, ComponentCoderIds: []string{"s", "s"}},
	}
	cs := &coderSet{base: base, added: map[string]*pipepb.Coder{}}
	for _, tc := range []struct{ in, want string }{
		{"s", "s"}, {"lp", "lp"}, {"kvs", "kvs"}, {"row", "row_lp"}, {"it", "it_wire"}, {"it", "it_wire"},
	} {
		got, err := cs.wireSafe(tc.in, 0)
		if err != nil || got != tc.want {
			t.Errorf("wireSafe(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	// it_wire = iterable(kv_wire), kv_wire = kv(s, row_lp), row_lp = length_prefix(row).
	want := map[string]string{"it_wire": urnCoderIterable + "[kv_wire]", "kv_wire": urnCoderKV + "[s row_lp]", "row_lp": urnCoderLengthPrefix + "[row]"}
	if len(cs.added) != len(want) {
		t.Errorf("added %d coders, want %d: %v", len(cs.added), len(want), cs.added)
	}
	for id, w := range want {
		c := cs.added[id]
		if got := c.GetSpec().GetUrn() + "[" + join(c.GetComponentCoderIds()) + "]"; got != w {
			t.Errorf("coder %s = %s, want %s", id, got, w)
		}
	}
	if _, err := cs.wireSafe("missing", 0); err == nil {
		t.Error("wireSafe of a missing coder succeeded")
	}
	// Everything wireSafe returns can be split.
	all := map[string]*pipepb.Coder{}
	for id, c := range base {
		all[id] = c
	}
	for id, c := range cs.added {
		all[id] = c
	}
	if _, err := newSkipper("it_wire", all, 0); err != nil {
		t.Errorf("newSkipper(it_wire): %v", err)
	}
	if _, err := newSkipper("it", all, 0); err == nil {
		t.Error("newSkipper of a coder containing a bare row coder succeeded")
	}
}

func join(xs []string) string {
	var b bytes.Buffer
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	return b.String()
}

// Malformed output from outside the process is an error, never a panic.
func FuzzSplitElements(f *testing.F) {
	wv := coder.NewW(coder.NewKV([]*coder.Coder{coder.NewString(), coder.NewI(coder.NewN(coder.NewVarInt()))}), coder.NewIntervalWindow())
	id, protos := protoCoders(f, wv)
	skip, err := newSkipper(id, protos, 0)
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	fv := &exec.FullValue{Elm: "k", Elm2: []any{int64(1), nil}, Timestamp: 7, Windows: []typex.Window{window.IntervalWindow{Start: 0, End: 10}}, Pane: typex.NoFiringPane()}
	if err := exec.MakeElementEncoder(wv).Encode(fv, &buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		elms, err := splitElements(skip, data)
		if err != nil {
			return
		}
		n := 0
		for _, e := range elms {
			n += len(e)
		}
		if n != len(data) {
			t.Fatalf("elements cover %d bytes of %d", n, len(data))
		}
	})
}

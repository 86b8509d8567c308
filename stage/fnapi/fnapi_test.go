package fnapi

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// upperSplitFn upper-cases strings and emits them to even (even length) or
// odd (odd length). It fails on the element "bad" and counts elements in the
// user counter fnapi_test/elements.
type upperSplitFn struct{}

var elementsCounter = beam.NewCounter("fnapi_test", "elements")

func (*upperSplitFn) ProcessElement(ctx context.Context, s string, even, odd func(string)) error {
	if s == "bad" {
		return fmt.Errorf("upperSplitFn refuses %q", s)
	}
	elementsCounter.Inc(ctx, 1)
	if len(s)%2 == 0 {
		even(strings.ToUpper(s))
	} else {
		odd(strings.ToUpper(s))
	}
	return nil
}

func discard(string) {}

func init() {
	register.DoFn4x1[context.Context, string, func(string), func(string), error](&upperSplitFn{})
	register.Emitter1[string]()
	register.Function1x0(discard)
}

// shared is the one Server and harness most tests use, started by TestMain.
var shared *Server

func TestMain(m *testing.M) {
	flag.Parse()
	beam.Init()
	os.Exit(func() int {
		s, err := NewServer(Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Close()
		h, err := s.StartHarness(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer h.Stop()
		shared = s
		return m.Run()
	}())
}

// splitPipeline is Create -> upperSplitFn -> (even, odd), with even read by a
// discard ParDo outside the stage.
type splitPipeline struct {
	comps     *pipepb.Components
	pardo     string // the upperSplitFn transform id
	input     string // its input pcollection
	even, odd string // its output pcollections
}

func buildSplitPipeline(t *testing.T) splitPipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	in := beam.Create(s, "seed")
	even, odd := beam.ParDo2(s, &upperSplitFn{}, in)
	beam.ParDo0(s, discard, even)
	_ = odd
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	sp := splitPipeline{comps: pipe.GetComponents()}
	for id, tr := range sp.comps.GetTransforms() {
		if len(tr.GetSubtransforms()) == 0 && strings.Contains(tr.GetUniqueName(), "upperSplitFn") {
			sp.pardo = id
		}
	}
	if sp.pardo == "" {
		t.Fatal("upperSplitFn transform not found")
	}
	tr := sp.comps.GetTransforms()[sp.pardo]
	for _, pid := range tr.GetInputs() {
		sp.input = pid
	}
	sp.even, sp.odd = tr.GetOutputs()["i0"], tr.GetOutputs()["i1"]
	if sp.even == "" || sp.odd == "" {
		t.Fatalf("outputs of %s: %v", sp.pardo, tr.GetOutputs())
	}
	return sp
}

// registerSplitStage builds and registers the upperSplitFn stage as id.
func registerSplitStage(t *testing.T, s *Server, id string) (splitPipeline, *Stage) {
	t.Helper()
	sp := buildSplitPipeline(t)
	st, err := BuildStage(sp.comps, StageSpec{ID: id, Transforms: []string{sp.pardo}, Input: sp.input, Outputs: []string{sp.even, sp.odd}}, s.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.RegisterStage(ctx, st.Descriptor); err != nil {
		t.Fatal(err)
	}
	return sp, st
}

// wireCoder is the SDK coder of a stage's wire coder for pcollection pid.
func wireCoder(t *testing.T, st *Stage, pid string) *coder.Coder {
	t.Helper()
	c, err := graphx.NewCoderUnmarshaller(st.Descriptor.GetCoders()).Coder(st.WireCoders[pid])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// elm is a decoded windowed string in the global window.
type elm struct {
	V  string
	Ts mtime.Time
}

func encodeAll(t *testing.T, c *coder.Coder, es []elm) [][]byte {
	t.Helper()
	enc := exec.MakeElementEncoder(c)
	var out [][]byte
	for _, e := range es {
		var buf bytes.Buffer
		fv := &exec.FullValue{Elm: e.V, Timestamp: e.Ts, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}
		if err := enc.Encode(fv, &buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}

func decodeAll(t *testing.T, c *coder.Coder, bs [][]byte) []elm {
	t.Helper()
	dec := exec.MakeElementDecoder(c)
	out := []elm{}
	for i, b := range bs {
		r := bytes.NewReader(b)
		fv, err := dec.Decode(r)
		if err != nil {
			t.Fatalf("element %d: %v", i, err)
		}
		if r.Len() != 0 {
			t.Fatalf("element %d: %d bytes left over", i, r.Len())
		}
		if !reflect.DeepEqual(fv.Windows, window.SingleGlobalWindow) {
			t.Fatalf("element %d: windows %v, want the global window", i, fv.Windows)
		}
		out = append(out, elm{V: fv.Elm.(string), Ts: fv.Timestamp})
	}
	return out
}

func userCounter(mis []*pipepb.MonitoringInfo, ns, name string) (int64, bool) {
	for _, mi := range mis {
		if mi.GetUrn() != "beam:metric:user:sum_int64:v1" {
			continue
		}
		if mi.GetLabels()["NAMESPACE"] != ns || mi.GetLabels()["NAME"] != name {
			continue
		}
		v, err := coder.DecodeVarInt(bytes.NewReader(mi.GetPayload()))
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

func TestProcessBundleSplitsToTwoOutputs(t *testing.T) {
	sp, st := registerSplitStage(t, shared, "split-two-outputs")
	in := []elm{{"a", 1000}, {"bb", 1001}, {"ccc", 1002}, {"dddd", 1003}, {"", 1004}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{
		st.Source: encodeAll(t, wireCoder(t, st, sp.input), in),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 2 {
		t.Fatalf("outputs for %d sinks, want 2: %v", len(res.Outputs), res.Outputs)
	}
	gotEven := decodeAll(t, wireCoder(t, st, sp.even), res.Outputs[st.Sinks[sp.even]])
	gotOdd := decodeAll(t, wireCoder(t, st, sp.odd), res.Outputs[st.Sinks[sp.odd]])
	wantEven := []elm{{"BB", 1001}, {"DDDD", 1003}, {"", 1004}}
	wantOdd := []elm{{"A", 1000}, {"CCC", 1002}}
	if !reflect.DeepEqual(gotEven, wantEven) {
		t.Errorf("even = %v, want %v", gotEven, wantEven)
	}
	if !reflect.DeepEqual(gotOdd, wantOdd) {
		t.Errorf("odd = %v, want %v", gotOdd, wantOdd)
	}
	if v, ok := userCounter(res.MonitoringInfos, "fnapi_test", "elements"); !ok || v != 5 {
		t.Errorf("user counter fnapi_test/elements = %v (found %v), want 5", v, ok)
	}
}

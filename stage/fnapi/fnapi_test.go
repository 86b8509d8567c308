package fnapi

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/harness"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/hooks"
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
		s, err := NewServer(Options{Logger: slog.New(captureHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})})})
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

func TestDoFnErrorFailsOnlyItsBundle(t *testing.T) {
	sp, st := registerSplitStage(t, shared, "split-error")
	c := wireCoder(t, st, sp.input)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{
		st.Source: encodeAll(t, c, []elm{{"ok", 1}, {"bad", 2}, {"ok", 3}}),
	})
	if err == nil {
		t.Fatal("bundle with a failing element succeeded")
	}
	t.Logf("error: %v", err)
	name := st.Descriptor.GetTransforms()[sp.pardo].GetUniqueName()
	for _, want := range []string{`stage "split-error"`, `upperSplitFn refuses "bad"`, name} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	// The server and harness keep working: the next bundle of the same stage
	// succeeds.
	res, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{
		st.Source: encodeAll(t, c, []elm{{"xy", 4}}),
	})
	if err != nil {
		t.Fatalf("bundle after a failed one: %v", err)
	}
	if got := decodeAll(t, wireCoder(t, st, sp.even), res.Outputs[st.Sinks[sp.even]]); !reflect.DeepEqual(got, []elm{{"XY", 4}}) {
		t.Errorf("even = %v, want [XY@4]", got)
	}
	if got := res.Outputs[st.Sinks[sp.odd]]; len(got) != 0 {
		t.Errorf("odd has %d elements, want none", len(got))
	}
}

func TestConcurrentBundles(t *testing.T) {
	sp, st := registerSplitStage(t, shared, "split-concurrent")
	c := wireCoder(t, st, sp.input)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bundle i sends i+1 copies of a string of length i, at times i*100+j.
			var in []elm
			for j := 0; j <= i; j++ {
				in = append(in, elm{strings.Repeat("z", i), mtime.Time(i*100 + j)})
			}
			res, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, c, in)})
			if err != nil {
				errs[i] = err
				return
			}
			full, empty := sp.even, sp.odd
			if i%2 == 1 {
				full, empty = sp.odd, sp.even
			}
			var want []elm
			for _, e := range in {
				want = append(want, elm{strings.ToUpper(e.V), e.Ts})
			}
			if got := decodeAll(t, wireCoder(t, st, full), res.Outputs[st.Sinks[full]]); !reflect.DeepEqual(got, want) {
				errs[i] = fmt.Errorf("bundle %d: got %v, want %v", i, got, want)
			}
			if got := res.Outputs[st.Sinks[empty]]; len(got) != 0 {
				errs[i] = fmt.Errorf("bundle %d: %d elements on the other output", i, len(got))
			}
			if v, _ := userCounter(res.MonitoringInfos, "fnapi_test", "elements"); v != int64(i+1) {
				errs[i] = fmt.Errorf("bundle %d: counter %d, want %d", i, v, i+1)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestLargeBundleIsChunked(t *testing.T) {
	sp, st := registerSplitStage(t, shared, "split-large")
	c := wireCoder(t, st, sp.input)
	// 3000 elements of 1000 bytes: three Elements messages of input.
	var in, want []elm
	for i := 0; i < 3000; i++ {
		v := strings.Repeat(string(rune('a'+i%26)), 1000)
		in = append(in, elm{v, mtime.Time(i)})
		want = append(want, elm{strings.ToUpper(v), mtime.Time(i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, c, in)})
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeAll(t, wireCoder(t, st, sp.even), res.Outputs[st.Sinks[sp.even]]); !reflect.DeepEqual(got, want) {
		t.Errorf("even: got %d elements, want %d (or contents differ)", len(got), len(want))
	}
}

func TestBadCalls(t *testing.T) {
	sp, st := registerSplitStage(t, shared, "split-bad-calls")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := shared.ProcessBundle(ctx, "no-such-stage", nil)
	if !errors.Is(err, ErrUnknownDescriptor) || !strings.Contains(err.Error(), "no-such-stage") {
		t.Errorf("unknown descriptor: %v", err)
	}
	_, err = shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{"nope": nil})
	if err == nil || !strings.Contains(err.Error(), `input "nope" is not a data source`) {
		t.Errorf("unknown input transform: %v", err)
	}
	if err := shared.RegisterStage(ctx, st.Descriptor); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate registration: %v", err)
	}
	other, err := BuildStage(sp.comps, StageSpec{ID: "elsewhere", Transforms: []string{sp.pardo}, Input: sp.input, Outputs: []string{sp.even, sp.odd}}, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := shared.RegisterStage(ctx, other.Descriptor); err == nil || !strings.Contains(err.Error(), "not this server's endpoint") {
		t.Errorf("descriptor for another endpoint: %v", err)
	}
	// An empty bundle still completes: every sink sends is_last.
	res, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 2 || len(res.Outputs[st.Sinks[sp.even]]) != 0 || len(res.Outputs[st.Sinks[sp.odd]]) != 0 {
		t.Errorf("empty bundle outputs: %v", res.Outputs)
	}
}

func TestHarnessGone(t *testing.T) {
	// The Beam log package's logger is process-global: a second harness with
	// remote logging would take it from the shared one for good.
	hooks.DisableHook(harness.DefaultRemoteLoggingHook)
	defer hooks.EnableHook(harness.DefaultRemoteLoggingHook)
	s, err := NewServer(Options{WorkerID: "gone-worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := s.StartHarness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartHarness(ctx); !errors.Is(err, errHarnessStarted) {
		t.Errorf("second harness: %v", err)
	}
	sp, st := registerSplitStage(t, s, "split-gone")
	if _, err := s.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, wireCoder(t, st, sp.input), []elm{{"a", 1}})}); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	_, err = s.ProcessBundle(ctx, st.Descriptor.GetId(), nil)
	if !errors.Is(err, ErrHarnessGone) {
		t.Errorf("bundle after the harness stopped: %v, want ErrHarnessGone", err)
	}
}

func TestCloseStopsHarness(t *testing.T) {
	hooks.DisableHook(harness.DefaultRemoteLoggingHook) // see TestHarnessGone
	defer hooks.EnableHook(harness.DefaultRemoteLoggingHook)
	s, err := NewServer(Options{WorkerID: "close-worker"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := s.StartHarness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	select {
	case <-h.Done():
	default:
		t.Fatal("harness still running after Close")
	}
	if err := h.Err(); err != nil {
		t.Errorf("harness error after Close: %v", err)
	}
	sp := buildSplitPipeline(t)
	st, err := BuildStage(sp.comps, StageSpec{ID: "after-close", Transforms: []string{sp.pardo}, Input: sp.input, Outputs: []string{sp.even, sp.odd}}, s.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterStage(ctx, st.Descriptor); !errors.Is(err, ErrHarnessGone) {
		t.Errorf("RegisterStage after Close: %v, want ErrHarnessGone", err)
	}
}

func TestCancelledBundleLeavesServerUsable(t *testing.T) {
	sp, st := registerSplitStage(t, shared, "split-cancel")
	c := wireCoder(t, st, sp.input)
	var in []elm
	for i := 0; i < 20000; i++ {
		in = append(in, elm{strings.Repeat("q", 500), mtime.Time(i)})
	}
	big := encodeAll(t, c, in)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: big}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bundle with an expired context: %v, want DeadlineExceeded", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	res, err := shared.ProcessBundle(ctx2, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, c, []elm{{"ok", 1}})})
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeAll(t, wireCoder(t, st, sp.even), res.Outputs[st.Sinks[sp.even]]); fmt.Sprint(got) != "[{OK 1}]" {
		t.Errorf("even = %v", got)
	}
}

// TestOnOutputStreams: with BundleOptions.OnOutput, a bundle's outputs
// reach the caller in several calls while it runs (about streamBytes
// each), whole elements in order, and Result.Outputs is empty; an error
// from OnOutput fails the bundle with it and leaves the server usable.
func TestOnOutputStreams(t *testing.T) {
	sp, st := registerSplitStage(t, shared, "split-streamed")
	c := wireCoder(t, st, sp.input)
	// 20 000 elements of 1000 or 999 bytes: about 10 MB to each sink, which
	// the Go harness sends in chunks of 4 MB (harness.chunkSize).
	var in, wantEven, wantOdd []elm
	for i := 0; i < 20000; i++ {
		v := strings.Repeat(string(rune('a'+i%26)), 1000-i%2)
		in = append(in, elm{v, mtime.Time(i)})
		if i%2 == 0 {
			wantEven = append(wantEven, elm{strings.ToUpper(v), mtime.Time(i)})
		} else {
			wantOdd = append(wantOdd, elm{strings.ToUpper(v), mtime.Time(i)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := map[string][][]byte{}
	calls := map[string]int{}
	opt := BundleOptions{OnOutput: func(sink string, es [][]byte) error {
		calls[sink]++
		got[sink] = append(got[sink], es...)
		return nil
	}}
	res, err := shared.RunBundleWith(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, c, in)}, nil, opt)
	if err != nil {
		t.Fatal(err)
	}
	for sink, es := range res.Outputs {
		if len(es) > 0 {
			t.Errorf("Result.Outputs[%s] holds %d elements: they should have gone to OnOutput", sink, len(es))
		}
	}
	even, odd := st.Sinks[sp.even], st.Sinks[sp.odd]
	if calls[even] < 2 || calls[odd] < 2 {
		t.Errorf("OnOutput calls: even %d, odd %d; want several each (10 MB in chunks of 4 MB)", calls[even], calls[odd])
	}
	if g := decodeAll(t, wireCoder(t, st, sp.even), got[even]); !reflect.DeepEqual(g, wantEven) {
		t.Errorf("even: got %d elements, want %d (or contents differ)", len(g), len(wantEven))
	}
	if g := decodeAll(t, wireCoder(t, st, sp.odd), got[odd]); !reflect.DeepEqual(g, wantOdd) {
		t.Errorf("odd: got %d elements, want %d (or contents differ)", len(g), len(wantOdd))
	}

	refused := errors.New("the transaction is gone")
	opt.OnOutput = func(string, [][]byte) error { return refused }
	if _, err := shared.RunBundleWith(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, c, in)}, nil, opt); !errors.Is(err, refused) {
		t.Fatalf("OnOutput's error: bundle returned %v, want it to wrap %v", err, refused)
	}
	res, err = shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{st.Source: encodeAll(t, c, in[:2])})
	if err != nil {
		t.Fatalf("the next bundle: %v", err)
	}
	if n := len(res.Outputs[even]) + len(res.Outputs[odd]); n != 2 {
		t.Errorf("the next bundle gave %d elements, want 2", n)
	}
}

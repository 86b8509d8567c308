package fnapi

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/protobuf/proto"
)

func strLen(s string) int { return len(s) }

func toKV(s string) (string, int) { return s, len(s) }

// logFn logs each element through the Beam log package and passes it on.
func logFn(ctx context.Context, s string) string {
	log.Infof(ctx, "logFn saw %s", s)
	return s
}

// countStateFn keeps a count per key in user state.
type countStateFn struct {
	Seen state.Value[int]
}

func (f *countStateFn) ProcessElement(p state.Provider, k string, v int, emit func(string)) error {
	n, _, err := f.Seen.Read(p)
	if err != nil {
		return err
	}
	emit(fmt.Sprintf("%s=%d", k, n+v))
	return f.Seen.Write(p, n+v)
}

func init() {
	register.Function1x1(strLen)
	register.Function1x2(toKV)
	register.Function2x1(logFn)
	register.DoFn4x1[state.Provider, string, int, func(string), error](&countStateFn{})
}

func marshal(t testing.TB, p *beam.Pipeline) *pipepb.Components {
	t.Helper()
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	return pipe.GetComponents()
}

// leaf finds the one leaf transform whose unique name contains name.
func leaf(t *testing.T, comps *pipepb.Components, name string) (string, *pipepb.PTransform) {
	t.Helper()
	var id string
	for tid, tr := range comps.GetTransforms() {
		if len(tr.GetSubtransforms()) == 0 && strings.Contains(tr.GetUniqueName(), name) {
			if id != "" {
				t.Fatalf("two leaf transforms named like %q", name)
			}
			id = tid
		}
	}
	if id == "" {
		t.Fatalf("no leaf transform named like %q", name)
	}
	return id, comps.GetTransforms()[id]
}

func only(m map[string]string) string {
	for _, v := range m {
		return v
	}
	return ""
}

func TestFusedChain(t *testing.T) {
	// Create -> upperSplitFn -(even)-> strLen; the stage is upperSplitFn and
	// strLen fused, its outputs odd strings and the lengths of even ones.
	p, s := beam.NewPipelineWithRoot()
	even, odd := beam.ParDo2(s, &upperSplitFn{}, beam.Create(s, "seed"))
	lens := beam.ParDo(s, strLen, even)
	_, _ = odd, lens
	comps := marshal(t, p)
	split, splitT := leaf(t, comps, "upperSplitFn")
	length, lengthT := leaf(t, comps, "strLen")
	in, oddID, lensID := only(splitT.GetInputs()), splitT.GetOutputs()["i1"], only(lengthT.GetOutputs())

	st, err := BuildStage(comps, StageSpec{ID: "chain", Transforms: []string{length, split}, Input: in, Outputs: []string{oddID, lensID}}, shared.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.RegisterStage(ctx, st.Descriptor); err != nil {
		t.Fatal(err)
	}
	res, err := shared.ProcessBundle(ctx, "chain", map[string][][]byte{
		st.Source: encodeAll(t, wireCoder(t, st, in), []elm{{"ab", 10}, {"abc", 11}, {"abcd", 12}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeAll(t, wireCoder(t, st, oddID), res.Outputs[st.Sinks[oddID]]); fmt.Sprint(got) != "[{ABC 11}]" {
		t.Errorf("odd = %v, want [{ABC 11}]", got)
	}
	dec := exec.MakeElementDecoder(wireCoder(t, st, lensID))
	var got []string
	for _, b := range res.Outputs[st.Sinks[lensID]] {
		fv, err := dec.Decode(strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v@%d", fv.Elm, fv.Timestamp))
	}
	if fmt.Sprint(got) != "[2@10 4@12]" {
		t.Errorf("lens = %v, want [2@10 4@12]", got)
	}
}

// TestUnregisteredUserStateGetsAClearError: a stateful transform whose
// UserState is not registered fails its bundle with a message naming it.
func TestUnregisteredUserStateGetsAClearError(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kvs := beam.ParDo(s, toKV, beam.Create(s, "seed"))
	out := beam.ParDo(s, &countStateFn{}, kvs)
	_ = out
	comps := marshal(t, p)
	id, tr := leaf(t, comps, "countStateFn")
	st, err := BuildStage(comps, StageSpec{ID: "stateful", Transforms: []string{id}, Input: only(tr.GetInputs()), Outputs: []string{only(tr.GetOutputs())}}, shared.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.RegisterStage(ctx, st.Descriptor); err != nil {
		t.Fatal(err)
	}
	enc := exec.MakeElementEncoder(wireCoder(t, st, only(tr.GetInputs())))
	var buf strings.Builder
	if err := enc.Encode(&exec.FullValue{Elm: "k", Elm2: 1, Timestamp: mtime.Time(5), Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}, &buf); err != nil {
		t.Fatal(err)
	}
	_, err = shared.ProcessBundle(ctx, "stateful", map[string][][]byte{st.Source: {[]byte(buf.String())}})
	if err == nil || !strings.Contains(err.Error(), "no user state is registered for the transform") {
		t.Fatalf("stateful bundle: %v, want the state service's error", err)
	}
}

// captured holds the records of the shared server's logger.
var captured struct {
	sync.Mutex
	recs []slog.Record
}

type captureHandler struct{ slog.Handler }

func (h captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h captureHandler) Handle(ctx context.Context, r slog.Record) error {
	captured.Lock()
	captured.recs = append(captured.recs, r.Clone())
	captured.Unlock()
	if h.Handler.Enabled(ctx, r.Level) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return captureAttrs{h, as}
}

func (h captureHandler) WithGroup(string) slog.Handler { return h }

// captureAttrs keeps the logger's With attributes on captured records.
type captureAttrs struct {
	captureHandler
	attrs []slog.Attr
}

func (h captureAttrs) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	return h.captureHandler.Handle(ctx, r)
}

func TestHarnessLogsReachSlog(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	out := beam.ParDo(s, logFn, beam.Create(s, "seed"))
	_ = out
	comps := marshal(t, p)
	id, tr := leaf(t, comps, "logFn")
	st, err := BuildStage(comps, StageSpec{ID: "logging", Transforms: []string{id}, Input: only(tr.GetInputs()), Outputs: []string{only(tr.GetOutputs())}}, shared.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.RegisterStage(ctx, st.Descriptor); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.ProcessBundle(ctx, "logging", map[string][][]byte{
		st.Source: encodeAll(t, wireCoder(t, st, only(tr.GetInputs())), []elm{{"hello-log", 1}}),
	}); err != nil {
		t.Fatal(err)
	}
	// Log entries travel asynchronously on their own stream.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		captured.Lock()
		for _, r := range captured.recs {
			if !strings.Contains(r.Message, "logFn saw hello-log") {
				continue
			}
			attrs := map[string]string{}
			r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
			captured.Unlock()
			if r.Level != slog.LevelInfo || !strings.HasPrefix(attrs["instruction"], "inst-") || attrs["transform"] != id || attrs["worker"] != shared.WorkerID() {
				t.Errorf("record %q level %v attrs %v, want INFO with instruction, transform %q, worker", r.Message, r.Level, attrs, id)
			}
			return
		}
		captured.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("the harness's log entry never reached slog")
}

func TestBuildStageRefuses(t *testing.T) {
	sp := buildSplitPipeline(t)
	discardID, _ := leaf(t, sp.comps, "discard")
	var impulse string
	for tid, tr := range sp.comps.GetTransforms() {
		if tr.GetSpec().GetUrn() == "beam:transform:impulse:v1" {
			impulse = tid
		}
	}
	withPayload := func(edit func(*pipepb.ParDoPayload)) *pipepb.Components {
		c := proto.Clone(sp.comps).(*pipepb.Components)
		tr := c.GetTransforms()[sp.pardo]
		pd := &pipepb.ParDoPayload{}
		if err := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); err != nil {
			t.Fatal(err)
		}
		edit(pd)
		b, err := proto.Marshal(pd)
		if err != nil {
			t.Fatal(err)
		}
		tr.GetSpec().Payload = b
		return c
	}
	both := []string{sp.even, sp.odd}
	for _, tc := range []struct {
		name  string
		comps *pipepb.Components
		spec  StageSpec
		want  string
	}{
		{"escaping pcollection", sp.comps, StageSpec{ID: "x", Transforms: []string{sp.pardo}, Input: sp.input, Outputs: []string{sp.odd}},
			fmt.Sprintf("pcollection %q made in the stage is read by transform %q outside it", sp.even, discardID)},
		{"unknown transform", sp.comps, StageSpec{ID: "x", Transforms: []string{"nope"}, Input: sp.input}, `transform "nope" not found`},
		{"unknown input", sp.comps, StageSpec{ID: "x", Transforms: []string{sp.pardo}, Input: "nope"}, `input pcollection "nope" not found`},
		{"input made inside", sp.comps, StageSpec{ID: "x", Transforms: []string{sp.pardo, discardID}, Input: sp.even, Outputs: []string{sp.odd}}, "is produced inside the stage"},
		{"output not made", sp.comps, StageSpec{ID: "x", Transforms: []string{sp.pardo}, Input: sp.input, Outputs: []string{sp.even, sp.odd, sp.input}}, "is not produced by a transform of the stage"},
		{"runner transform", sp.comps, StageSpec{ID: "x", Transforms: []string{impulse}, Input: sp.input}, "is not executed by the SDK"},
		{"foreign input", sp.comps, StageSpec{ID: "x", Transforms: []string{discardID}, Input: sp.input}, "which is neither the stage input nor made in the stage"},
		{"side input", withPayload(func(pd *pipepb.ParDoPayload) { pd.SideInputs = map[string]*pipepb.SideInput{"s": {}} }),
			StageSpec{ID: "x", Transforms: []string{sp.pardo}, Input: sp.input, Outputs: both}, `side input "s": access pattern "" not supported`},
		{"timer family without a timer coder", withPayload(func(pd *pipepb.ParDoPayload) {
			pd.TimerFamilySpecs = map[string]*pipepb.TimerFamilySpec{"t": {}}
		}), StageSpec{ID: "x", Transforms: []string{sp.pardo}, Input: sp.input, Outputs: both}, `timer family "t": coder "" is not a timer coder`},
		{"splittable without its restriction coder", withPayload(func(pd *pipepb.ParDoPayload) { pd.RestrictionCoderId = "nope" }),
			StageSpec{ID: "x", Transforms: []string{sp.pardo}, Input: sp.input, Outputs: both}, `restriction coder "nope" is not in the pipeline`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildStage(tc.comps, tc.spec, "127.0.0.1:1")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

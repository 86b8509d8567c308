package fnapi

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/protobuf/proto"
)

// offsetFn is a bounded splittable DoFn over the offset range [0, len(s)) of
// each string s: its initial restriction is split into pieces of 3 offsets,
// and each claimed offset i is emitted as "s@i". It counts claimed offsets in
// the user counter fnapi_test/offsets.
type offsetFn struct{}

var offsetsCounter = beam.NewCounter("fnapi_test", "offsets")

func (*offsetFn) CreateInitialRestriction(s string) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: int64(len(s))}
}

func (*offsetFn) SplitRestriction(_ string, r offsetrange.Restriction) []offsetrange.Restriction {
	return r.SizedSplits(3)
}

func (*offsetFn) RestrictionSize(_ string, r offsetrange.Restriction) float64 { return r.Size() }

func (*offsetFn) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}

func (*offsetFn) ProcessElement(ctx context.Context, rt *sdf.LockRTracker, s string, emit func(string)) {
	r := rt.GetRestriction().(offsetrange.Restriction)
	for i := r.Start; rt.TryClaim(i); i++ {
		offsetsCounter.Inc(ctx, 1)
		emit(fmt.Sprintf("%s@%d", s, i))
	}
}

// resumeFn is a splittable DoFn over [0, len(s)) that claims at most two
// offsets per call, emitting "s@i", and then asks to be resumed after 5 ms:
// it self-checkpoints.
type resumeFn struct{}

func (*resumeFn) CreateInitialRestriction(s string) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: int64(len(s))}
}

func (*resumeFn) SplitRestriction(_ string, r offsetrange.Restriction) []offsetrange.Restriction {
	return []offsetrange.Restriction{r}
}

func (*resumeFn) RestrictionSize(_ string, r offsetrange.Restriction) float64 { return r.Size() }

func (*resumeFn) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}

func (*resumeFn) ProcessElement(rt *sdf.LockRTracker, s string, emit func(string)) sdf.ProcessContinuation {
	r := rt.GetRestriction().(offsetrange.Restriction)
	for i := r.Start; i < r.Start+2; i++ {
		if !rt.TryClaim(i) {
			return sdf.StopProcessing()
		}
		emit(fmt.Sprintf("%s@%d", s, i))
	}
	return sdf.ResumeProcessingIn(5 * time.Millisecond)
}

func init() {
	register.DoFn4x0[context.Context, *sdf.LockRTracker, string, func(string)](&offsetFn{})
	register.DoFn3x1[*sdf.LockRTracker, string, func(string), sdf.ProcessContinuation](&resumeFn{})
	register.Function1x1(strings.ToUpper)
}

// sdfPipeline is Create -> [ToUpper ->] dofn, the splittable DoFn's
// output being the pipeline's last PCollection.
type sdfPipeline struct {
	comps      *pipepb.Components
	create     string   // the Create's output: a stage input
	transforms []string // [ToUpper,] the splittable ParDo
	sdf        string   // the splittable ParDo's id
	output     string   // its output
}

func buildSDFPipeline(t *testing.T, dofn any, upper bool) sdfPipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	in := beam.Create(s, "seed")
	col := in
	if upper {
		col = beam.ParDo(s, strings.ToUpper, col)
	}
	beam.ParDo(s, dofn, col)
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	sp := sdfPipeline{comps: pipe.GetComponents()}
	name := reflect.TypeOf(dofn).Elem().Name()
	var tr *pipepb.PTransform
	sp.sdf, tr = leaf(t, sp.comps, name)
	sp.output = only(tr.GetOutputs())
	if upper {
		id, up := leaf(t, sp.comps, "ToUpper")
		sp.transforms = append(sp.transforms, id)
		sp.create = only(up.GetInputs())
	} else {
		sp.create = only(tr.GetInputs())
	}
	sp.transforms = append(sp.transforms, sp.sdf)
	return sp
}

func registerSDFStage(t *testing.T, sp sdfPipeline, id string) *Stage {
	t.Helper()
	st, err := BuildStage(sp.comps, StageSpec{ID: id, Transforms: sp.transforms, Input: sp.create, Outputs: []string{sp.output}}, shared.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.RegisterStage(ctx, st.Descriptor); err != nil {
		t.Fatal(err)
	}
	return st
}

// offsets returns "s@0" ... "s@<len(s)-1>".
func offsets(s string) []string {
	var out []string
	for i := range len(s) {
		out = append(out, fmt.Sprintf("%s@%d", s, i))
	}
	return out
}

// TestSplittableDoFnProcessedWhole runs offsetFn over three strings, directly
// after the data source and fused behind another ParDo: every offset of every
// restriction (split in pieces of 3) is emitted once, in order, with the
// element's timestamp, in one bundle without residuals, and the user counter
// is reported for the user's transform id.
func TestSplittableDoFnProcessedWhole(t *testing.T) {
	for _, upper := range []bool{false, true} {
		t.Run(fmt.Sprintf("upper=%v", upper), func(t *testing.T) {
			sp := buildSDFPipeline(t, &offsetFn{}, upper)
			st := registerSDFStage(t, sp, fmt.Sprintf("sdf-whole-%v", upper))

			// The splittable ParDo became its three steps; the process step
			// kept the user's transform id.
			urns := map[string]string{}
			for tid, tr := range st.Descriptor.GetTransforms() {
				urns[tr.GetSpec().GetUrn()] = tid
			}
			if urns[urnProcessSizedElementsAndRestrictions] != sp.sdf || urns[urnPairWithRestriction] == "" || urns[urnSplitAndSizeRestrictions] == "" {
				t.Fatalf("descriptor transforms by urn %v, want the three sdf steps with the process step as %q", urns, sp.sdf)
			}

			// Coders: pair makes KV<E, R>, split-and-size KV<KV<E, R>, double>,
			// E being the process step's original input coder as the
			// descriptor has it and R the payload's restriction coder.
			desc := st.Descriptor
			pardo := &pipepb.ParDoPayload{}
			if err := proto.Unmarshal(desc.GetTransforms()[sp.sdf].GetSpec().GetPayload(), pardo); err != nil {
				t.Fatal(err)
			}
			pair := desc.GetTransforms()[urns[urnPairWithRestriction]]
			sized := desc.GetCoders()[desc.GetPcollections()[only(desc.GetTransforms()[sp.sdf].GetInputs())].GetCoderId()]
			paired := desc.GetCoders()[desc.GetPcollections()[only(pair.GetOutputs())].GetCoderId()]
			if sized.GetSpec().GetUrn() != urnCoderKV || sized.GetComponentCoderIds()[0] != desc.GetPcollections()[only(pair.GetOutputs())].GetCoderId() ||
				desc.GetCoders()[sized.GetComponentCoderIds()[1]].GetSpec().GetUrn() != urnCoderDouble {
				t.Errorf("split-and-size output coder %v, want KV<pair's output coder, double>", sized)
			}
			if paired.GetSpec().GetUrn() != urnCoderKV || paired.GetComponentCoderIds()[0] != desc.GetPcollections()[only(pair.GetInputs())].GetCoderId() ||
				paired.GetComponentCoderIds()[1] != pardo.GetRestrictionCoderId() {
				t.Errorf("pair output coder %v, want KV<%s, %s>", paired, desc.GetPcollections()[only(pair.GetInputs())].GetCoderId(), pardo.GetRestrictionCoderId())
			}

			in := []elm{{"abcdefg", 1000}, {"", 1001}, {"xy", 1002}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := shared.ProcessBundle(ctx, st.Descriptor.GetId(), map[string][][]byte{
				st.Source: encodeAll(t, wireCoder(t, st, sp.create), in),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Residuals) != 0 {
				t.Errorf("residuals %v, want none", res.Residuals)
			}
			got := decodeAll(t, wireCoder(t, st, sp.output), res.Outputs[st.Sinks[sp.output]])
			var want []elm
			for _, e := range in {
				v := e.V
				if upper {
					v = strings.ToUpper(v)
				}
				for _, o := range offsets(v) {
					want = append(want, elm{o, e.Ts})
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("outputs\n got %v\nwant %v", got, want)
			}
			var found bool
			for _, mi := range res.MonitoringInfos {
				if mi.GetUrn() == "beam:metric:user:sum_int64:v1" && mi.GetLabels()["NAME"] == "offsets" {
					found = true
					v, _ := coder.DecodeVarInt(bytes.NewReader(mi.GetPayload()))
					if v != 9 || mi.GetLabels()["PTRANSFORM"] != sp.sdf {
						t.Errorf("user counter offsets = %d on transform %q, want 9 on %q", v, mi.GetLabels()["PTRANSFORM"], sp.sdf)
					}
				}
			}
			if !found {
				t.Error("no user counter fnapi_test/offsets")
			}
		})
	}
}

// TestBuildStageRefusesSelfCheckpointingSDF: resumeFn returns a
// ProcessContinuation, so the SDK marks its output unbounded; fused behind
// pair-with-restriction its checkpoints would be dropped by the harness, so
// BuildStage refuses it.
func TestBuildStageRefusesSelfCheckpointingSDF(t *testing.T) {
	sp := buildSDFPipeline(t, &resumeFn{}, false)
	_, err := BuildStage(sp.comps, StageSpec{ID: "x", Transforms: sp.transforms, Input: sp.create, Outputs: []string{sp.output}}, shared.Endpoint())
	if err == nil || !strings.Contains(err.Error(), "unbounded") || !strings.Contains(err.Error(), sp.sdf) {
		t.Fatalf("error %v, want a refusal naming %q and unboundedness", err, sp.sdf)
	}
}

// TestResidualsAreReturned builds, from a BuildStage descriptor, one whose
// data source feeds resumeFn's process step directly (the only shape in which
// the Go harness checkpoints), feeds it <<"abcde", [0, 5)>, 5>, and feeds every
// residual back to the same source until none is left: each bundle emits two
// offsets and returns one residual holding the rest of the restriction, with
// the 5 ms delay; all offsets come out exactly once.
func TestResidualsAreReturned(t *testing.T) {
	sp := buildSDFPipeline(t, &resumeFn{}, false)
	// Pretend bounded to get past the refusal, then re-root the descriptor.
	comps := proto.Clone(sp.comps).(*pipepb.Components)
	comps.GetPcollections()[sp.output].IsBounded = pipepb.IsBounded_BOUNDED
	st, err := BuildStage(comps, StageSpec{ID: "sdf-residuals", Transforms: sp.transforms, Input: sp.create, Outputs: []string{sp.output}}, shared.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	desc := st.Descriptor
	process := desc.GetTransforms()[sp.sdf]
	sized := only(process.GetInputs())
	for tid, tr := range desc.GetTransforms() {
		if u := tr.GetSpec().GetUrn(); u == urnPairWithRestriction || u == urnSplitAndSizeRestrictions {
			delete(desc.GetTransforms(), tid)
		}
	}
	cs := &coderSet{base: desc.GetCoders(), added: map[string]*pipepb.Coder{}}
	safe, err := cs.wireSafe(desc.GetPcollections()[sized].GetCoderId(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for id, c := range cs.added {
		desc.GetCoders()[id] = c
	}
	desc.GetPcollections()[sized].CoderId = safe
	desc.GetCoders()["sized_wire"] = &pipepb.Coder{
		Spec:              &pipepb.FunctionSpec{Urn: urnCoderWindowedValue},
		ComponentCoderIds: []string{safe, comps.GetWindowingStrategies()[desc.GetPcollections()[sized].GetWindowingStrategyId()].GetWindowCoderId()},
	}
	src := desc.GetTransforms()[st.Source]
	port, err := proto.Marshal(&fnpb.RemoteGrpcPort{ApiServiceDescriptor: &pipepb.ApiServiceDescriptor{Url: shared.Endpoint()}, CoderId: "sized_wire"})
	if err != nil {
		t.Fatal(err)
	}
	src.GetSpec().Payload = port
	src.Outputs = map[string]string{"out": sized}
	desc.Id = "sdf-residuals-rooted"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.RegisterStage(ctx, desc); err != nil {
		t.Fatal(err)
	}

	wc, err := graphx.NewCoderUnmarshaller(desc.GetCoders()).Coder("sized_wire")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	first := &exec.FullValue{
		Elm: &exec.FullValue{
			Elm:  "abcde",
			Elm2: &exec.FullValue{Elm: offsetrange.Restriction{Start: 0, End: 5}, Elm2: false},
		},
		Elm2:      5.0,
		Timestamp: 1000,
		Windows:   window.SingleGlobalWindow,
		Pane:      typex.NoFiringPane(),
	}
	if err := exec.MakeElementEncoder(wc).Encode(first, &buf); err != nil {
		t.Fatal(err)
	}
	outCoder := wireCoder(t, st, sp.output)
	input := [][]byte{buf.Bytes()}
	var got []elm
	var rests []offsetrange.Restriction
	for bundles := 0; len(input) > 0; bundles++ {
		if bundles > 5 {
			t.Fatalf("still residuals after %d bundles", bundles)
		}
		res, err := shared.ProcessBundle(ctx, desc.GetId(), map[string][][]byte{st.Source: input})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, decodeAll(t, outCoder, res.Outputs[st.Sinks[sp.output]])...)
		input = nil
		for _, r := range res.Residuals {
			if r.TransformID != sp.sdf || r.Delay != 5*time.Millisecond {
				t.Errorf("residual for %q after %v, want %q after 5ms", r.TransformID, r.Delay, sp.sdf)
			}
			fv, err := exec.MakeElementDecoder(wc).Decode(bytes.NewReader(r.Element))
			if err != nil {
				t.Fatalf("residual element: %v", err)
			}
			kv := fv.Elm.(*exec.FullValue)
			if kv.Elm != "abcde" || fv.Timestamp != 1000 {
				t.Errorf("residual element %v at %v, want abcde at 1000", kv.Elm, fv.Timestamp)
			}
			rests = append(rests, kv.Elm2.(*exec.FullValue).Elm.(offsetrange.Restriction))
			input = append(input, r.Element)
		}
	}
	want := []elm{}
	for _, o := range offsets("abcde") {
		want = append(want, elm{o, 1000})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outputs\n got %v\nwant %v", got, want)
	}
	wantRests := []offsetrange.Restriction{{Start: 2, End: 5}, {Start: 4, End: 5}}
	if !reflect.DeepEqual(rests, wantRests) {
		t.Errorf("residual restrictions %v, want %v", rests, wantRests)
	}
}

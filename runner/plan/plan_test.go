package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

func toUpper(s string) string { return strings.ToUpper(s) }

func evenOdd(s string, even, odd func(string)) {
	if len(s)%2 == 0 {
		even(s)
	} else {
		odd(s)
	}
}

func pairLen(s string) (string, int) { return s, len(s) }

func marshal(t *testing.T, p *beam.Pipeline) *pipepb.Pipeline {
	t.Helper()
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	env, _ := graphx.CreateEnvironment(t.Context(), "beam:env:process:v1", func(context.Context) string { return "" })
	pp, err := graphx.Marshal(edges, &graphx.Options{Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	return pp
}

// describe prints a plan one stage a line, with transform unique names, for
// exact comparison in tests.
func describe(p *Plan) string {
	var b strings.Builder
	for _, s := range p.Stages {
		fmt.Fprintf(&b, "%s head=%s parts=%d up=%v fused=%v", s.Name, s.Head, s.Partitions, s.Upstreams, s.TransformNames)
		for _, o := range s.Outputs {
			fmt.Fprintf(&b, " out=%v%v", o.Topics, o.Copies)
		}
		b.WriteString("\n")
	}
	return b.String()
}

var opts = Options{ApplicationID: "app", Partitions: 4}

func TestCreateParDoReshuffleParDo(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	in := beam.Create(s, "a", "bb", "ccc")
	up := beam.ParDo(s, toUpper, in)
	rs := beam.Reshuffle(s, up)
	even, odd := beam.ParDo2(s, evenOdd, rs)
	_ = beam.Flatten(s, even, odd)
	pl, err := Build(marshal(t, p), opts)
	if err != nil {
		t.Fatal(err)
	}
	got := describe(pl)
	want := "s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn plan.toUpper] out=[app-s1-Reshuffle][1]\n" +
		"s1-Reshuffle head=reshuffle parts=4 up=[s0-Impulse] fused=[plan.evenOdd] out=[app-s2-Flatten][1] out=[app-s2-Flatten][1]\n" +
		"s2-Flatten head=flatten parts=4 up=[s1-Reshuffle] fused=[] \n"
	if strings.ReplaceAll(got, " \n", "\n") != strings.ReplaceAll(want, " \n", "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", got, want)
	}
	if sinks := pl.Sinks(); len(sinks) != 1 || sinks[0].Name != "s2-Flatten" {
		t.Fatalf("sinks: %v", sinks)
	}
	if tp := pl.Topics(); len(tp) != 3 || tp["app-s0-Impulse"] != 1 || tp["app-s1-Reshuffle"] != 4 {
		t.Fatalf("topics: %v", tp)
	}
}

func TestFlattenDupWritesTwiceAndMultiUpstreamFlatten(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	a := beam.ParDo(s, toUpper, beam.Create(s, "a"))
	b := beam.Create(s, "b")
	f := beam.Flatten(s, a, a, b)
	_ = beam.ParDo(s, toUpper, f)
	pl, err := Build(marshal(t, p), opts)
	if err != nil {
		t.Fatal(err)
	}
	fl := pl.Stages[len(pl.Stages)-1]
	if fl.Head != HeadFlatten || len(fl.Upstreams) != 2 || len(fl.Transforms) != 1 {
		t.Fatalf("flatten stage: %+v\n%s", fl, describe(pl))
	}
	var copies []int
	for _, s := range pl.Stages[:len(pl.Stages)-1] {
		if len(s.Outputs) != 1 || s.Outputs[0].Topics[0] != fl.InputTopic {
			t.Fatalf("stage %s should write only to the flatten topic: %+v", s.Name, s.Outputs)
		}
		copies = append(copies, s.Outputs[0].Copies[0])
	}
	if fmt.Sprint(copies) != "[2 1]" {
		t.Fatalf("copies: want [2 1] (a flattened twice, b once), got %v\n%s", copies, describe(pl))
	}
}

func TestGroupByKeyIsABoundaryAndCanBeRefused(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, pairLen, beam.Create(s, "a", "bb"))
	_ = beam.GroupByKey(s, kv)
	pp := marshal(t, p)
	pl, err := Build(pp, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Stages) != 2 || pl.Stages[1].Head != HeadGroupByKey || pl.Stages[0].Outputs[0].Topics[0] != pl.Stages[1].InputTopic {
		t.Fatalf("want impulse stage feeding a GroupByKey stage:\n%s", describe(pl))
	}
	_, err = Build(pp, Options{ApplicationID: "app", Partitions: 4, Supported: map[HeadKind]bool{HeadImpulse: true}})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), URNGroupByKey) || !strings.Contains(err.Error(), `"CoGBK"`) {
		t.Fatalf("want an error naming the GroupByKey transform and its URN, got %v", err)
	}
}

func TestUnknownURNAndSideInputsAreNamed(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	_ = beam.ParDo(s, toUpper, beam.Create(s, "a"))
	pp := marshal(t, p)
	for id, tr := range pp.GetComponents().GetTransforms() {
		if strings.Contains(tr.GetUniqueName(), "toUpper") {
			tr.Spec.Urn = "beam:transform:made_up:v1"
			_, err := Build(pp, opts)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "beam:transform:made_up:v1") || !strings.Contains(err.Error(), id) {
				t.Fatalf("want an error naming the URN and transform %s, got %v", id, err)
			}
			return
		}
	}
	t.Fatal("no toUpper transform in the pipeline")
}

func sideUpper(s string, side []string) string { return s + fmt.Sprint(len(side)) }

func firstKey(k string, vs func(*int) bool) string { return k }

// TestSideInputEdges checks where a ParDo with side inputs runs and that its
// side inputs become edges from their producers to one-partition topics.
func TestSideInputEdges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s beam.Scope)
		want  string
	}{{
		// Fused: the side producer is another stage and the head is a passthrough.
		name: "fused after impulse",
		build: func(s beam.Scope) {
			side := beam.Create(s, "x")
			_ = beam.ParDo(s, sideUpper, beam.Create(s, "a"), beam.SideInput{Input: side})
		},
		want: `s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn] out=[app-s1-Impulse_1-side0][1]
s1-Impulse_1 head=impulse parts=1 up=[] fused=[beam.createFn'1 plan.sideUpper]
s1-Impulse_1 side plan.sideUpper.i1 <- s0-Impulse via app-s1-Impulse_1-side0 (beam:side_input:iterable:v1)
`,
	}, {
		// The side input is made in the ParDo's own stage: fusing would make
		// the stage wait for itself.
		name: "side made in the same stage",
		build: func(s beam.Scope) {
			in := beam.Create(s, "a")
			_ = beam.ParDo(s, sideUpper, in, beam.SideInput{Input: beam.ParDo(s, toUpper, in)})
		},
		want: `s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn plan.toUpper] out=[app-s1-plan.sideUpper][1] out=[app-s1-plan.sideUpper-side0][1]
s1-plan.sideUpper head=side_inputs parts=4 up=[s0-Impulse] fused=[plan.sideUpper]
s1-plan.sideUpper side plan.sideUpper.i1 <- s0-Impulse via app-s1-plan.sideUpper-side0 (beam:side_input:iterable:v1)
`,
	}, {
		// A GroupByKey head fires from state: it cannot hold a record back.
		name: "after a GroupByKey",
		build: func(s beam.Scope) {
			grouped := beam.GroupByKey(s, beam.ParDo(s, pairLen, beam.Create(s, "a")))
			keys := beam.ParDo(s, firstKey, grouped)
			_ = beam.ParDo(s, sideUpper, keys, beam.SideInput{Input: beam.Create(s, "x")})
		},
		want: `s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn plan.pairLen] out=[app-s2-CoGBK][1]
s1-Impulse_1 head=impulse parts=1 up=[] fused=[beam.createFn'1] out=[app-s3-plan.sideUpper-side0][1]
s2-CoGBK head=group_by_key parts=4 up=[s0-Impulse] fused=[plan.firstKey] out=[app-s3-plan.sideUpper][1]
s3-plan.sideUpper head=side_inputs parts=4 up=[s2-CoGBK] fused=[plan.sideUpper]
s3-plan.sideUpper side plan.sideUpper.i1 <- s1-Impulse_1 via app-s3-plan.sideUpper-side0 (beam:side_input:iterable:v1)
`,
	}, {
		// A windowed side input after a WindowInto in the stage: the head's
		// windows are not the ParDo's.
		name: "windowed side after WindowInto",
		build: func(s beam.Scope) {
			fixed := window.NewFixedWindows(time.Minute)
			main := beam.WindowInto(s, fixed, beam.Create(s, "a"))
			side := beam.WindowInto(s, fixed, beam.Create(s, "x"))
			_ = beam.ParDo(s, sideUpper, main, beam.SideInput{Input: side})
		},
		want: `s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn WindowInto] out=[app-s2-plan.sideUpper][1]
s1-Impulse_1 head=impulse parts=1 up=[] fused=[beam.createFn'1 WindowInto'1] out=[app-s2-plan.sideUpper-side0][1]
s2-plan.sideUpper head=side_inputs parts=4 up=[s0-Impulse] fused=[plan.sideUpper]
s2-plan.sideUpper side plan.sideUpper.i1 <- s1-Impulse_1 via app-s2-plan.sideUpper-side0 (beam:side_input:iterable:v1)
`,
	}, {
		// A global side input's window is the global window whatever the
		// main window: the WindowInto does not matter.
		name: "global side after WindowInto",
		build: func(s beam.Scope) {
			main := beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.Create(s, "a"))
			_ = beam.ParDo(s, sideUpper, main, beam.SideInput{Input: beam.Create(s, "x")})
		},
		want: `s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn WindowInto plan.sideUpper]
s1-Impulse_1 head=impulse parts=1 up=[] fused=[beam.createFn'1] out=[app-s0-Impulse-side0][1]
s0-Impulse side plan.sideUpper.i1 <- s1-Impulse_1 via app-s0-Impulse-side0 (beam:side_input:iterable:v1)
`,
	}, {
		name: "multimap",
		build: func(s beam.Scope) {
			side := beam.ParDo(s, pairLen, beam.Create(s, "x"))
			_ = beam.ParDo(s, lookupLen, beam.Create(s, "a"), beam.SideInput{Input: side})
		},
		want: `s0-Impulse head=impulse parts=1 up=[] fused=[beam.createFn plan.pairLen] out=[app-s1-Impulse_1-side0][1]
s1-Impulse_1 head=impulse parts=1 up=[] fused=[beam.createFn'1 plan.lookupLen]
s1-Impulse_1 side plan.lookupLen.i1 <- s0-Impulse via app-s1-Impulse_1-side0 (beam:side_input:multimap:v1)
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p, s := beam.NewPipelineWithRoot()
			tc.build(s)
			pl, err := Build(marshal(t, p), opts)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.ReplaceAll(describeSides(pl), " \n", "\n")
			if got != tc.want {
				t.Fatalf("plan:\n%s\nwant:\n%s", got, tc.want)
			}
			topics := pl.Topics()
			for _, st := range pl.Stages {
				for _, si := range st.SideInputs {
					if topics[si.Topic] != 1 {
						t.Errorf("side topic %s: %d partitions in Topics(), want 1", si.Topic, topics[si.Topic])
					}
				}
			}
		})
	}
}

func lookupLen(s string, lens func(string) func(*int) bool) string { return s }

func TestSideInputRefusals(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	in := beam.Create(s, "a")
	_ = beam.ParDo(s, sideUpper, in, beam.SideInput{Input: beam.ParDo(s, toUpper, in)})
	pp := marshal(t, p)
	// A build without HeadSideInputs cannot place the ParDo.
	_, err := Build(pp, Options{ApplicationID: "app", Partitions: 4, Supported: map[HeadKind]bool{HeadImpulse: true}})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "sideUpper") || !strings.Contains(err.Error(), string(HeadSideInputs)) {
		t.Fatalf("want an error naming the ParDo and %s, got %v", HeadSideInputs, err)
	}
	edit := func(f func(si *pipepb.SideInput)) *pipepb.Pipeline {
		c := proto.Clone(pp).(*pipepb.Pipeline)
		for _, tr := range c.GetComponents().GetTransforms() {
			if !strings.Contains(tr.GetUniqueName(), "sideUpper") {
				continue
			}
			pd := &pipepb.ParDoPayload{}
			if err := proto.Unmarshal(tr.GetSpec().GetPayload(), pd); err != nil {
				t.Fatal(err)
			}
			for _, si := range pd.GetSideInputs() {
				f(si)
			}
			tr.Spec.Payload, _ = proto.Marshal(pd)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		pp   *pipepb.Pipeline
		want string
	}{
		{"access pattern", edit(func(si *pipepb.SideInput) { si.AccessPattern.Urn = "beam:side_input:made_up:v1" }), `side input "i1": access pattern "beam:side_input:made_up:v1" is not implemented`},
		{"window mapping", edit(func(si *pipepb.SideInput) { si.WindowMappingFn.Urn = "beam:window_mapping:made_up:v1" }), `side input "i1": window mapping fn "beam:window_mapping:made_up:v1" is not implemented`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.pp, opts)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "sideUpper") {
				t.Fatalf("want an error naming the transform and %q, got %v", tc.want, err)
			}
		})
	}
}

func TestDiffNamesSideInputs(t *testing.T) {
	build := func(side bool) *Plan {
		p, s := beam.NewPipelineWithRoot()
		main := beam.Create(s, "a")
		x := beam.Create(s, "x")
		if side {
			_ = beam.ParDo(s, sideUpper, main, beam.SideInput{Input: x})
		} else {
			_ = beam.ParDo(s, toUpper, main)
			_ = beam.ParDo(s, toUpper, x)
		}
		pl, err := Build(marshal(t, p), opts)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	a := build(true)
	enc, _ := a.Encode()
	rec, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if err := Diff(rec, build(true)); err != nil {
		t.Fatalf("recorded and decoded: %v", err)
	}
	if err := Diff(rec, build(false)); !errors.Is(err, ErrPlanMismatch) || !strings.Contains(err.Error(), "side inputs") {
		t.Fatalf("want a mismatch naming side inputs, got %v", err)
	}
}

// describeSides is describe plus one line per side input.
func describeSides(p *Plan) string {
	var b strings.Builder
	b.WriteString(describe(p))
	for _, s := range p.Stages {
		for _, si := range s.SideInputs {
			fmt.Fprintf(&b, "%s side %s.%s <- %s via %s (%s)\n", s.Name, si.TransformName, si.LocalName, si.Upstream, si.Topic, si.AccessPattern)
		}
	}
	return b.String()
}

func TestOptionsAreValidated(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	_ = beam.Create(s, "a")
	pp := marshal(t, p)
	for _, o := range []Options{{Partitions: 1}, {ApplicationID: "a b", Partitions: 1}, {ApplicationID: "a", Partitions: 0}} {
		if _, err := Build(pp, o); err == nil {
			t.Errorf("options %+v: want an error", o)
		}
	}
}

func TestPlanIsDeterministicAndDiffNamesDifferences(t *testing.T) {
	build := func(second bool) *Plan {
		p, s := beam.NewPipelineWithRoot()
		in := beam.ParDo(s, toUpper, beam.Create(s, "a"))
		if second {
			in = beam.ParDo(s, toUpper, in)
		}
		_ = beam.Reshuffle(s, in)
		pl, err := Build(marshal(t, p), opts)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	a, b := build(false), build(false)
	if err := Diff(a, b); err != nil {
		t.Fatalf("same pipeline twice: %v", err)
	}
	enc, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if err := Diff(rec, b); err != nil {
		t.Fatalf("recorded and decoded: %v", err)
	}
	err = Diff(rec, build(true))
	if !errors.Is(err, ErrPlanMismatch) || !strings.Contains(err.Error(), "stage s0-Impulse: transforms") {
		t.Fatalf("want a mismatch naming stage s0-Impulse's transforms, got %v", err)
	}
	other := *b
	other.ApplicationID = "other"
	if err := Diff(rec, &other); !errors.Is(err, ErrPlanMismatch) || !strings.Contains(err.Error(), "application id") {
		t.Fatalf("want an application id mismatch, got %v", err)
	}
	if _, err := Decode([]byte("{not json")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad recorded plan: %v", err)
	}
}

// TestPlanDoesNotDependOnRootOrder guards a bug found while writing this
// package: graphx.Marshal lists root transforms in a different order from run
// to run, and a plan that followed it gave two instances different stages.
func TestPlanDoesNotDependOnRootOrder(t *testing.T) {
	var first []byte
	for i := 0; i < 30; i++ {
		p, s := beam.NewPipelineWithRoot()
		a := beam.ParDo(s, toUpper, beam.Create(s, "a"))
		f := beam.Flatten(s, a, beam.Create(s, "b"), beam.Create(s, "c"))
		_ = beam.Reshuffle(s, f)
		pp := marshal(t, p)
		// Reverse the roots on odd runs as well, whatever Marshal did.
		if i%2 == 1 {
			r := pp.RootTransformIds
			for l, h := 0, len(r)-1; l < h; l, h = l+1, h-1 {
				r[l], r[h] = r[h], r[l]
			}
		}
		pl, err := Build(pp, opts)
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := pl.Encode()
		if first == nil {
			first = enc
		} else if string(enc) != string(first) {
			t.Fatalf("run %d planned differently:\n%s\nvs\n%s", i, enc, first)
		}
	}
}

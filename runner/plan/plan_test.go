package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
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

func TestSideInputIsRefusedForNow(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.Create(s, "x")
	_ = beam.ParDo(s, sideUpper, beam.Create(s, "a"), beam.SideInput{Input: side})
	_, err := Build(marshal(t, p), opts)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "side inputs") || !strings.Contains(err.Error(), "sideUpper") {
		t.Fatalf("want a side-input error naming the transform, got %v", err)
	}
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

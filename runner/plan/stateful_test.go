package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// countFn keeps a count per key in user state.
type countFn struct{ N state.Value[int] }

func (f *countFn) ProcessElement(sp state.Provider, k string, v int) string {
	n, _, _ := f.N.Read(sp)
	_ = f.N.Write(sp, n+v)
	return k
}

func init() {
	register.DoFn3x1[state.Provider, string, int, string](&countFn{})
}

// TestStatefulParDoIsAKeyedBoundary: a stateful ParDo starts a HeadStateful
// stage (its input crosses a topic, the ParDo is the first fused transform,
// the SDK transforms after it fuse with it), and a runner without
// HeadStateful refuses it by name.
func TestStatefulParDoIsAKeyedBoundary(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, pairLen, beam.Create(s, "a", "bb"))
	_ = beam.ParDo(s, toUpper, beam.ParDo(s, &countFn{N: state.MakeValueState[int]("n")}, kv))
	pp := marshal(t, p)
	pl, err := Build(pp, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Stages) != 2 {
		t.Fatalf("want 2 stages:\n%s", describe(pl))
	}
	st := pl.Stages[1]
	if st.Head != HeadStateful || len(st.TransformNames) != 2 || !strings.Contains(st.TransformNames[0], "countFn") || st.Transforms[0] != st.HeadTransform ||
		pl.Stages[0].Outputs[0].Topics[0] != st.InputTopic || pl.Stages[0].Outputs[0].PCollection != st.HeadOutput {
		t.Fatalf("want impulse stage feeding a stateful stage headed by countFn with toUpper fused:\n%s", describe(pl))
	}
	_, err = Build(pp, Options{ApplicationID: "app", Partitions: 4, Supported: map[HeadKind]bool{HeadImpulse: true}})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "countFn") || !strings.Contains(err.Error(), "stateful") {
		t.Fatalf("want an error naming the stateful transform, got %v", err)
	}
}

// sideCountFn is countFn reading a side input.
type sideCountFn struct{ N state.Value[int] }

func (f *sideCountFn) ProcessElement(sp state.Provider, k string, v int, side []string) string {
	n, _, _ := f.N.Read(sp)
	_ = f.N.Write(sp, n+v+len(side))
	return k
}

func init() {
	register.DoFn4x1[state.Provider, string, int, []string, string](&sideCountFn{})
}

// TestStatefulParDoWithSideInputs: a stateful ParDo reading a side input
// heads a HeadStateful stage that lists the side input (its producer's
// stage writes it to the side topic; the step holds the stateful stage's
// elements back until it is ready). It used to be refused.
func TestStatefulParDoWithSideInputs(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.Create(s, "x", "y")
	kv := beam.ParDo(s, pairLen, beam.Create(s, "a", "bb"))
	_ = beam.ParDo(s, &sideCountFn{N: state.MakeValueState[int]("n")}, kv, beam.SideInput{Input: side})
	pl, err := Build(marshal(t, p), opts)
	if err != nil {
		t.Fatalf("a stateful ParDo with a side input: %v", err)
	}
	var st *Stage
	for _, s := range pl.Stages {
		if s.Head == HeadStateful {
			st = s
		}
	}
	if st == nil || len(st.SideInputs) != 1 || !strings.Contains(st.TransformNames[0], "sideCountFn") || st.SideInputs[0].Transform != st.HeadTransform {
		t.Fatalf("want a stateful stage headed by sideCountFn with its one side input:\n%s", describe(pl))
	}
}

package difftest

import (
	"fmt"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"
)

// Build returns sp as a Beam pipeline. Every sink's elements are formatted
// (dtFormat: key, value, window, timestamp, pane), put in the global
// window, flattened and reshuffled: the pipeline's last transform, whose
// input topic a test on this runner reads. With collect != "", a dtCollect
// under that run id follows the Reshuffle (how a test reads a Prism run;
// see Collected). It fails on a Spec that names a PCollection that does not
// exist (yet) or a kind it does not know.
func Build(sp Spec, collect string) (p *beam.Pipeline, err error) {
	defer func() {
		// the SDK's construction functions panic on what they refuse (a
		// shrunk Spec may flatten two windowing strategies)
		if x := recover(); x != nil {
			p, err = nil, fmt.Errorf("difftest: the Go SDK refuses the pipeline: %v", x)
		}
	}()
	p, s := beam.NewPipelineWithRoot()
	var pcs []beam.PCollection
	get := func(i int) (beam.PCollection, error) {
		if i < 0 || i >= len(pcs) {
			return beam.PCollection{}, fmt.Errorf("difftest: PCollection p%d does not exist before p%d", i, len(pcs))
		}
		return pcs[i], nil
	}
	for i, src := range sp.Sources {
		ss := s.Scope(fmt.Sprintf("p%d", i))
		if !src.TestStream {
			var els []string
			for _, e := range src.Events {
				if e.Watermark {
					return nil, fmt.Errorf("difftest: source p%d: a Create has no watermark advance", i)
				}
				els = append(els, fmt.Sprintf("%s|%d|%d", e.Key, e.Value, e.TsMillis))
			}
			if len(els) == 0 {
				return nil, fmt.Errorf("difftest: source p%d: a Create of nothing", i)
			}
			pcs = append(pcs, beam.ParDo(ss, dtParse, beam.CreateList(ss, els)))
			continue
		}
		con := teststream.NewConfig()
		for _, e := range src.Events {
			var err error
			if e.Watermark {
				err = con.AdvanceWatermark(e.TsMillis)
			} else {
				err = con.AddElements(e.TsMillis, fmt.Sprintf("%s|%d", e.Key, e.Value))
			}
			if err != nil {
				return nil, fmt.Errorf("difftest: source p%d: %v", i, err)
			}
		}
		if err := con.AdvanceWatermarkToInfinity(); err != nil {
			return nil, err
		}
		pcs = append(pcs, beam.ParDo(ss, dtSplit, teststream.Create(ss, con)))
	}
	for j, st := range sp.Steps {
		ss := s.Scope(fmt.Sprintf("p%d", len(pcs)))
		var ins []beam.PCollection
		for _, i := range st.In {
			c, err := get(i)
			if err != nil {
				return nil, err
			}
			ins = append(ins, c)
		}
		need := 1
		switch st.Kind {
		case StepFlatten, StepCoGBK, StepSide, StepStateSide:
			need = 2
		}
		if len(ins) != need {
			return nil, fmt.Errorf("difftest: step %d (%s): %d inputs, want %d", j, st.Kind, len(ins), need)
		}
		var out beam.PCollection
		switch st.Kind {
		case StepMap:
			out = beam.ParDo(ss, &dtMap{Mul: st.A, Add: st.B, Mod: st.C, KeyMod: st.D}, ins[0])
		case StepFilter:
			out = beam.ParDo(ss, &dtFilter{Mod: st.A, Rem: st.B}, ins[0])
		case StepDup:
			out = beam.ParDo(ss, &dtDup{Add: st.A}, ins[0])
		case StepFlatten:
			out = beam.Flatten(ss, ins[0], ins[1])
		case StepReshuffle:
			out = beam.Reshuffle(ss, ins[0])
		case StepWindow:
			if st.Window == nil {
				return nil, fmt.Errorf("difftest: step %d: a window step without its window", j)
			}
			fn, opts, err := windowInto(*st.Window)
			if err != nil {
				return nil, fmt.Errorf("difftest: step %d: %v", j, err)
			}
			out = beam.WindowInto(ss, fn, ins[0], opts...)
		case StepGBKSum:
			out = beam.ParDo(ss, dtSum, beam.GroupByKey(ss, ins[0]))
		case StepGBKMax:
			out = beam.ParDo(ss, dtMax, beam.GroupByKey(ss, ins[0]))
		case StepCoGBK:
			out = beam.ParDo(ss, dtCoSum, beam.CoGroupByKey(ss, ins[0], ins[1]))
		case StepCombine:
			out = beam.CombinePerKey(ss, &dtSumFn{}, ins[0])
		case StepCombineF:
			out = beam.CombinePerKey(ss, dtAdd, ins[0])
		case StepSide:
			out = beam.ParDo(ss, &dtSide{Mod: st.A}, ins[0], beam.SideInput{Input: ins[1]})
		case StepState:
			out = beam.ParDo(ss, newState(st), ins[0])
		case StepStateSide:
			f := newState(st)
			out = beam.ParDo(ss, &dtStateSide{DelayMs: f.DelayMs, ClearMod: f.ClearMod, ClearRem: f.ClearRem, Mod: st.D,
				Bag: f.Bag, Next: f.Next, Cleared: f.Cleared, Fire: f.Fire}, ins[0], beam.SideInput{Input: ins[1]})
		default:
			return nil, fmt.Errorf("difftest: step %d: unknown kind %q", j, st.Kind)
		}
		pcs = append(pcs, out)
	}
	if len(sp.Sinks) == 0 {
		return nil, fmt.Errorf("difftest: no sink")
	}
	var lines []beam.PCollection
	for _, sk := range sp.Sinks {
		c, err := get(sk.PC)
		if err != nil {
			return nil, err
		}
		ss := s.Scope(fmt.Sprintf("sink%d", sk.PC))
		f := beam.ParDo(ss, &dtFormat{Sink: sk.PC}, c)
		lines = append(lines, beam.WindowInto(ss, window.NewGlobalWindows(), f))
	}
	all := beam.Flatten(s, lines...)
	out := beam.Reshuffle(s, all)
	if collect != "" {
		beam.ParDo0(s, &dtCollect{Run: collect}, out)
	}
	return p, nil
}

func newState(st Step) *dtState {
	return &dtState{
		DelayMs: int64(st.A), ClearMod: st.B, ClearRem: st.C,
		Bag: state.MakeBagState[string]("bag"), Next: state.MakeValueState[int64]("next"),
		Cleared: state.MakeValueState[bool]("cleared"), Fire: timers.InEventTime("fire"),
	}
}

func windowInto(w WindowSpec) (*window.Fn, []beam.WindowIntoOption, error) {
	var fn *window.Fn
	switch w.Kind {
	case "global":
		fn = window.NewGlobalWindows()
	case "fixed":
		fn = window.NewFixedWindows(time.Duration(w.SizeMs) * time.Millisecond)
	case "sliding":
		fn = window.NewSlidingWindows(time.Duration(w.PeriodMs)*time.Millisecond, time.Duration(w.SizeMs)*time.Millisecond)
	case "sessions":
		fn = window.NewSessions(time.Duration(w.SizeMs) * time.Millisecond)
	default:
		return nil, nil, fmt.Errorf("unknown window kind %q", w.Kind)
	}
	tr, err := buildTrigger(w.Trigger)
	if err != nil {
		return nil, nil, err
	}
	opts := []beam.WindowIntoOption{beam.Trigger(tr), beam.AllowedLateness(time.Duration(w.LatenessMs) * time.Millisecond)}
	if w.Accumulate {
		opts = append(opts, beam.PanesAccumulate())
	} else {
		opts = append(opts, beam.PanesDiscard())
	}
	return fn, opts, nil
}

func buildTrigger(t Trigger) (trigger.Trigger, error) {
	subs := func() ([]trigger.Trigger, error) {
		var out []trigger.Trigger
		for _, s := range t.Subs {
			x, err := buildTrigger(s)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	}
	switch t.Kind {
	case "default":
		return trigger.Default(), nil
	case "never":
		return trigger.Never(), nil
	case "always":
		return trigger.Always(), nil
	case "count":
		return trigger.AfterCount(t.N), nil
	case "eow":
		e := trigger.AfterEndOfWindow()
		if t.Early != nil {
			x, err := buildTrigger(*t.Early)
			if err != nil {
				return nil, err
			}
			e = e.EarlyFiring(x)
		}
		if t.Late != nil {
			x, err := buildTrigger(*t.Late)
			if err != nil {
				return nil, err
			}
			e = e.LateFiring(x)
		}
		return e, nil
	}
	ss, err := subs()
	if err != nil {
		return nil, err
	}
	switch t.Kind {
	case "repeat":
		if len(ss) != 1 {
			return nil, fmt.Errorf("Repeat of %d triggers, want 1", len(ss))
		}
		return trigger.Repeat(ss[0]), nil
	case "any":
		return trigger.AfterAny(ss), nil
	case "all":
		return trigger.AfterAll(ss), nil
	case "each":
		return trigger.AfterEach(ss), nil
	case "orfinally":
		if len(ss) != 2 {
			return nil, fmt.Errorf("OrFinally of %d triggers, want 2", len(ss))
		}
		return trigger.OrFinally(ss[0], ss[1]), nil
	}
	return nil, fmt.Errorf("unknown trigger kind %q", t.Kind)
}

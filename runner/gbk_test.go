package runner

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window/trigger"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
)

func gbkTestSplit(s string) (string, string) { return s, s }

func init() { beam.RegisterFunction(gbkTestSplit) }

func planOf(t *testing.T, p *beam.Pipeline) (*pipepb.Pipeline, *plan.Plan) {
	t.Helper()
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(pipe, plan.Options{ApplicationID: "app", Partitions: 4, Supported: Supported()})
	if err != nil {
		t.Fatal(err)
	}
	return pipe, pl
}

// planGroupByKeys checks every stage of pl with its kind (checkStages) and
// returns the GroupByKey stages' specs, by stage name, and what the
// stages need.
func planGroupByKeys(comps *pipepb.Components, pl *plan.Plan) (map[string]*gbkSpec, *checkedPlan, error) {
	cp, err := checkStages(&checkEnv{comps: comps, pl: pl, o: DefaultOptions(), log: slog.Default()})
	if err != nil {
		return nil, nil, err
	}
	out := map[string]*gbkSpec{}
	for name, sh := range cp.heads {
		if g, ok := sh.(*gbkStage); ok {
			out[name] = g.spec
		}
	}
	return out, cp, nil
}

// TestPlanGroupByKeysTriggers: a GroupByKey under a non-default trigger
// plans with the trigger tree, under fixed and under session (merging)
// windows alike.
func TestPlanGroupByKeysTriggers(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, gbkTestSplit, beam.Create(s, "a", "b"))
	kv = beam.WindowInto(s, window.NewFixedWindows(time.Second), kv, beam.Trigger(trigger.Repeat(trigger.AfterCount(2))))
	beam.GroupByKey(s, kv)
	pipe, pl := planOf(t, p)
	specs, _, err := planGroupByKeys(pipe.GetComponents(), pl)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 {
		t.Fatalf("%d GroupByKey specs, want 1", len(specs))
	}
	for name, spec := range specs {
		if got := spec.strategy.Trigger.String(); got != "repeat(AfterCount(2))" {
			t.Errorf("stage %s: trigger %s, want repeat(AfterCount(2))", name, got)
		}
	}

	p, s = beam.NewPipelineWithRoot()
	kv = beam.ParDo(s, gbkTestSplit, beam.Create(s, "a", "b"))
	kv = beam.WindowInto(s, window.NewSessions(time.Second), kv, beam.Trigger(trigger.AfterCount(2)))
	beam.GroupByKey(s, kv)
	pipe, pl = planOf(t, p)
	specs, _, err = planGroupByKeys(pipe.GetComponents(), pl)
	if err != nil {
		t.Fatalf("a trigger on session windows: %v (no longer refused)", err)
	}
	if len(specs) != 1 {
		t.Fatalf("%d GroupByKey specs, want 1", len(specs))
	}
	for name, spec := range specs {
		if spec.strategy.Kind != gbk.Sessions || spec.strategy.Trigger.String() != "AfterCount(2)" {
			t.Errorf("stage %s: %s, want session windows with AfterCount(2)", name, spec.strategy)
		}
	}
}

// TestPlanGroupByKeys: default-trigger GroupByKeys plan, with their
// strategies; changelog topics have the stage's partition count; every
// output to a GroupByKey topic has a KeyOf.
func TestPlanGroupByKeys(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, gbkTestSplit, beam.Create(s, "a", "b"))
	kv = beam.WindowInto(s, window.NewSessions(time.Minute), kv, beam.AllowedLateness(5*time.Second))
	beam.GroupByKey(s, kv)
	pipe, pl := planOf(t, p)
	specs, cp, err := planGroupByKeys(pipe.GetComponents(), pl)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 {
		t.Fatalf("%d GroupByKey specs, want 1", len(specs))
	}
	for name, spec := range specs {
		if spec.strategy.Kind != gbk.Sessions || spec.strategy.Gap != 60000 || spec.strategy.AllowedLateness != 5000 {
			t.Errorf("stage %s: strategy %+v, want sessions, gap 60000 ms, lateness 5000 ms", name, spec.strategy)
		}
		topics := cp.changelogs
		if n := topics["app-"+name+"-changelog"]; n != 4 {
			t.Errorf("changelog topics %v, want app-%s-changelog with 4 partitions", topics, name)
		}
	}
	toGBK := 0
	for _, st := range pl.Stages {
		ko, err := keyOf(pipe.GetComponents(), pl, st)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range st.Outputs {
			for _, topic := range o.Topics {
				if pl.Stage(strings.TrimPrefix(topic, "app-")).Head != plan.HeadGroupByKey {
					continue
				}
				toGBK++
				if ko[o.PCollection] == nil {
					t.Errorf("stage %s output %s to %s has no KeyOf", st.Name, o.PCollection, topic)
				}
			}
		}
	}
	if toGBK != 1 {
		t.Errorf("%d outputs to a GroupByKey topic, want 1 (the KeyOf check checked nothing)", toGBK)
	}
}

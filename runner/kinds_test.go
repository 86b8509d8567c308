package runner

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// TestEveryHeadKindRegistered: every head kind the plan makes has its
// kind (kind_*.go), so Supported names them all and plan.Build, given
// it, refuses nothing it used to run.
func TestEveryHeadKindRegistered(t *testing.T) {
	all := []plan.HeadKind{plan.HeadImpulse, plan.HeadGroupByKey, plan.HeadReshuffle, plan.HeadFlatten, plan.HeadSideInputs,
		plan.HeadStateful, plan.HeadTestStream, plan.HeadKafkaSource, plan.HeadSplittable}
	sup := Supported()
	for _, k := range all {
		if !sup[k] {
			t.Errorf("head kind %s has no registered kind", k)
		}
	}
}

// headCountingPassthrough is the exercise of issue 22's "a new kind is
// one file": a passthrough variant registered by this test alone. Its
// check, needs, head, consumer settings and metric are all here; nothing
// else in the runner names it.
const headCountingPassthrough plan.HeadKind = "test_counting_passthrough"

type countingKind struct{}

func (countingKind) check(_ *checkEnv, s *plan.Stage) (stageHead, error) {
	return countingStage{s: s}, nil
}

type countingStage struct{ s *plan.Stage }

func (countingStage) needs() stageNeeds { return stageNeeds{changelog: true} }

func (cs countingStage) build(_ context.Context, e *buildEnv) (builtHead, error) {
	built := e.sharedCollector("test_counting_passthrough_stages", func() prometheus.Collector {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "test_counting_passthrough_stages", Help: "Stages built."})
	}).(prometheus.Counter)
	built.Inc()
	return builtHead{head: &step.Passthrough{}, consumer: map[string]string{"fetch.min.bytes": "1", "session.timeout.ms": "7000"}}, nil
}

// TestKindExercise registers the counting passthrough for the test, turns
// a Reshuffle stage of a planned pipeline into one, and checks that the
// plan accepts it only once registered, that its needs reach the checked
// plan (a changelog), and that its stage's loop config is built whole
// from what it built: its head, its consumer settings over the group
// membership's, its metric.
func TestKindExercise(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	beam.Reshuffle(s, beam.Create(s, "a", "b"))
	pipe, pl := planOf(t, p)
	var rs *plan.Stage
	for _, st := range pl.Stages {
		if st.Head == plan.HeadReshuffle {
			rs = st
		}
	}
	if rs == nil {
		t.Fatalf("no Reshuffle stage in %v", pl.Stages)
	}
	rs.Head = headCountingPassthrough
	env := &checkEnv{comps: pipe.GetComponents(), pl: pl, o: DefaultOptions(), log: slog.Default()}
	if _, err := checkStages(env); err == nil {
		t.Fatal("a stage of an unregistered kind checked")
	}

	registerKind(headCountingPassthrough, countingKind{})
	defer delete(kinds, headCountingPassthrough)
	if !Supported()[headCountingPassthrough] {
		t.Fatal("Supported misses the registered kind")
	}
	cp, err := checkStages(env)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := cp.changelogs[kafkaclient.ChangelogTopic(pl.ApplicationID, rs.Name)]; !ok || n != rs.Partitions {
		t.Errorf("changelogs %v, want the stage's with %d partitions", cp.changelogs, rs.Partitions)
	}
	reg := prometheus.NewRegistry()
	j := &job{log: slog.Default(), tl: newTimeline(), inst: &instance{ID: "i", Stores: t.TempDir()}, producers: map[string]*stage.Producer{},
		o: DefaultOptions(), pipe: pipe, pl: pl, checked: cp, users: map[string]int32{}}
	base := buildEnv{checkEnv: *env, heads: cp.heads, storeDir: j.inst.Stores, stores: map[string]*state.Manager{}, users: j.users, reg: reg, shared: map[string]prometheus.Collector{}}
	st := &stages{}
	cfg, _, err := stageConfig(context.Background(), j, base, st, rs, newCommittedMetrics(), stage.Observer{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Head.(*step.Passthrough); !ok {
		t.Errorf("head %T, want *step.Passthrough", cfg.Head)
	}
	if cfg.Consumer["fetch.min.bytes"] != "1" || cfg.Consumer["session.timeout.ms"] != "7000" || cfg.Consumer["heartbeat.interval.ms"] == "" {
		t.Errorf("consumer settings %v, want the kind's over the group membership's", cfg.Consumer)
	}
	if cfg.Spec.Name != rs.Name || cfg.Spec.Partitions != rs.Partitions || cfg.Spec.GrowingInput {
		t.Errorf("spec %+v, want the plan's input", cfg.Spec)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "test_counting_passthrough_stages" || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Errorf("registered metrics %v, want the kind's counter at 1", mfs)
	}
}

// openStores is the one place a kind opens its stage's task stores (issue
// 22): they are named by the application and the stage under the slot's
// directory, handed to the head, and the page sees them only once the head
// is built; a head that fails to build leaves them closed and unlisted.
func TestOpenStores(t *testing.T) {
	e := &buildEnv{checkEnv: checkEnv{pl: &plan.Plan{ApplicationID: "app"}, o: DefaultOptions(), log: slog.Default()}, storeDir: t.TempDir(), stores: map[string]*state.Manager{}}
	s := &plan.Stage{Name: "s2"}

	var failed *state.Manager
	_, err := openStores(e, s, func(m *state.Manager) (int, error) {
		failed = m
		return 0, errors.New("no head")
	})
	if err == nil || err.Error() != "no head" {
		t.Fatalf("err %v, want the head's as is", err)
	}
	if _, ok := e.stores[s.Name]; ok {
		t.Errorf("a stage whose head failed is listed: %v", e.stores)
	}
	if _, err := failed.Restore(context.Background(), 0); !errors.Is(err, state.ErrClosed) {
		t.Errorf("stores of a failed head: Restore = %v, want state.ErrClosed", err)
	}

	var built *state.Manager
	h, err := openStores(e, s, func(m *state.Manager) (string, error) {
		built = m
		return "head", nil
	})
	if err != nil || h != "head" {
		t.Fatalf("openStores = %q, %v", h, err)
	}
	if e.stores[s.Name] != built || built == nil {
		t.Errorf("stores listed %v, want the head's %p", e.stores, built)
	}
	built.Close()
}

package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/sideinput"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// stages are this instance's built stages (buildStages), before their
// loops exist.
type stages struct {
	// cfgs are the stages' loop configs, in plan order.
	cfgs []stage.Config
	// heads, counters (GroupByKey stages only) and stores (stages with
	// task stores only) are by stage name.
	heads    map[string]step.Head
	counters map[string]gbkCounters
	stores   map[string]*state.Manager
	// closers close what the stages opened, in the order opened.
	closers []func()
}

// close closes what the stages opened, last opened first.
func (st *stages) close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
}

// buildStages builds every stage of j's plan, in plan order (stageConfig).
// On an error the stages built so far are in the result, for close.
func buildStages(ctx context.Context, j *job, wm *service.Server, committed *committedMetrics) (*stages, error) {
	st := &stages{heads: map[string]step.Head{}, counters: map[string]gbkCounters{}, stores: map[string]*state.Manager{}}
	base := buildEnv{
		checkEnv: checkEnv{comps: j.pipe.GetComponents(), pl: j.pl, o: j.o, log: j.log},
		heads:    j.checked.heads,
		srv:      j.srv,
		storeDir: j.inst.Stores,
		stores:   st.stores,
		users:    j.users,
		reg:      wm.Registry,
		tracker:  wm.Tracker,
		shared:   map[string]prometheus.Collector{},
	}
	if stores := storesAtMost(j.checked.changelogs); stores > 0 {
		b, err := state.NewBudget(int64(j.o.StateMemoryMB)<<20, stores)
		if err != nil {
			return st, fmt.Errorf("kafkastreams: --state_memory_mb: %w", err)
		}
		st.closers = append(st.closers, b.Close)
		base.budget = b
		if ex := b.Exceeds(); ex > 0 {
			j.log.Warn("state: the memory budget is too small for this many task stores: each has the smallest memtable, and all of them full exceed it", "budget", b.String(), "exceeds_mib", ex>>20)
		} else {
			j.log.Info("state: memory budget", "budget", b.String())
		}
	}
	metrics := newStageMetrics(wm.Registry)
	metrics.untrusted = wm.Untrusted
	for _, s := range j.pl.Stages {
		cfg, b, err := stageConfig(ctx, j, base, st, s, committed, metrics.observer(s.Name))
		if err != nil {
			return st, err
		}
		st.cfgs = append(st.cfgs, cfg)
		st.heads[s.Name] = cfg.Head
		if b.counters != nil {
			st.counters[s.Name] = b.counters
		}
	}
	return st, nil
}

// storesAtMost is the most task stores an instance can hold: every
// partition of every changelog, the whole application on one instance.
func storesAtMost(changelogs map[string]int32) int {
	n := 0
	for _, p := range changelogs {
		n += int(p)
	}
	return n
}

// stageConfig builds stage s's loop config whole: its side inputs, its
// registered descriptor, what its kind builds (stageHead.build, with the
// stage's environment e), its bundles (processFunc) and its spec. What it
// opens goes to st.closers.
func stageConfig(ctx context.Context, j *job, e buildEnv, st *stages, s *plan.Stage, committed *committedMetrics, observer stage.Observer) (stage.Config, builtHead, error) {
	comps := e.comps
	if len(s.SideInputs) > 0 {
		set, err := sideinput.New(ctx, sideinput.Config{BootstrapServers: j.o.BootstrapServers, Properties: j.o.KafkaProperties, ApplicationID: j.pl.ApplicationID, Stage: s.Name, HeadOutput: s.HeadOutput, Inputs: sideInputs(s), Components: comps, Logger: j.log,
			Untrusted: func(topic string) { observer.Untrusted(topic, 1) }})
		if err != nil {
			return stage.Config{}, builtHead{}, fmt.Errorf("kafkastreams: %w", err)
		}
		st.closers = append(st.closers, set.Close)
		set.Register(j.srv)
		e.sides = set
	}
	if len(s.Transforms) > 0 {
		fs, err := fnapi.BuildStage(comps, stageSpec(s), j.srv.Endpoint())
		if err != nil {
			return stage.Config{}, builtHead{}, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
		}
		if err := j.srv.RegisterStage(ctx, fs.Descriptor); err != nil {
			return stage.Config{}, builtHead{}, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
		}
		e.fs = fs
	}
	b, err := j.checked.heads[s.Name].build(ctx, &e)
	if err != nil {
		return stage.Config{}, builtHead{}, err
	}
	if b.close != nil {
		st.closers = append(st.closers, b.close)
	}
	var process step.ProcessFunc
	if e.fs != nil {
		process = processFunc(j.log, j.srv, s, e.fs, b.bundles, committed, j.pl.ApplicationID)
	}
	keys, err := keyOf(comps, j.pl, s)
	if err != nil {
		return stage.Config{}, builtHead{}, err
	}
	spec, err := stageLoopSpec(comps, j.pl, s, b, j.users, j.timestampAfterMax)
	if err != nil {
		return stage.Config{}, builtHead{}, err
	}
	var sides step.SideInputGate
	if e.sides != nil {
		sides = e.sides
	}
	return stage.Config{
		BootstrapServers: j.o.BootstrapServers,
		Properties:       j.o.KafkaProperties,
		Spec:             spec,
		ReportTopic:      kafkaclient.ReportTopic(j.pl.ApplicationID),
		InstanceID:       j.inst.ID,
		Process:          process,
		Head:             b.head,
		KeyOf:            keys,
		SideInputs:       sides,
		JobClock:         j.checked.jobClock,
		Consumer:         overlay(groupMembership(j.inst.ID, j.o.StaticMembership, j.o.SessionTimeout, j.o.KafkaProperties), b.consumer),
		StartAt:          b.startAt,
		CommitInterval:   j.o.CommitInterval,
		NextWindowEnd:    nextWindowEnd(comps, spec),
		PurgeInterval:    stagePurgeInterval(s, j.o.PurgeInterval),
		SpillDir:         j.inst.Stores,
		MaxBatchRecords:  j.o.MaxBundleSize,
		PollDuringCommit: j.o.PollDuringCommit,
		MaxMessageBytes:  j.limits,
		ErrorPolicy:      j.o.ErrorPolicy,
		DeadLetterTopic:  j.o.DeadLetterTopic,
		Logger:           j.log,
		Producer:         j.producers[s.Name],
		Observer:         observer,
		CommitRecords:    commitMetricsRecords(j.pl.ApplicationID, s.Name, j.inst.ID, b.head),
		WrittenTopics:    j.writtenTopics(s),
	}, b, nil
}

// writtenTopics is stage s's stage.Config.WrittenTopics: the metrics topic
// (CommitRecords writes to it) and the stage's changelog if it keeps state
// (checkedPlan.changelogs).
func (j *job) writtenTopics(s *plan.Stage) []string {
	ts := []string{kafkaclient.MetricsTopic(j.pl.ApplicationID)}
	if ct := kafkaclient.ChangelogTopic(j.pl.ApplicationID, s.Name); j.checked.changelogs[ct] > 0 {
		ts = append(ts, ct)
	}
	return ts
}

// overlay is base with over's settings added, over's winning; base is
// changed and returned.
func overlay(base, over map[string]string) map[string]string {
	for k, v := range over {
		base[k] = v
	}
	return base
}

// stagePurgeInterval is stage s's stage.Config.PurgeInterval: every, for a
// stage whose input topic may be purged (plan.Stage.PurgedInput), else 0.
func stagePurgeInterval(s *plan.Stage, every time.Duration) time.Duration {
	if !s.PurgedInput() {
		return 0
	}
	return every
}

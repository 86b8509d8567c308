package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/metricsx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/runner/plantopic"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/standby"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// job is what execute hands run: the checked plan, the instance's slot,
// its started producers and harness, the users' topics' partition
// counts, and the max.message.bytes of the topics the stages write.
type job struct {
	log       *slog.Logger
	tl        *timeline
	srv       *fnapi.Server
	harness   *startingHarness
	inst      *instance
	producers map[string]*stage.Producer
	o         Options
	pipe      *pipepb.Pipeline
	pl        *plan.Plan
	checked   *checkedPlan
	users     map[string]int32
	// limits are the max.message.bytes of the internal topics and the
	// users' topics, by topic, as the broker said them
	// (stage.Config.MaxMessageBytes).
	limits map[string]int
	// timestampAfterMax is how far ahead of the broker's clock each
	// user's topic takes a record's timestamp (userTopics;
	// step.Sink.TimestampAfterMax).
	timestampAfterMax map[string]time.Duration
}

// run is this instance's share of the application once the topics exist
// and the plan is recorded: it starts the embedded WatermarkManager,
// builds every stage (buildStages) and its loop (newLoops), serves the
// page and /metrics, watches for drains, runs the loops until every sink
// stage reaches the end of time, a stage fails or parent is done, and
// returns the Result.
func run(parent context.Context, j *job) (beam.PipelineResult, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	h, err := j.harness.wait(ctx)
	if err != nil {
		return nil, err
	}
	j.tl.mark("harness")
	wm, wmURL, err := startWatermarkService(ctx, parent, j)
	if err != nil {
		return nil, err
	}
	defer wm.Stop()
	j.tl.mark("watermark service")
	if j.inst.Reused {
		j.log.Info("kafkastreams: instance slot taken over: this instance uses its predecessor's transactional ids, so transactions a killed predecessor left open are aborted now, not at their timeout", j.inst.logAttrs()...)
	} else {
		j.log.Info("kafkastreams: instance slot", j.inst.logAttrs()...)
	}
	committed := newCommittedMetrics()
	st, err := buildStages(ctx, j, wm, committed)
	defer st.close()
	if err != nil {
		return nil, err
	}
	j.tl.mark("stages and stores")
	stopStandbys := startStandbys(ctx, j, st)
	defer stopStandbys()
	loops, err := newLoops(ctx, st.cfgs)
	if err != nil {
		return nil, err
	}
	j.tl.mark("clients and InitTransactions")
	go watchStartup(ctx, j.log, j.tl, loops)
	publish(wm, j, loops, st)
	stopSignals, err := watchDrains(ctx, j, wm, loops)
	if err != nil {
		return nil, err
	}
	defer stopSignals()
	errc, wg := runLoops(parent, ctx, j, wm.Tracker, loops)
	var stuck stuckLog
	err = waitDone(parent, j.log, wm.Tracker, j.pl, errc, h, func(running time.Duration) {
		logProgress(j.log, wm.Tracker, j.pl, loops, wmURL, running)
		logStuck(j.log, &stuck, service.Explain(wm.Tracker, wm.Info()), wm.Tracker.Now())
	})
	// Done: the metrics topic is read while the loops stop (their clients
	// leave their groups and close, 40-100 ms), not after: every bundle's
	// metrics were committed in the transaction of the data it covers, so
	// all of them are in before the sink stages' reports at the end of time.
	mctx, mcancel := context.WithTimeout(parent, applicationMetricsTimeout)
	defer mcancel()
	var appRead <-chan appMetricsRead
	if err == nil {
		// The job is done: its task stores are of no further use, so they
		// are removed at close instead of kept (state.Manager.Close).
		for _, m := range st.stores {
			m.RemoveOnClose()
		}
		appRead = readApplicationMetricsAsync(mctx, j)
	}
	cancel()
	wg.Wait()
	return result(j, loops, st.counters, committed, appRead, err)
}

// startWatermarkService starts the embedded WatermarkManager (the report
// topic says when the job is done) and its HTTP server (the page,
// /watermarks, /metrics), and tells a caller serving (parent's servingKey)
// its address. url is the watermarks' URL, empty without an HTTP address.
func startWatermarkService(ctx, parent context.Context, j *job) (wm *service.Server, url string, err error) {
	wm, err = service.Start(ctx, service.Config{
		Consumer: service.ConsumerConfig{BootstrapServers: j.o.BootstrapServers, Topic: kafkaclient.ReportTopic(j.pl.ApplicationID), Properties: j.o.KafkaProperties,
			ApplicationID: j.pl.ApplicationID, Stages: stageNames(j.pl)},
		HTTPAddr: j.o.WatermarksAddr,
		Logger:   j.log,
	})
	if err != nil {
		return nil, "", err
	}
	if a := wm.HTTPAddr(); a != "" {
		url = "http://" + a + "/watermarks"
		j.log.Info("kafkastreams: watch the watermarks: curl -s " + url + ", or open the live page: http://" + a + "/")
		if f, ok := parent.Value(servingKey{}).(func(string)); ok {
			f(a)
		}
	}
	return wm, url, nil
}

// newLoops creates every stage's loop (stage.New) together: each one's
// clients connect and its InitTransactions waits on the transaction
// coordinator, a round trip or several per stage that need not queue
// behind the other stages'. On an error every loop created is closed.
// The loops are by stage name.
func newLoops(ctx context.Context, cfgs []stage.Config) (map[string]*stage.Loop, error) {
	created := make([]*stage.Loop, len(cfgs))
	errs := make([]error, len(cfgs))
	var cwg sync.WaitGroup
	for i, cfg := range cfgs {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			created[i], errs[i] = stage.New(ctx, cfg)
		}()
	}
	cwg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, l := range created {
			if l != nil {
				l.Close()
			}
		}
		return nil, err
	}
	loops := map[string]*stage.Loop{}
	for i, cfg := range cfgs {
		loops[cfg.Spec.Name] = created[i]
	}
	return loops, nil
}

// publish serves the loops' tasks and stores on /metrics (taskCollector)
// and this instance's share of every stage on the page and the
// explanations (service.Info).
func publish(wm *service.Server, j *job, loops map[string]*stage.Loop, st *stages) {
	wm.Registry.MustRegister(taskCollector{
		tasks: func() map[string][]stage.TaskStatus {
			out := map[string][]stage.TaskStatus{}
			for name, l := range loops {
				out[name] = l.Tasks()
			}
			return out
		},
		stores: func() map[string][]state.StoreStats {
			out := map[string][]state.StoreStats{}
			for name, m := range st.stores {
				out[name] = m.Stats()
			}
			return out
		},
	})
	wm.SetInfo(service.Info{
		Instance:    j.inst.ID,
		Application: j.pl.ApplicationID,
		Stages:      plantopic.StageInfos(j.pl),
		Local:       func() map[string]service.LocalStage { return localStages(loops, st.counters, st.heads) },
		StuckAfter:  j.o.WatermarkStuckThreshold,
	})
}

// watchDrains drains the loops on a drain request (drain.go: a request in
// the control topic, from any instance, --drain or runner.Drain) and,
// until ctx is done, writes one on SIGUSR1. stop stops listening for
// SIGUSR1. A record of the control topic without the application's
// header counts in wm's kafkastreams_untrusted_records_total.
func watchDrains(ctx context.Context, j *job, wm *service.Server, loops map[string]*stage.Loop) (stop func(), err error) {
	bootstrap, props, appID := j.o.BootstrapServers, j.o.KafkaProperties, j.pl.ApplicationID
	untrusted := wm.Untrusted.WithLabelValues(kafkaclient.ControlTopic(appID)).Inc
	if err := watchDrain(ctx, j.log, bootstrap, props, appID, j.inst.ID, untrusted, func() {
		for _, l := range loops {
			l.Drain()
		}
	}); err != nil {
		return nil, err
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		select {
		case <-usr1:
			j.log.Info("kafkastreams: SIGUSR1: asking the application to drain")
			if err := Drain(ctx, bootstrap, props, appID, drainBy(j.inst.ID)); err != nil {
				j.log.Error("kafkastreams: drain request failed", "err", err)
			}
		case <-ctx.Done():
		}
	}()
	return func() { signal.Stop(usr1) }, nil
}

// runLoops runs every loop on a goroutine of its own until ctx is done,
// each after its upstream stages are done when parent asks for it
// (WithUpstreamsFirst). A loop's error goes to errc (buffered: one per
// loop); wg is done when every loop has returned.
func runLoops(parent, ctx context.Context, j *job, t *service.Tracker, loops map[string]*stage.Loop) (<-chan error, *sync.WaitGroup) {
	errc := make(chan error, len(loops))
	var wg sync.WaitGroup
	for name, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if upstreamsFirst(parent) {
				if err := waitUpstreamsDone(ctx, t, j.pl.Stage(name)); err != nil {
					l.Close()
					return
				}
				j.log.Info("kafkastreams: every upstream stage reached the end of time: starting the stage (WithUpstreamsFirst)", "stage", name)
			}
			if err := l.Run(ctx); err != nil {
				errc <- fmt.Errorf("kafkastreams: stage %s: %w", name, err)
			}
		}()
	}
	return errc, &wg
}

// appMetricsRead is what readApplicationMetrics returned.
type appMetricsRead struct {
	m                *committedMetrics
	records, skipped int
	err              error
}

// readApplicationMetricsAsync reads the application's metrics topic
// (readApplicationMetrics, bounded by ctx) in the background; the channel
// gets its one answer.
func readApplicationMetricsAsync(ctx context.Context, j *job) <-chan appMetricsRead {
	appRead := make(chan appMetricsRead, 1)
	go func() {
		var r appMetricsRead
		r.m, r.records, r.skipped, r.err = readApplicationMetrics(ctx, j.log, j.o.BootstrapServers, j.o.KafkaProperties, j.pl.ApplicationID)
		appRead <- r
	}()
	return appRead
}

// result is run's Result once the loops have stopped: their counters,
// the start-up steps, the GroupByKey counters and the metrics: with
// runErr nil (done), the application's from appRead, or this instance's
// committed ones if the metrics topic could not be read; otherwise this
// instance's, with runErr.
func result(j *job, loops map[string]*stage.Loop, counters map[string]gbkCounters, committed *committedMetrics, appRead <-chan appMetricsRead, runErr error) (*Result, error) {
	res := &Result{jobID: j.pl.ApplicationID, Plan: j.pl, Stats: map[string]stage.Stats{}}
	for name, l := range loops {
		res.Stats[name] = l.Stats()
	}
	res.Startup, res.StartupTook = j.tl.snapshot()
	res.LateDropped, res.FireBudgetStops, res.AccumulatorMerges = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for name, h := range counters {
		res.LateDropped[name] = h.Dropped()
		res.FireBudgetStops[name] = h.BudgetStops()
		res.AccumulatorMerges[name] = h.Compacted()
	}
	if runErr != nil {
		res.metrics = metricsx.FromMonitoringInfos(j.pipe, nil, committed.snapshot())
		return res, runErr
	}
	// Done: the metrics of every committed bundle of every instance.
	r := <-appRead
	if r.err != nil {
		j.log.Warn("kafkastreams: the job is done but its metrics topic could not be read: the result carries this instance's committed metrics only", "err", r.err)
		res.metrics = metricsx.FromMonitoringInfos(j.pipe, nil, committed.snapshot())
		return res, nil
	}
	j.log.Info("kafkastreams: metrics of the application", "topic", kafkaclient.MetricsTopic(j.pl.ApplicationID), "committed_bundles", r.records, "skipped", r.skipped)
	res.metrics = metricsx.FromMonitoringInfos(j.pipe, nil, r.m.snapshot())
	res.ApplicationMetrics = true
	return res, nil
}

// startStandbys starts, with Options.StandbyReplicas > 0, one standby
// follower (stage/standby) per stage with task stores, and gives those
// stages' consumers the client.id the followers place copies by
// (standby.ClientID of the user's client.id and the instance slot): call
// it before the loops are made. The returned function stops the followers
// and waits for them (before the stores close).
func startStandbys(ctx context.Context, j *job, st *stages) (stop func()) {
	n := j.o.StandbyReplicas
	if n <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	clientID := standby.ClientID(j.o.KafkaProperties["client.id"], j.inst.ID)
	for i := range st.cfgs {
		cfg := &st.cfgs[i]
		stores := st.stores[cfg.Spec.Name]
		if stores == nil {
			continue
		}
		if cfg.Consumer == nil {
			cfg.Consumer = map[string]string{}
		}
		cfg.Consumer["client.id"] = clientID
		sc := standby.Config{
			BootstrapServers: j.o.BootstrapServers,
			Properties:       j.o.KafkaProperties,
			Group:            j.pl.ApplicationID + "." + cfg.Spec.Name,
			ClientID:         clientID,
			InputTopic:       cfg.Spec.InputTopic,
			Topic:            kafkaclient.ChangelogTopic(j.pl.ApplicationID, cfg.Spec.Name),
			Replicas:         n,
			Stores:           stores,
			Logger:           j.log.With("stage", cfg.Spec.Name),
			TransactionalIDOf: func(id string) string {
				// Another instance's slot id, from its client.id
				// (standby.ClientID with the same base).
				inst, ok := strings.CutPrefix(id, strings.TrimSuffix(clientID, j.inst.ID))
				if !ok || inst == "" {
					return ""
				}
				return kafkaclient.TransactionalID(j.pl.ApplicationID, cfg.Spec.Name, inst)
			},
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = standby.Run(ctx, sc)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// stageNames are the names of pl's stages: the reports the embedded
// WatermarkManager trusts name one of them (service.ConsumerConfig.Stages).
func stageNames(pl *plan.Plan) []string {
	names := make([]string, len(pl.Stages))
	for i, s := range pl.Stages {
		names[i] = s.Name
	}
	return names
}

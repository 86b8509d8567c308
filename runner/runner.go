package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/metricsx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/runner/plantopic"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/sideinput"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// Name is the runner's name for --runner.
const Name = "kafkastreams"

func init() {
	beam.RegisterRunner(Name, Execute)
}

// Supported are the stage heads this build executes; a pipeline needing
// another is refused before any topic is created.
var Supported = map[plan.HeadKind]bool{
	plan.HeadImpulse:    true,
	plan.HeadReshuffle:  true,
	plan.HeadFlatten:    true,
	plan.HeadGroupByKey: true,
	plan.HeadSideInputs: true,
	plan.HeadStateful:   true,
	plan.HeadTestStream: true,
	plan.HeadSplittable: true,
}

// Result is the beam.PipelineResult of a kafkastreams run.
type Result struct {
	jobID   string
	metrics *metrics.Results
	// Plan is the plan this instance ran.
	Plan *plan.Plan
	// Stats are the committed counters of this instance's stage loops, by stage.
	Stats map[string]stage.Stats
	// LateDropped counts, by GroupByKey stage, the values this instance's
	// committed attempts dropped as expired (behind the watermark by more
	// than the allowed lateness; Beam's droppedDueToLateness).
	LateDropped map[string]int64
	// FireBudgetStops counts, by GroupByKey stage, the times one of this
	// instance's tasks stopped firing at --gbk_fire_budget and owed the
	// rest to the next transaction (aborted attempts included).
	FireBudgetStops map[string]int64
	// SessionMerges counts, by GroupByKey stage, the sessions whose
	// accumulators this instance merged into one at the end of an attempt
	// (--merge_session_accumulators; aborted attempts included).
	SessionMerges map[string]int64
	// ApplicationMetrics says Metrics are the whole application's.
	ApplicationMetrics bool
	// Startup are this instance's start-up steps, in order, from the
	// process start to the first input record read by any of its stages
	// (fewer when no stage read a record); StartupTook is their sum.
	Startup     []StartupStep
	StartupTook time.Duration
}

// recordsIn is how many input records this instance's stages committed.
func (r *Result) recordsIn() uint64 {
	var n uint64
	for _, st := range r.Stats {
		n += st.RecordsIn
	}
	return n
}

// unreachable reports whether err says the brokers could not be reached
// (rather than that they answered with an error).
func unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke.Code() {
	case kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrTimedOut, kafka.ErrTimedOutQueue, kafka.ErrResolve:
		return true
	}
	return false
}

// JobID is the application id.
func (r *Result) JobID() string { return r.jobID }

// Metrics are the metrics of the committed bundles (counters summed,
// distributions merged, gauges latest): of every instance of the
// application when the job is done (ApplicationMetrics, read from
// MetricsTopic), of this instance's otherwise (the job failed or was
// cancelled, or the metrics topic could not be read). Metrics of aborted
// attempts are never counted, a committed bundle's never twice.
func (r *Result) Metrics() metrics.Results {
	if r.metrics == nil {
		return metrics.Results{}
	}
	return *r.metrics
}

// Execute runs the pipeline as this instance's share of the application
// --application_id on the Kafka cluster --bootstrap_servers, and returns when
// every sink stage has reported the end of time (bounded pipelines), ctx is
// done, or a stage fails.
func Execute(ctx context.Context, p *beam.Pipeline) (beam.PipelineResult, error) {
	defer closing.Wait()
	o := optionsOf(ctx)
	res, err := execute(ctx, p, o)
	// No error says a password (librdkafka's never do, but an error quoting a
	// client's configuration would).
	err = redactError(err, o.KafkaProperties)
	switch {
	case err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// Stopped (SIGINT, SIGTERM, the caller's cancel): the tasks move to
		// the other instances; nothing failed.
		slog.Default().Info("kafkastreams: the instance stopped", "runner", Name, "cause", context.Cause(ctx))
	case err != nil:
		// Beam's log package turns the standard logger into INFO lines, so a
		// caller's log.Fatal(err) would look harmless: say it at ERROR too.
		slog.Default().Error("kafkastreams: the job failed", "runner", Name, "err", err)
	}
	return res, err
}

// stageSpec is the Fn API view of stage s: its fused transforms, fed by the
// head's output. The head's own output, when it also leaves the stage, is not
// a descriptor output (see processFunc).
func stageSpec(s *plan.Stage) fnapi.StageSpec {
	var outs []string
	seen := map[string]bool{s.HeadOutput: true}
	for _, o := range s.Outputs {
		if !seen[o.PCollection] {
			seen[o.PCollection] = true
			outs = append(outs, o.PCollection)
		}
	}
	for _, k := range s.KafkaSinks {
		if !seen[k.PCollection] {
			seen[k.PCollection] = true
			outs = append(outs, k.PCollection)
		}
	}
	return fnapi.StageSpec{ID: s.Name, Transforms: s.Transforms, Input: s.HeadOutput, Outputs: outs}
}

// execute runs p with o (Execute's options): the one function that has
// them all; it hands each part of the runner what that part needs.
func execute(ctx context.Context, p *beam.Pipeline, o Options) (beam.PipelineResult, error) {
	log := slog.Default().With("runner", Name)
	tl := newTimeline()
	tl.mark("process start to Execute")
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if !beam.Initialized() {
		beam.Init() // the harness runs in this process: its init hooks must have run
	}
	// DoFns read beam.PipelineOptions in this process: load the flags into
	// them, as the direct and universal runners do for their workers.
	beam.PipelineOptions.LoadOptionsFromFlags(nil)
	o.resolve(log)
	bootstrap, from, appID := o.BootstrapServers, o.bootstrapFrom, o.ApplicationID
	if o.Drain {
		if err := Drain(ctx, bootstrap, o.KafkaProperties, appID, drainBy("")); err != nil {
			return nil, err
		}
		log.Info("kafkastreams: drain requested (--drain): the application's instances stop reading their sources, fire every window and timer, and exit", "application_id", appID)
		return &Result{jobID: appID, Stats: map[string]stage.Stats{}}, nil
	}

	edges, _, err := p.Build()
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: invalid pipeline: %w", err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: marshal pipeline: %w", err)
	}
	pl, err := plan.Build(pipe, plan.Options{ApplicationID: appID, Partitions: int32(o.InternalTopicPartitions), Supported: Supported})
	if err != nil {
		return nil, err
	}
	log.Info("kafkastreams: plan", "application_id", appID, "stages", len(pl.Stages), "bootstrap_servers", bootstrap)
	for _, s := range pl.Stages {
		log.Info("kafkastreams: stage", "stage", s.Name, "head", s.Head, "tasks", s.Partitions, "fused", s.TransformNames, "upstreams", s.Upstreams)
	}
	props := o.KafkaProperties
	gbks, err := planGroupByKeys(pipe.GetComponents(), pl)
	if err != nil {
		return nil, err
	}
	streams, err := planTestStreams(pipe.GetComponents(), pl)
	if err != nil {
		return nil, err
	}
	sources, err := kafkaSources(pipe.GetComponents(), pl, bootstrap, o.DefaultIdleness)
	if err != nil {
		return nil, err
	}
	if err := checkKafkaSinks(pipe.GetComponents(), pl, bootstrap); err != nil {
		return nil, err
	}
	if err := checkNoWatermarks(pipe.GetComponents(), pl, sources); err != nil {
		return nil, err
	}
	for name, c := range sources {
		if strategyOf(c, o.DefaultIdleness).Idleness == 0 && c.Watermark.Kind != kafkaio.LimitedDelay { // a limited delay has no idleness: its quiet partitions follow the wall clock
			log.Warn("kafkastreams: a Kafka source has idleness off: a partition that goes quiet holds the watermark of everything downstream until it gets a record again (set kafkaio.WithIdleness, or --default_idleness)", "stage", name, "topic", c.Topics[0])
		}
	}
	// Every stage's descriptor must build (an unbounded splittable DoFn, say,
	// is refused there) before anything is created on the cluster.
	for _, s := range pl.Stages {
		if len(s.Transforms) > 0 {
			if _, err := fnapi.BuildStage(pipe.GetComponents(), stageSpec(s), "127.0.0.1:0"); err != nil {
				return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
			}
		}
	}
	brokerErr := func(err error) error {
		if unreachable(err) {
			return fmt.Errorf("%w (bootstrap servers %s, from %s: is a broker running there?)", err, bootstrap, from)
		}
		return fmt.Errorf("%w (bootstrap servers %s, from %s)", err, bootstrap, from)
	}
	tl.mark("plan")
	inst, err := claimInstance(o.StateDir, pl.ApplicationID)
	if err != nil {
		return nil, err
	}
	defer inst.release()
	// Every transactional producer's InitTransactions starts now, in the
	// background: they need no topic, and their round trips to the
	// transaction coordinator then overlap the broker check, the topics and
	// the plan instead of following them.
	planProducer := startPlanProducer(ctx, bootstrap, props, pl)
	defer planProducer.close()
	producers := map[string]*stage.Producer{}
	defer func() {
		for _, pr := range producers {
			pr.Close() // those no loop took over
		}
	}()
	for _, s := range pl.Stages {
		producers[s.Name] = stage.StartProducer(ctx, bootstrap, props, pl.ApplicationID, s.Name, inst.ID, log)
	}
	// The SDK harness connects to the Fn API servers meanwhile too.
	srv, err := fnapi.NewServer(fnapi.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	harness := startHarness(ctx, srv)
	defer harness.stop()
	tl.mark("instance slot, producers started")
	// The broker check runs beside the users' topics and the topics: on a
	// cluster that answers, its client's connection and metadata request
	// (80-260 ms measured) need not come first. Its error, when it has one,
	// is the one returned, the others cancelled: a failed SASL or TLS
	// handshake is said at once, not as createTopics' timeout 30 s later.
	// The timeline marks the three steps in the order they end.
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	var (
		users                    map[string]int32
		usersErr, topicsErr      error
		initialised, planCreated bool
	)
	topicsDone := make(chan struct{})
	go func() {
		defer close(topicsDone)
		if users, usersErr = userTopics(tctx, bootstrap, props, pl, sources); usersErr != nil {
			return
		}
		tl.mark("users' topics")
		// Checked before the topics are asked for: a plan topic created
		// after the plan producer's InitTransactions is read by no first
		// attempt (planProducer.empty).
		initialised = planProducer.initialised()
		if planCreated, topicsErr = createTopics(tctx, bootstrap, props, pl); topicsErr == nil {
			tl.mark("topics")
		}
	}()
	if err := checkBrokers(ctx, bootstrap, props); err != nil {
		tcancel()
		<-topicsDone
		return nil, brokerErr(err)
	}
	tl.mark("brokers")
	<-topicsDone
	if usersErr != nil {
		if unreachable(usersErr) {
			return nil, brokerErr(usersErr)
		}
		return nil, usersErr
	}
	if topicsErr != nil {
		return nil, brokerErr(topicsErr)
	}
	planProducer.empty = initialised && planCreated
	recorded, err := recordPlan(ctx, bootstrap, props, pl, sourceRecords(pl, streams), planProducer, tl.mark)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: application %s: %w", appID, err)
	}
	if recorded {
		log.Info("kafkastreams: recorded the plan for the application", "topic", kafkaclient.PlanTopic(appID))
	} else {
		log.Info("kafkastreams: plan matches the recorded plan; joining the application", "topic", kafkaclient.PlanTopic(appID))
	}
	res, err := run(ctx, log, tl, srv, harness, inst, producers, o, pipe, pl, gbks, users, sources)
	if err == nil && !recorded {
		if r, ok := res.(*Result); ok && r.recordsIn() == 0 {
			log.Warn("kafkastreams: application "+appID+" had already finished: this instance found every sink stage at the end of time and processed nothing; to run the job again, use a new --application_id", "application_id", appID)
		}
	}
	return res, err
}

func run(parent context.Context, log *slog.Logger, tl *timeline, srv *fnapi.Server, harness *startingHarness, inst *instance, producers map[string]*stage.Producer, o Options, pipe *pipepb.Pipeline, pl *plan.Plan, gbks map[string]*gbkSpec, users map[string]int32, sources map[string]kafkaio.Config) (beam.PipelineResult, error) {
	bootstrap, props := o.BootstrapServers, o.KafkaProperties
	ctx, cancel := context.WithCancel(parent)
	defer cancel()

	h, err := harness.wait(ctx)
	if err != nil {
		return nil, err
	}
	tl.mark("harness")

	// The embedded WatermarkManager: the report topic says when the job is done.
	wm, err := service.Start(ctx, service.Config{
		Consumer: service.ConsumerConfig{BootstrapServers: bootstrap, Topic: kafkaclient.ReportTopic(pl.ApplicationID), Properties: props},
		HTTPAddr: o.WatermarksAddr,
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	defer wm.Stop()
	var wmURL string
	if a := wm.HTTPAddr(); a != "" {
		wmURL = "http://" + a + "/watermarks"
		log.Info("kafkastreams: watch the watermarks: curl -s " + wmURL + ", or open the live page: http://" + a + "/")
		if f, ok := parent.Value(servingKey{}).(func(string)); ok {
			f(a)
		}
	}

	tl.mark("watermark service")
	committed := newCommittedMetrics()
	if inst.Reused {
		log.Info("kafkastreams: instance slot taken over: this instance uses its predecessor's transactional ids, so transactions a killed predecessor left open are aborted now, not at their timeout", inst.logAttrs()...)
	} else {
		log.Info("kafkastreams: instance slot", inst.logAttrs()...)
	}
	badRecords := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kafkastreams_source_bad_records_total",
		Help: "Records of a Kafka source whose event time the timestamp function could not give (kafkaio.WithTimestampFn): skipped, and written to the dead-letter topic if there is one.",
	}, []string{"stage", "topic", "partition"})
	wm.Registry.MustRegister(badRecords)
	groups := alignmentGroups(sources)
	// A job with a TestStream runs on its job clock (step.Config.JobClock).
	jobClock := false
	for _, s := range pl.Stages {
		jobClock = jobClock || s.Head == plan.HeadTestStream
	}
	metrics := newStageMetrics(wm.Registry)
	stores := map[string]*state.Manager{}
	loops := map[string]*stage.Loop{}
	gbkHeads := map[string]*gbk.Head{}
	var cfgs []stage.Config
	for _, s := range pl.Stages {
		spec, err := LoopSpec(pl, s)
		if err != nil {
			return nil, err
		}
		markIntervalWindows(pipe.GetComponents(), &spec)
		if spec.Sinks, err = sinkSpecs(pipe.GetComponents(), s, users); err != nil {
			return nil, err
		}
		if s.Head == plan.HeadKafkaSource {
			spec.Partitions = users[s.InputTopic]
			spec.GrowingInput = true
		}
		cfg := stage.Config{
			BootstrapServers: bootstrap,
			Properties:       props,
			Spec:             spec,
			ReportTopic:      kafkaclient.ReportTopic(pl.ApplicationID),
			InstanceID:       inst.ID,
			CommitInterval:   o.CommitInterval,
			SpillDir:         inst.Stores,
			MaxBatchRecords:  o.MaxBundleSize,
			Consumer:         groupMembership(inst.ID, o.StaticMembership, o.SessionTimeout, props),
			Producer:         producers[s.Name],
			Logger:           log,
			JobClock:         jobClock,
			Observer:         metrics.observer(s.Name),
		}
		var sides *sideinput.Set
		if len(s.SideInputs) > 0 {
			set, err := sideinput.New(ctx, sideinput.Config{BootstrapServers: bootstrap, Properties: props, ApplicationID: pl.ApplicationID, Stage: s.Name, HeadOutput: s.HeadOutput, Inputs: sideInputs(s), Components: pipe.GetComponents(), Logger: log})
			if err != nil {
				return nil, fmt.Errorf("kafkastreams: %w", err)
			}
			defer set.Close()
			set.Register(srv)
			cfg.SideInputs = set
			sides = set
		}
		var impulseCoder *coder.Coder
		if len(s.Transforms) > 0 {
			fs, err := fnapi.BuildStage(pipe.GetComponents(), stageSpec(s), srv.Endpoint())
			if err != nil {
				return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
			}
			if err := srv.RegisterStage(ctx, fs.Descriptor); err != nil {
				return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
			}
			if s.Head == plan.HeadStateful {
				sh, err := newStatefulHead(pipe.GetComponents(), pl, s, fs, sides, inst.Stores, bootstrap, props, log, stores)
				if err != nil {
					return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
				}
				defer sh.Close()
				srv.RegisterUserState(s.HeadTransform, sh)
				cfg.Head = sh
			}
			if s.Head == plan.HeadSplittable {
				sh, err := newSplittableHead(pl, s, inst.Stores, bootstrap, props, log, stores)
				if err != nil {
					return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
				}
				defer sh.Close()
				cfg.Head = sh
			}
			var drainFS *fnapi.Stage
			if s.Head == plan.HeadSplittable {
				if drainFS, err = buildDrainStage(pipe.GetComponents(), s, srv.Endpoint()); err != nil {
					return nil, fmt.Errorf("kafkastreams: stage %s: drain descriptor: %w", s.Name, err)
				}
				if err := srv.RegisterStage(ctx, drainFS.Descriptor); err != nil {
					return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
				}
			}
			cfg.Process = processFunc(srv, s, fs, drainFS, committed, kafkaclient.MetricsTopic(pl.ApplicationID), o.CommitInterval)
			if s.Head == plan.HeadImpulse {
				if impulseCoder, err = graphx.NewCoderUnmarshaller(fs.Descriptor.GetCoders()).Coder(fs.WireCoders[s.HeadOutput]); err != nil {
					return nil, fmt.Errorf("kafkastreams: stage %s: impulse coder: %w", s.Name, err)
				}
			}
		} else if s.Head == plan.HeadImpulse {
			impulseCoder = coder.NewW(coder.NewBytes(), coder.NewGlobalWindow())
		}
		if impulseCoder != nil {
			var buf bytes.Buffer
			enc := exec.MakeElementEncoder(impulseCoder)
			if err := enc.Encode(&exec.FullValue{Elm: []byte{}, Timestamp: mtime.MinTimestamp, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}, &buf); err != nil {
				return nil, fmt.Errorf("kafkastreams: stage %s: encode impulse: %w", s.Name, err)
			}
			cfg.Head = &step.Passthrough{Impulse: buf.Bytes()}
		}
		if cfg.KeyOf, err = keyOf(pipe.GetComponents(), pl, s); err != nil {
			return nil, err
		}
		if s.Head == plan.HeadTestStream {
			segs, err := planTestStreams(pipe.GetComponents(), &plan.Plan{Stages: []*plan.Stage{s}})
			if err != nil {
				return nil, err
			}
			if cfg.Head, err = newTestStreamHead(pipe.GetComponents(), s, segs[s.Name]); err != nil {
				return nil, err
			}
		}
		if spec := gbks[s.Name]; spec != nil {
			merger, err := sessionMerger(ctx, srv, pipe.GetComponents(), s, spec, o.MergeSessionAccumulators)
			if err != nil {
				return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
			}
			h, err := newGBKHead(spec, pl, s, inst.Stores, bootstrap, props, log, stores, merger, o.GBKFireBudget)
			if err != nil {
				return nil, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
			}
			defer h.Close()
			cfg.Head = h
			gbkHeads[s.Name] = h
			wm.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "kafkastreams_late_elements_dropped_total",
				Help:        "Elements behind the watermark by more than the allowed lateness, dropped by the stage's GroupByKey (Beam: droppedDueToLateness).",
				ConstLabels: prometheus.Labels{"stage": s.Name},
			}, func() float64 { return float64(h.Dropped()) }))
		}
		if c, ok := sources[s.Name]; ok {
			bad := badRecords.MustCurryWith(prometheus.Labels{"stage": s.Name, "topic": s.InputTopic})
			var gmin func(map[int32]bool) (mtime.Time, bool)
			if g := c.Watermark.AlignmentGroup; g != "" {
				gmin = groupMin(wm.Tracker, s.Name, groups[g])
			}
			if cfg.Head, err = newKafkaSourceHead(ctx, pipe.GetComponents(), s, c, o.DefaultIdleness, bootstrap, props, log, func(p int32, n int) {
				bad.WithLabelValues(fmt.Sprint(p)).Add(float64(n))
			}, gmin); err != nil {
				return nil, err
			}
			// The loop finds new partitions of the topic within
			// stage.PartitionCheck and its reports carry the new count; the
			// group assigns them once a member's consumer sees them (its
			// metadata refresh, librdkafka's default 5 min; the loop's
			// metadata requests go through the same consumer).
			cfg.Consumer["topic.metadata.refresh.interval.ms"] = "10000"
			for k, v := range c.Properties {
				cfg.Consumer[k] = v
			}
			switch c.Start {
			case kafkaio.Latest:
				cfg.Consumer["auto.offset.reset"] = "latest"
			case kafkaio.AtTimestamp:
				cfg.StartAt = time.UnixMilli(c.StartAtMs)
			}
			if c.ReadUncommitted {
				cfg.Consumer["isolation.level"] = "read_uncommitted"
			}
			// Partition EOFs tell the head a partition has no backlog (only
			// then may it idle) and where a bounded read ends.
			cfg.Consumer["enable.partition.eof"] = "true"
		}
		if cfg.Head == nil {
			cfg.Head = &step.Passthrough{}
		}
		cfg.CommitRecords = commitMetricsRecords(kafkaclient.MetricsTopic(pl.ApplicationID), s.Name, inst.ID, cfg.Head)
		cfgs = append(cfgs, cfg)
	}
	tl.mark("stages and stores")
	// The loops start together: each one's clients connect and its
	// InitTransactions waits on the transaction coordinator, a round trip or
	// several per stage that need not queue behind the other stages'.
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
	heads := map[string]step.Head{}
	for i, cfg := range cfgs {
		loops[cfg.Spec.Name] = created[i]
		heads[cfg.Spec.Name] = cfg.Head
	}
	tl.mark("clients and InitTransactions")
	go watchStartup(ctx, log, tl, loops)
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
			for name, m := range stores {
				out[name] = m.Stats()
			}
			return out
		},
	})
	wm.SetInfo(service.Info{
		Instance:    inst.ID,
		Application: pl.ApplicationID,
		Stages:      plantopic.StageInfos(pl),
		Local:       func() map[string]service.LocalStage { return localStages(loops, gbkHeads, heads) },
		StuckAfter:  o.WatermarkStuckThreshold,
	})

	// Drain (drain.go): a request in the control topic, from any instance,
	// --drain or runner.Drain; SIGUSR1 here writes one.
	if err := watchDrain(ctx, log, bootstrap, props, pl.ApplicationID, inst.ID, func() {
		for _, l := range loops {
			l.Drain()
		}
	}); err != nil {
		return nil, err
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	go func() {
		select {
		case <-usr1:
			log.Info("kafkastreams: SIGUSR1: asking the application to drain")
			if err := Drain(ctx, bootstrap, props, pl.ApplicationID, drainBy(inst.ID)); err != nil {
				log.Error("kafkastreams: drain request failed", "err", err)
			}
		case <-ctx.Done():
		}
	}()

	errc := make(chan error, len(loops))
	var wg sync.WaitGroup
	for name, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if upstreamsFirst(parent) {
				if err := waitUpstreamsDone(ctx, wm.Tracker, pl.Stage(name)); err != nil {
					l.Close()
					return
				}
				log.Info("kafkastreams: every upstream stage reached the end of time: starting the stage (WithUpstreamsFirst)", "stage", name)
			}
			if err := l.Run(ctx); err != nil {
				errc <- fmt.Errorf("kafkastreams: stage %s: %w", name, err)
			}
		}()
	}
	var stuck stuckLog
	err = waitDone(ctx, log, wm.Tracker, pl, errc, h, func(running time.Duration) {
		logProgress(log, wm.Tracker, pl, loops, wmURL, running)
		logStuck(log, &stuck, service.Explain(wm.Tracker, wm.Info()), wm.Tracker.Now())
	})
	// Done: the metrics topic is read while the loops stop (their clients
	// leave their groups and close, 40-100 ms), not after: every bundle's
	// metrics were committed in the transaction of the data it covers, so
	// all of them are in before the sink stages' reports at the end of time.
	mctx, mcancel := context.WithTimeout(parent, applicationMetricsTimeout)
	defer mcancel()
	type appMetricsRead struct {
		m                *committedMetrics
		records, skipped int
		err              error
	}
	appRead := make(chan appMetricsRead, 1)
	if err == nil {
		go func() {
			var r appMetricsRead
			r.m, r.records, r.skipped, r.err = readApplicationMetrics(mctx, log, bootstrap, props, kafkaclient.MetricsTopic(pl.ApplicationID))
			appRead <- r
		}()
	}
	cancel()
	wg.Wait()

	res := &Result{jobID: pl.ApplicationID, Plan: pl, Stats: map[string]stage.Stats{}}
	for name, l := range loops {
		res.Stats[name] = l.Stats()
	}
	res.Startup, res.StartupTook = tl.snapshot()
	res.LateDropped, res.FireBudgetStops, res.SessionMerges = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for name, h := range gbkHeads {
		res.LateDropped[name] = h.Dropped()
		res.FireBudgetStops[name] = h.BudgetStops()
		res.SessionMerges[name] = h.Compacted()
	}
	if err != nil {
		res.metrics = metricsx.FromMonitoringInfos(pipe, nil, committed.snapshot())
		return res, err
	}
	// Done: the metrics of every committed bundle of every instance.
	r := <-appRead
	app, records, skipped, merr := r.m, r.records, r.skipped, r.err
	if merr != nil {
		log.Warn("kafkastreams: the job is done but its metrics topic could not be read: the result carries this instance's committed metrics only", "err", merr)
		res.metrics = metricsx.FromMonitoringInfos(pipe, nil, committed.snapshot())
		return res, nil
	}
	log.Info("kafkastreams: metrics of the application", "topic", kafkaclient.MetricsTopic(pl.ApplicationID), "committed_bundles", records, "skipped", skipped)
	res.metrics = metricsx.FromMonitoringInfos(pipe, nil, app.snapshot())
	res.ApplicationMetrics = true
	return res, nil
}

// finalizeTimeout bounds one bundle's finalization callbacks.
const finalizeTimeout = 30 * time.Second

// processFunc runs bundles of stage name on the in-process harness: the
// work's elements to the descriptor's data source, its timers to their
// families. A bundle that returns residuals (a splittable DoFn
// checkpointed) fails: resuming them is not supported yet, and dropping
// them would lose data. When the head's output PCollection also leaves the
// stage (it feeds a fused ParDo and a GroupByKey, say), the bundle's input
// elements are that output as they are. The bundle's timers go back to the
// head through the step (step.Head.Results).
func processFunc(srv *fnapi.Server, st *plan.Stage, fs, drainFS *fnapi.Stage, committed *committedMetrics, metricsTopic string, checkpointAfter time.Duration) step.ProcessFunc {
	name := st.Name
	headOut := false
	for _, o := range st.Outputs {
		headOut = headOut || o.PCollection == st.HeadOutput
	}
	for _, k := range st.KafkaSinks {
		headOut = headOut || k.PCollection == st.HeadOutput
	}
	var opt fnapi.BundleOptions
	if st.Head == plan.HeadSplittable {
		// Runner-initiated checkpoints keep a bundle of a splittable DoFn
		// within the commit interval (a DoFn that never returns by itself
		// is split at its next claim; the rest is kept as a residual).
		opt.CheckpointAfter = checkpointAfter
	}
	bySink := map[string]string{}
	for pc, sink := range fs.Sinks {
		bySink[sink] = pc
	}
	if drainFS != nil {
		for pc, sink := range drainFS.Sinks {
			bySink[sink] = pc
		}
	}
	return func(ctx context.Context, w step.Work, emit step.Emit) (*step.Bundle, error) {
		desc, src, o := name, fs.Source, opt
		if w.Drain {
			if drainFS == nil {
				return nil, fmt.Errorf("kafkastreams: stage %s: work to truncate (a drain) in a stage without a drain descriptor", name)
			}
			desc, src, o = drainFS.Descriptor.GetId(), drainFS.Source, fnapi.BundleOptions{}
		}
		// The outputs stream to the step as the harness sends them, so
		// that a bundle's output is never held whole.
		o.OnOutput = func(sink string, es [][]byte) error { return emit(bySink[sink], es) }
		r, err := srv.RunBundleWith(ctx, desc, map[string][][]byte{src: w.Elements}, w.Timers, o)
		if err != nil {
			return nil, err
		}
		if n := len(r.Residuals); n > 0 && st.Head != plan.HeadSplittable {
			return nil, fmt.Errorf("kafkastreams: a splittable DoFn (transform %s) checkpointed, leaving %d residuals: resuming residuals (self-checkpointing and unbounded splittable DoFns) is not supported yet", r.Residuals[0].TransformID, n)
		}
		out := map[string][][]byte{}
		for sink, es := range r.Outputs {
			out[bySink[sink]] = append(out[bySink[sink]], es...)
		}
		if headOut {
			out[st.HeadOutput] = w.Elements
		}
		infos := r.MonitoringInfos
		finalize := r.Finalize
		b := &step.Bundle{Outputs: out, Timers: r.Timers, Residuals: r.Residuals, Committed: func() {
			committed.add(infos)
			if finalize != "" {
				// Beam's bundle finalization: the callbacks run once the
				// bundle's output is committed, never for an aborted one.
				fctx, cancel := context.WithTimeout(context.Background(), finalizeTimeout)
				defer cancel()
				if err := srv.FinalizeBundle(fctx, finalize); err != nil {
					slog.Warn("kafkastreams: bundle finalization failed (its output is committed)", "stage", name, "err", err)
				}
			}
		}}
		if rec, ok := metricsRecord(metricsTopic, name, infos); ok {
			b.Extra = append(b.Extra, rec)
		}
		return b, nil
	}
}

// waitDone returns nil once every sink stage's watermark is the end of time,
// or the first stage error, or ctx's error. Every 10 s, and once more when
// done, it calls progress (logProgress: each stage's watermark and element
// counts), so a stuck job says which stage and partition hold it.
func waitDone(ctx context.Context, log *slog.Logger, t *service.Tracker, pl *plan.Plan, errc <-chan error, h *fnapi.Harness, progress func(running time.Duration)) error {
	start := time.Now()
	sinks := pl.Sinks()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		changed := t.Changed()
		done := true
		for _, s := range sinks {
			v, err := t.Stage(s.Name)
			if err != nil || v.Snapshot.Held || v.Snapshot.Watermark < mtime.MaxTimestamp {
				done = false
				break
			}
		}
		if done {
			log.Info("kafkastreams: every sink stage reached the end of time: done")
			progress(time.Since(start)) // the final counts
			return nil
		}
		select {
		case <-changed:
		case err := <-errc:
			if ctx.Err() != nil {
				return ctx.Err() // stopping: what failed as it stopped is its consequence
			}
			return err
		case <-h.Done():
			if ctx.Err() != nil {
				// Stopping: the harness ends with the context, and the
				// select may see it first.
				return ctx.Err()
			}
			if err := h.Err(); err != nil {
				return err
			}
			return errors.New("kafkastreams: the SDK harness exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			progress(time.Since(start))
		}
	}
}

// startingHarness is the in-process SDK harness, started in the background
// (startHarness) while the application is set up.
type startingHarness struct {
	done chan struct{}
	h    *fnapi.Harness
	err  error
}

// startHarness starts srv's harness (Server.StartHarness, bounded by ctx)
// in the background.
func startHarness(ctx context.Context, srv *fnapi.Server) *startingHarness {
	sh := &startingHarness{done: make(chan struct{})}
	go func() {
		defer close(sh.done)
		sh.h, sh.err = srv.StartHarness(ctx)
	}()
	return sh
}

// wait returns the harness once it has connected, or the error that
// stopped it, or ctx's.
func (sh *startingHarness) wait(ctx context.Context) (*fnapi.Harness, error) {
	select {
	case <-sh.done:
		return sh.h, sh.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stop stops the harness once StartHarness has returned.
func (sh *startingHarness) stop() {
	<-sh.done
	if sh.h != nil {
		sh.h.Stop()
	}
}

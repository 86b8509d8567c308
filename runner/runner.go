package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// Name is the runner's name for --runner.
const Name = "kafkastreams"

func init() {
	beam.RegisterRunner(Name, Execute)
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
	// AccumulatorMerges counts, by GroupByKey stage, the (key, window)s
	// whose accumulators this instance merged into one at the end of an
	// attempt (--merge_accumulators; aborted attempts included).
	AccumulatorMerges map[string]int64
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
	err = kafkaclient.RedactError(err, o.KafkaProperties)
	log := runnerLogger(o.KafkaProperties)
	switch {
	case err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// Stopped (SIGINT, SIGTERM, the caller's cancel): the tasks move to
		// the other instances; nothing failed.
		log.Info("kafkastreams: the instance stopped", "cause", context.Cause(ctx))
	case err != nil:
		// Beam's log package turns the standard logger into INFO lines, so a
		// caller's log.Fatal(err) would look harmless: say it at ERROR too.
		log.Error("kafkastreams: the job failed", "err", err)
	}
	return res, err
}

// startLogger is slog's default logger as it was when this package was
// initialised, before the program's main ran: initBeam tells from it
// whether the caller set a default logger of its own.
var startLogger = slog.Default()

// initBeam runs beam.Init unless the program did, keeping a default slog
// logger the program set before Execute. Beam's init hook
// (log.SetupLoggingWithDefault) makes slog's default a text handler on
// stderr of its own: a program that set a JSON handler and did not call
// beam.Init first saw its lines change format at run time, and a test's
// log counter stopped counting at the process's first job (seen: the
// counter of issue 23's transaction timeout test read 0 while the line
// was printed).
func initBeam() {
	if beam.Initialized() {
		return
	}
	caller := slog.Default()
	beam.Init()
	if caller != startLogger {
		slog.SetDefault(caller)
	}
}

// runnerLogger is the logger of a run whose client properties are props
// (--kafka_property, then the Kafka reads' own): slog.Default's handler
// through kafkaclient.RedactHandler, so that no line of the runner, its
// stage loops, heads and embedded WatermarkManager (execute hands it to
// each of them) shows the value of a secret property, whatever error text
// it quotes; every line carries runner=Name.
func runnerLogger(props ...map[string]string) *slog.Logger {
	return slog.New(kafkaclient.RedactHandler(slog.Default().Handler(), props...)).With("runner", Name)
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
// them all; it hands each part of the runner what that part needs. Its
// steps: check the options, plan and check the pipeline (planPipeline:
// nothing exists on the cluster yet), take an instance slot and start the
// producers and the harness in the background, create the topics
// (setupTopics), record the plan, and run this instance's share (run).
func execute(ctx context.Context, p *beam.Pipeline, o Options) (_ beam.PipelineResult, err error) {
	log := runnerLogger(o.KafkaProperties)
	// The Kafka reads' own properties, once the plan is checked: their
	// secrets are hidden too (Execute hides --kafka_property's).
	var readProps []map[string]string
	defer func() { err = kafkaclient.RedactError(err, readProps...) }()
	tl := newTimeline()
	tl.mark("process start to Execute")
	if err := o.Validate(); err != nil {
		return nil, err
	}
	defer setGCPercent(o.GCPercent)()
	initBeam() // the harness runs in this process: its init hooks must have run
	// DoFns read beam.PipelineOptions in this process: load the flags into
	// them, as the direct and universal runners do for their workers.
	beam.PipelineOptions.LoadOptionsFromFlags(nil)
	o.resolve(log)
	appID := o.ApplicationID
	if o.Drain {
		return requestDrain(ctx, log, o)
	}
	pipe, pl, cp, err := planPipeline(log, p, o)
	if err != nil {
		return nil, err
	}
	readProps = cp.properties
	log = runnerLogger(append([]map[string]string{o.KafkaProperties}, readProps...)...)
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
	planProducer := startPlanProducer(ctx, o.BootstrapServers, o.KafkaProperties, pl)
	defer planProducer.close()
	producers := startProducers(ctx, o, pl, inst.ID, log)
	defer func() {
		for _, pr := range producers {
			pr.Close() // those no loop took over
		}
	}()
	// The SDK harness connects to the Fn API servers meanwhile too.
	srv, err := fnapi.NewServer(fnapi.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	harness := startHarness(ctx, srv)
	defer harness.stop()
	tl.mark("instance slot, producers started")
	users, limits, afterMax, err := setupTopics(ctx, tl, o, pl, cp, planProducer)
	if err != nil {
		return nil, err
	}
	recorded, err := recordPlan(ctx, log, o.BootstrapServers, o.KafkaProperties, pl, cp.records, planProducer, tl.mark)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: application %s: %w", appID, err)
	}
	if recorded {
		log.Info("kafkastreams: recorded the plan for the application", "topic", kafkaclient.PlanTopic(appID))
	} else {
		log.Info("kafkastreams: plan matches the recorded plan; joining the application", "topic", kafkaclient.PlanTopic(appID))
	}
	res, err := run(ctx, &job{log: log, tl: tl, srv: srv, harness: harness, inst: inst, producers: producers, o: o, pipe: pipe, pl: pl, checked: cp, users: users, limits: limits, timestampAfterMax: afterMax})
	if err == nil && !recorded {
		if r, ok := res.(*Result); ok && r.recordsIn() == 0 {
			log.Warn("kafkastreams: application "+appID+" had already finished: this instance found every sink stage at the end of time and processed nothing; to run the job again, use a new --application_id", "application_id", appID)
		}
	}
	return res, err
}

// finalizeTimeout bounds one bundle's finalization callbacks.
const finalizeTimeout = 30 * time.Second

// processFunc runs bundles of stage st on the in-process harness: the
// work's elements to the descriptor's data source, its timers to their
// families, drain work to bo.drain; bo.checkpointAfter asks a running
// bundle to checkpoint. A bundle that returns residuals (a splittable
// DoFn checkpointed) fails unless bo.residuals (the head keeps them):
// dropping them would lose data. When the head's output PCollection also leaves the
// stage (it feeds a fused ParDo and a GroupByKey, say), the bundle's input
// elements are that output as they are. The bundle's timers go back to the
// head through the step (step.Head.Results). A failed finalization is
// logged on log (the run's: runnerLogger).
func processFunc(log *slog.Logger, srv *fnapi.Server, st *plan.Stage, fs *fnapi.Stage, bo bundleOptions, committed *committedMetrics, app string) step.ProcessFunc {
	drainFS := bo.drain
	name := st.Name
	headOut := false
	for _, o := range st.Outputs {
		headOut = headOut || o.PCollection == st.HeadOutput
	}
	for _, k := range st.KafkaSinks {
		headOut = headOut || k.PCollection == st.HeadOutput
	}
	opt := fnapi.BundleOptions{CheckpointAfter: bo.checkpointAfter}
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
		if n := len(r.Residuals); n > 0 && !bo.residuals {
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
					log.Warn("kafkastreams: bundle finalization failed (its output is committed)", "stage", name, "err", err)
				}
			}
		}}
		if rec, ok := metricsRecord(app, name, infos); ok {
			b.Extra = append(b.Extra, rec)
		}
		return b, nil
	}
}

// waitDone returns nil once every sink stage's watermark is the end of time,
// or the first stage error, or ctx's error. Every 10 s, and once more when
// done, it calls progress (logProgress: each stage's watermark and element
// counts), so a stuck job says which stage and partition hold it.
//
// ctx is the caller's context (Execute's), never one derived from it here:
// its cancellation reaches its children (the harness's, the loops') one
// after another, so a harness or loop that ends of a cancelled child can
// be seen before a sibling context says so, while ctx's own error is set
// before any child is cancelled. That is how a stop is told from a failure.
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

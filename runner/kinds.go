package runner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/sideinput"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// A head kind's runner-side home. Each plan.HeadKind the runner executes
// has one file, kind_<name>.go, whose init registers a headKind: what it
// checks before any topic exists, what it needs of the cluster (its
// changelog, users' topics, records the plan transaction writes) and how
// it builds its head, consumer settings and metrics. run assembles the
// stages from what the kinds build and never asks which kind a stage has.
//
// The lifecycle of one stage s, in order:
//
//	sh, err := kinds[s.Head].check(env, s) // execute, before any topic exists
//	n := sh.needs()                         // the topics, the plan's records
//	b, err := sh.build(ctx, benv)           // run, once the topics exist
type headKind interface {
	// check reads stage s from the pipeline and refuses, with an error
	// naming the transform, what this kind cannot run. It creates nothing
	// on the cluster and starts nothing. The stageHead it returns keeps
	// what it read for needs and build.
	check(e *checkEnv, s *plan.Stage) (stageHead, error)
}

// stageHead is one checked stage of a kind (headKind.check).
type stageHead interface {
	// needs says what the stage needs before its loop starts; called once
	// every stage is checked, before any topic is created.
	needs() stageNeeds
	// build builds the stage's head and what its loop needs besides the
	// plan; called once per instance, after the topics exist and before
	// any stage loop starts. What it opens it closes in builtHead.close.
	build(ctx context.Context, e *buildEnv) (builtHead, error)
}

// kinds are the registered head kinds, by plan.HeadKind: a kind is
// executed iff it is here (Supported). Filled by the kind files' init
// functions; read-only once main starts.
var kinds = map[plan.HeadKind]headKind{}

// registerKind registers k for head kind hk; a second registration for
// the same kind panics (a programming error, at init).
func registerKind(hk plan.HeadKind, k headKind) {
	if _, dup := kinds[hk]; dup {
		panic(fmt.Sprintf("kafkastreams: head kind %s registered twice", hk))
	}
	kinds[hk] = k
}

// Supported are the stage heads this build executes: the registered head
// kinds (one kind_*.go file each). plan.Build, given it, refuses a
// pipeline needing another with plan.ErrUnsupported before any topic is
// created. The map is a fresh copy on every call.
func Supported() map[plan.HeadKind]bool {
	out := make(map[plan.HeadKind]bool, len(kinds))
	for hk := range kinds {
		out[hk] = true
	}
	return out
}

// checkEnv is what headKind.check may read: the pipeline, its plan and
// the options (resolved: BootstrapServers is the one the runner uses).
type checkEnv struct {
	comps *pipepb.Components
	pl    *plan.Plan
	o     Options
	log   *slog.Logger
}

// stageNeeds are what one stage needs of the cluster and of the plan
// transaction before its loop starts (stageHead.needs).
type stageNeeds struct {
	// changelog says the stage keeps state in task stores with a changelog
	// topic (state.ChangelogTopic; compacted, as many partitions as the
	// stage's input topic).
	changelog bool
	// users are the users' topics the stage reads besides its sinks, each
	// with who uses it (for the error when it is missing): they must exist,
	// the runner never creates them.
	users map[string]string
	// records, if not nil, are the records the plan transaction writes to
	// the stage's input topic (partition 0) when it records the plan; the
	// topic is created first, in a request of its own (createTopics).
	records [][]byte
	// jobClock says the job runs on its job clock
	// (step.Config.JobClock): every stage's loop gets it.
	jobClock bool
	// properties are client properties the stage's clients take besides
	// --kafka_property (a kafkaio.Read's WithProperty settings): the
	// values of their secrets are redacted from the run's log lines and
	// errors too (execute's runnerLogger).
	properties map[string]string
}

// checkedPlan is a plan whose every stage its kind has checked: the
// stages' heads by stage name and what they need together.
type checkedPlan struct {
	heads map[string]stageHead
	// changelogs are the state changelog topics, with their partitions.
	changelogs map[string]int32
	// users are the users' topics the plan reads or writes (Kafka sources,
	// their dead-letter topics, Kafka sinks), with who uses each.
	users map[string]string
	// records are what the plan transaction writes, by input topic.
	records  map[string][][]byte
	jobClock bool
	// properties are the stages' stageNeeds.properties.
	properties []map[string]string
}

// checkStages checks every stage of e.pl with its kind, in plan order,
// and gathers what they need. A stage whose kind is not registered is an
// error wrapping plan.ErrUnsupported (plan.Build refuses it first when
// given Supported).
func checkStages(e *checkEnv) (*checkedPlan, error) {
	cp := &checkedPlan{heads: map[string]stageHead{}, changelogs: map[string]int32{}, users: map[string]string{}, records: map[string][][]byte{}}
	for _, s := range e.pl.Stages {
		k, ok := kinds[s.Head]
		if !ok {
			return nil, fmt.Errorf("%w: stage %s: head %s is not executed by this runner", plan.ErrUnsupported, s.Name, s.Head)
		}
		sh, err := k.check(e, s)
		if err != nil {
			return nil, err
		}
		cp.heads[s.Name] = sh
		n := sh.needs()
		if n.changelog {
			cp.changelogs[kafkaclient.ChangelogTopic(e.pl.ApplicationID, s.Name)] = s.Partitions
		}
		for t, who := range n.users {
			cp.users[t] = who
		}
		if n.records != nil {
			cp.records[s.InputTopic] = n.records
		}
		cp.jobClock = cp.jobClock || n.jobClock
		if len(n.properties) > 0 {
			cp.properties = append(cp.properties, n.properties)
		}
		for _, k := range s.KafkaSinks {
			cp.users[k.Topic] = fmt.Sprintf("a Kafka write (stage %s)", s.Name)
		}
	}
	return cp, nil
}

// buildEnv is what stageHead.build may use: the check's environment, the
// stage's Fn API descriptor and side inputs, the instance's store
// directory, and where the stage's metrics go.
type buildEnv struct {
	checkEnv
	// heads are every stage's checked head, by stage name (a Kafka source
	// finds the other sources of its alignment group there).
	heads map[string]stageHead
	srv   *fnapi.Server
	// fs is the stage's registered descriptor; nil for a stage without
	// SDK transforms.
	fs *fnapi.Stage
	// sides are the stage's side inputs; nil without.
	sides *sideinput.Set
	// storeDir is the instance slot's directory for task stores; stores
	// gets each stage's state.Manager a kind opens (the metrics read it).
	storeDir string
	stores   map[string]*state.Manager
	// budget is the memory every task store of the instance shares
	// (--state_memory_mb); nil in a plan without stores.
	budget *state.Budget
	// users are the partition counts of the users' topics, by topic.
	users map[string]int32
	// reg is the instance's Prometheus registry (/metrics); tracker the
	// embedded WatermarkManager's view of the application.
	reg     prometheus.Registerer
	tracker *service.Tracker
	// shared holds collectors several stages of one kind share, by
	// metric name (sharedCollector).
	shared map[string]prometheus.Collector
}

// sharedCollector returns the collector registered under name, creating
// and registering it with newC on first use: one metric family that the
// stages of a kind label by stage.
func (e *buildEnv) sharedCollector(name string, newC func() prometheus.Collector) prometheus.Collector {
	if c, ok := e.shared[name]; ok {
		return c
	}
	c := newC()
	e.reg.MustRegister(c)
	e.shared[name] = c
	return c
}

// openStores opens stage s's task stores and builds its head over them with
// newHead: the one place the runner opens a state store (the kinds whose
// stageNeeds.changelog is set). The stores (state.Open) live under the
// instance slot's directory (e.storeDir), named "<application id>-<stage>",
// and restore a task from the stage's changelog topic
// (kafkaclient.ChangelogTopic) through a kafkaclient.ChangelogReader with
// the Options' bootstrap servers and Kafka properties (one consumer for
// all the stage's restores, closed with the stores). Once newHead returns a
// head, the stage's state.Manager is added to e.stores (the page and
// /metrics read its stores' sizes) and the head owns it: its Close closes
// it (builtHead.close). If newHead fails, the stores are closed and its
// error returned as is.
func openStores[H any](e *buildEnv, s *plan.Stage, newHead func(*state.Manager) (H, error)) (H, error) {
	var none H
	read := kafkaclient.NewChangelogReader(e.o.BootstrapServers, e.o.KafkaProperties)
	stores, err := state.Open(state.Options{
		Dir:            e.storeDir,
		Name:           e.pl.ApplicationID + "-" + s.Name,
		Topic:          kafkaclient.ChangelogTopic(e.pl.ApplicationID, s.Name),
		Changelog:      changelog(read),
		CloseChangelog: read.Close,
		Logger:         e.log,
		Budget:         e.budget,
	})
	if err != nil {
		read.Close()
		return none, err
	}
	h, err := newHead(stores)
	if err != nil {
		stores.Close()
		return none, err
	}
	e.stores[s.Name] = stores
	return h, nil
}

// changelog is r's Read as state.Options.Changelog (state imports no
// Kafka client, kafkaclient no stage package: the runner converts
// kafkaclient.PartitionInfo to state.ChangelogInfo).
func changelog(r *kafkaclient.ChangelogReader) func(context.Context, string, int32, func(state.ChangelogInfo) (int64, error), func(key, value []byte) error) (int, error) {
	return func(ctx context.Context, topic string, p int32, from func(state.ChangelogInfo) (int64, error), apply func(key, value []byte) error) (int, error) {
		return r.Read(ctx, topic, p, func(i kafkaclient.PartitionInfo) (int64, error) { return from(state.ChangelogInfo(i)) }, apply)
	}
}

// builtHead is what a kind builds for one stage (stageHead.build): the
// head and what the stage's loop needs besides the plan. Its zero value
// but for head is a stage read like an internal topic.
type builtHead struct {
	head step.Head
	// partitions, if not 0, is the input topic's partition count when the
	// plan does not know it (a user's topic: the broker's count, users).
	partitions int32
	// growing says the input topic may gain partitions while the job runs
	// (step.Spec.GrowingInput).
	growing bool
	// consumer are consumer settings that win over the loop's and the
	// group membership's (stage.Config.Consumer).
	consumer map[string]string
	// startAt is stage.Config.StartAt (zero: auto.offset.reset's place).
	startAt time.Time
	// bundles says how the stage's bundles run (processFunc).
	bundles bundleOptions
	// counters, if not nil, are the head's GroupByKey counters, for the
	// page and the Result.
	counters gbkCounters
	// close, if not nil, closes what build opened; called once when run
	// returns.
	close func()
}

// bundleOptions are a kind's choices for its stage's bundles (processFunc).
type bundleOptions struct {
	// drain, if not nil, is the stage's drain descriptor, registered: the
	// descriptor work marked Drain runs on.
	drain *fnapi.Stage
	// checkpointAfter, if positive, is when the runner asks a running
	// bundle to checkpoint (fnapi.BundleOptions.CheckpointAfter).
	checkpointAfter time.Duration
	// residuals says the head keeps a bundle's residuals; otherwise a
	// bundle that leaves some fails.
	residuals bool
}

// gbkCounters are a GroupByKey head's counters (gbk.Head): Result's
// LateDropped, FireBudgetStops and AccumulatorMerges, and the page's.
type gbkCounters interface {
	Dropped() int64
	BudgetStops() int64
	Compacted() int64
}

// The state a head holds, read by the page (localStages: the stage's totals)
// and by each transaction's StageCommitMetrics record (commitMetricsRecords:
// per task, and the attempt's late drops). A head offers them by having the
// methods; each head kind that does asserts it beside its build
// (kind_gbk.go, kind_stateful.go), so that renaming a method fails to
// compile instead of dropping a metric.

// windowCounts are the windows a head holds panes of (gbk.Head): the
// stage's total (WindowsHeld, the page's) and task p's (TaskWindowsHeld,
// StageCommitMetrics' TaskStateHeld.windows_held). Counts, not bytes.
type windowCounts interface {
	WindowsHeld() int64
	TaskWindowsHeld(p int32) int64
}

// timerCounts are the user timers a head holds set (userstate.Head): the
// stage's total (PendingTimers, the page's) and task p's (TaskTimers,
// TaskStateHeld.timers_pending). Counts.
type timerCounts interface {
	PendingTimers() int64
	TaskTimers(p int32) int64
}

// attemptDrops is a head that drops late elements (gbk.Head):
// AttemptDropped is how many the open attempt dropped, read when its
// transaction commits (StageCommitMetrics.late_dropped).
type attemptDrops interface {
	AttemptDropped() int64
}

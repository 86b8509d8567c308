package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"

	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// Options is every setting of one kafkastreams run, read once: from the
// command line by OptionsFromFlags (Execute, that is beam.Run with
// --runner=kafkastreams), or built by a test or an embedding program from
// DefaultOptions and handed to Execute with WithOptions. Nothing below
// execute reads a flag: each part of the runner gets what it needs from
// this value. Validate checks the fields one by one and against each other.
// Each field is a flag in Beam's style (snake_case), named in its comment
// with the Kafka or Kafka Streams setting it corresponds to.
type Options struct {
	// BootstrapServers is Kafka's bootstrap.servers (--bootstrap_servers).
	// Empty: $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092.
	BootstrapServers string
	// ApplicationID names the application, like Kafka Streams'
	// application.id (--application_id): every instance started with the
	// same id shares the work; it prefixes every topic, consumer group and
	// transactional.id. Empty: Beam's --job_name (a fresh one if unset).
	ApplicationID string
	// InternalTopicPartitions is the partition count of internal topics
	// (--internal_topic_partitions): the number of tasks of every stage but
	// Impulse. Default 4; from 1 to 2147483647 (a Kafka partition count is
	// an int32).
	InternalTopicPartitions int
	// CommitInterval is how long a transaction collects records
	// (--commit_interval), like Kafka Streams' commit.interval.ms. Default
	// 100 ms; positive and below the stages' transaction timeout
	// (transaction.timeout.ms from KafkaProperties, else
	// kafkaclient.TransactionTimeout, 10 s), or every transaction would be
	// aborted by the broker before it commits.
	CommitInterval time.Duration
	// PurgeInterval is how often each stage deletes the records of its
	// input topic that its committed transactions consumed
	// (--purge_interval; stage.Config.PurgeInterval: DeleteRecords up to
	// the committed offsets), like Kafka Streams'
	// repartition.purge.interval.ms (KIP-811), whose default it takes: 30
	// s. Only internal topics that one stage alone reads are purged
	// (plan.Stage.PurgedInput); they have infinite retention
	// (kafkaclient.DataTopicConfig), so without the purge they grow
	// without bound. 0 turns the purge off; negative is refused.
	PurgeInterval time.Duration
	// StandbyReplicas is how many other instances keep a warm copy of each
	// stateful task's store (--standby_replicas; Kafka Streams'
	// num.standby.replicas, whose default it takes: 0). With N > 0 each
	// instance follows, read_committed, the changelogs of the tasks owned
	// by the N members after it in its stage groups (ordered by client.id,
	// which becomes "<client.id or kafkastreams>-<instance slot>"), so a
	// task moved to it after its owner's SIGKILL restores only the
	// changelog's tail (stage/standby); a member gone from a stage group
	// (its session timed out) has that stage's transactional id fenced,
	// so a transaction it left open stops holding its tasks' offsets at
	// once rather than at the broker's transaction timeout. librdkafka's
	// assignors do not place
	// an active task by its copies (KIP-441): with more than two instances
	// a moved task may land on an instance without its copy. Costs the
	// copies' disk and a changelog reader per stateful stage. Negative is
	// refused.
	StandbyReplicas int
	// MaxBundleSize bounds the records of one bundle and one transaction
	// (--max_bundle_size): a task commits after this many records even
	// within CommitInterval, like Kafka's max.poll.records. Default 50 000,
	// so that CommitInterval paces the transactions of a stage that keeps
	// up, as commit.interval.ms paces Kafka Streams' (issue 24: at 10 000
	// the source stage of a 10 M-record windowed sum committed every 56 ms,
	// and 50 000 cut the broker's CPU by 35-55% and the wall time by
	// 12-17%); positive.
	MaxBundleSize int
	// GBKFireBudget bounds the values one GroupByKey task fires in one
	// transaction under the default trigger (--gbk_fire_budget;
	// gbk.HeadConfig.FireBudget): past it the task's other due panes fire
	// in the next transactions, at once, and its output watermark waits for
	// them; a pane is never cut. It keeps a transaction's memory and size
	// bounded when the watermark passes millions of values at once (the end
	// of a bounded input). Default gbk.DefaultFireBudget (100 000); 0 or
	// negative: no bound.
	GBKFireBudget int
	// MergeAccumulators (--merge_accumulators): a lifted combine's
	// GroupByKey (default trigger, discarding) merges the accumulators
	// each (key, window) got in a transaction, at its commit, with the
	// combine's MergeAccumulators, run by the SDK, and keeps one per
	// (key, window) instead of one per precombined bundle until the
	// window fires (gbk.HeadConfig.Compact; Beam's combining state, and
	// Kafka Streams' aggregate updated in place): a window fires one value
	// per key, and a session one accumulator, not one per element.
	// Default true; false keeps every accumulator until the window fires.
	// --merge_session_accumulators=false, the flag's name before it
	// covered every window fn, turns it off too.
	MergeAccumulators bool
	// PollDuringCommit (--poll_during_commit): while a stage's attempt is
	// decided (its bundle in the SDK harness) and committed, the stage's
	// consumer polls the next attempt's records on the loop's goroutine
	// (stage.Config.PollDuringCommit; stage/prefetch.go). Default false:
	// a stage polls only between its attempts. Measured on 2 cores shared
	// with the broker (issue 24), it made the windowed sum 1.06-1.08
	// times slower: the bundles ran slower by what the polls saved. It is
	// for an instance with cores to spare.
	PollDuringCommit bool
	// StateDir is where task state stores and instance slots live
	// (--state_dir), like Kafka Streams' state.dir:
	// <state_dir>/<application_id>/instance-<n>/. A restarted instance
	// takes a free slot and with it a previous instance's transactional ids
	// (instance.go). A local file system. Empty: os.TempDir()/kafkastreams-state.
	StateDir string
	// StateMemoryMB is the memory, in MiB, every task store of this
	// instance shares (--state_memory_mb, default 512, at least 16): one
	// block cache that the stores' memtables are charged to, the
	// memtables sized by the most stores the instance can hold (every
	// partition of every stateful stage), as Kafka Streams users bound
	// RocksDB with a shared cache and a WriteBufferManager (state.Budget).
	// It does not grow with the task count; past 512 stores at 512 MiB a
	// store's memtable is at its 256 KiB floor, and past 682 the start-up
	// log warns by how much the memtables can exceed the budget.
	StateMemoryMB int
	// WatermarksAddr is where this instance serves GET /watermarks,
	// /healthz and /metrics (--watermarks_addr). Default 127.0.0.1:0 (a
	// free port, logged); empty disables. On a loopback address only
	// requests for localhost, a loopback address or this address's host
	// are answered (403 otherwise: DNS rebinding); on another address or
	// the wildcard, any (watermarkmgr/service's hostGuard).
	WatermarksAddr string
	// DefaultIdleness is the idleness of Kafka sources that set none
	// (--default_idleness; kafkaio.WithIdleness): a source partition
	// without a record for this long is left out of the watermark's minimum
	// until its next record (seed 002; Flink's withIdleness). Default 5
	// minutes; 0 turns it off for those sources, and the runner warns at
	// start-up naming each; negative is refused.
	DefaultIdleness time.Duration
	// SessionTimeout is the stage consumers' session timeout
	// (--session_timeout), Kafka's session.timeout.ms: how long after an
	// instance's last heartbeat (a SIGKILL, a lost machine) its groups give
	// its tasks to the others. Default 6 s, the smallest the broker allows
	// by default (group.min.session.timeout.ms); the heartbeat interval
	// (heartbeat.interval.ms) is a third of it, at most 1 s: a member
	// learns of a rebalance at its next heartbeat. Kafka's default, 45 s,
	// held a killed instance's tasks for 45 s. Whole milliseconds. A
	// KafkaProperties session.timeout.ms wins.
	SessionTimeout time.Duration
	// StaticMembership turns on static group membership (KIP-345) for the
	// stage consumers (--static_membership): group.instance.id is the
	// instance slot's identity, so a copy restarted in a killed one's slot
	// (same StateDir) gets its tasks back at once (measured 0.6-1.6 s)
	// instead of after the dead member's session timeout (6.1 s). Default
	// off, for what it costs, both measured:
	//   - a static member replaced while a cooperative rebalance is half
	//     done takes over its predecessor's assignment as it stood, which
	//     can be empty (the first, revoking round), and no rebalance
	//     follows: partitions stay held by no member until the rebalance
	//     timeout (max.poll.interval.ms, 300 s). make chaos with the seed
	//     1796070440989778515 took 323.5 s so (the consumer groups logged
	//     at 90 s: Stable, two members, partitions 0 and 1 of a stage
	//     held by none), 63.6 s with dynamic members.
	//   - librdkafka rejoins a static member whose session timed out (its
	//     coordinator's broker died) and is fenced by its own earlier
	//     membership, a fatal error (librdkafka issue 3437). The stage
	//     restarts its clients and goes on (TestStaticMemberFencedRestarts,
	//     and the 3-broker failover scenario passes exact with it), at the
	//     cost of an abort and a restore.
	StaticMembership bool
	// WatermarkStuckThreshold is how long a stage's output watermark may
	// stay where it is before the instance explains it as stuck
	// (--watermark_stuck_threshold): in its progress lines (a warning per
	// stuck stage, with the chain of causes), on its page at / and in GET
	// /watermarks/explain. Default 1 minute (service.DefaultStuckAfter);
	// positive.
	WatermarkStuckThreshold time.Duration
	// KafkaProperties are extra librdkafka properties for every client
	// (--kafka_property=key=value, repeatable): security settings, … The
	// runner's own settings of a client win over them, but for the group
	// membership's (SessionTimeout).
	KafkaProperties map[string]string
	// ErrorPolicy is what every stage does with an input record whose
	// bundle fails every time, a DoFn's error or panic on it
	// (--error_policy; stage.ErrorPolicy): after 4 failed attempts the
	// attempt's records are taken in attempts of half as many, halved
	// again at each 4 failures (one at a time from 32 records down), and
	// the one that fails alone 4 times is the record. "fail" (the default) stops the
	// stage with stage.ErrBundleFailed naming the stage, input topic,
	// partition and offset; "dead_letter" writes the record to
	// DeadLetterTopic, with headers saying the error and where it came
	// from (stage.DeadLetterHeaderMessage, …), in the transaction that
	// commits its offset, and goes on. Kafka Streams' counterparts:
	// default.deserialization.exception.handler and KIP-1033's processing
	// exception handler (FAIL or CONTINUE) with KIP-1034's dead-letter
	// queue. A failure with no input record of its own (a pane or a timer
	// made due by the watermark) fails the stage under either policy.
	ErrorPolicy stage.ErrorPolicy
	// DeadLetterTopic is the topic ErrorPolicy "dead_letter" writes to
	// (--dead_letter_topic): created by the runner (one partition,
	// max.message.bytes kafkaclient.InternalTopicMaxMessageBytes) if it
	// is missing, used as it is if it exists. Empty:
	// kafkaclient.DeadLetterTopic, "<application_id>.dead-letters". Only
	// with ErrorPolicy "dead_letter"; a legal Kafka topic name (at most
	// 249 of a-z A-Z 0-9 . _ -, not "." or ".."). Not kafkaio's
	// WithDeadLetterTopic, which is per Kafka read and takes only the
	// records its timestamp function fails on.
	DeadLetterTopic string
	// GCPercent is the Go garbage collector's target heap growth
	// (runtime/debug.SetGCPercent) set for the process while a job runs
	// in it (--gc_percent), unless the GOGC environment variable is set:
	// the user's own setting wins. Default 200: the runner's loops
	// allocate a short-lived copy of every record (the Kafka client's
	// messages, the SDK's decoders), and at Go's 100 a third of a windowed
	// sum's CPU went to allocation and collection; at 200 the 3 M-record
	// windowed sum of BenchmarkKafkaStreams took 16% less wall time and
	// 17% less CPU for 12% more peak RSS (issue 24). 0 leaves the
	// process's setting as it is; negative (collection off) is refused.
	GCPercent int
	// Drain, instead of running the job, asks the running application
	// (ApplicationID on BootstrapServers) to drain (--drain; Beam's drain):
	// see Drain.
	Drain bool

	// bootstrapFrom says where BootstrapServers came from, for errors
	// (set by resolve).
	bootstrapFrom string
}

// DefaultOptions returns the default of every setting: the flags' defaults.
func DefaultOptions() Options {
	return Options{
		InternalTopicPartitions: 4,
		CommitInterval:          100 * time.Millisecond,
		PurgeInterval:           30 * time.Second,
		MaxBundleSize:           50000,
		GBKFireBudget:           gbk.DefaultFireBudget,
		MergeAccumulators:       true,
		StateMemoryMB:           state.DefaultBudgetBytes >> 20,
		WatermarksAddr:          "127.0.0.1:0",
		DefaultIdleness:         5 * time.Minute,
		SessionTimeout:          6 * time.Second,
		WatermarkStuckThreshold: time.Minute,
		ErrorPolicy:             stage.ErrorPolicyFail,
		KafkaProperties:         map[string]string{},
		GCPercent:               DefaultGCPercent,
	}
}

// DefaultGCPercent is Options.GCPercent's default (see there).
const DefaultGCPercent = 200

// The runner's flags, one per field of Options (see there; the flag of
// each is named in its comment), their defaults DefaultOptions'. Only
// OptionsFromFlags reads them: a test or a program that embeds the runner
// builds an Options (WithOptions), a command line sets them.
var (
	defaults                 = DefaultOptions()
	bootstrapServers         = flag.String("bootstrap_servers", defaults.BootstrapServers, "Kafka bootstrap.servers (default $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092)")
	applicationID            = flag.String("application_id", defaults.ApplicationID, "application id shared by every instance of the job, like Kafka Streams' application.id (default: --job_name)")
	internalTopicPartitions  = flag.Int("internal_topic_partitions", defaults.InternalTopicPartitions, "partitions of the topics between stages: tasks per stage (positive)")
	commitInterval           = flag.Duration("commit_interval", defaults.CommitInterval, "longest a transaction collects records before it commits, a positive Go duration such as 100ms or 2s (Kafka Streams commit.interval.ms), below the transaction timeout (10s)")
	purgeInterval            = flag.Duration("purge_interval", defaults.PurgeInterval, "how often each stage deletes the records of its internal input topic that its commits consumed (Kafka Streams repartition.purge.interval.ms), a Go duration; 0: never")
	standbyReplicas          = flag.Int("standby_replicas", defaults.StandbyReplicas, "how many other instances keep a warm copy of each stateful task's store from its changelog (Kafka Streams num.standby.replicas): a task moved after its owner's SIGKILL then restores only the changelog's tail; 0: none")
	maxBundleSize            = flag.Int("max_bundle_size", defaults.MaxBundleSize, "most records in one bundle and one transaction, positive (like Kafka's max.poll.records)")
	gbkFireBudget            = flag.Int("gbk_fire_budget", defaults.GBKFireBudget, "most values one GroupByKey task fires in one transaction; its other due panes fire in the next ones (0 or negative: no bound)")
	mergeAccumulators        = flag.Bool("merge_accumulators", defaults.MergeAccumulators, "a lifted combine's GroupByKey keeps one accumulator per key and window, merged at every commit by the combine's MergeAccumulators, instead of one per precombined bundle (sessions: per element) until the window fires")
	mergeSessionAccumulators = flag.Bool("merge_session_accumulators", true, "deprecated: false turns --merge_accumulators off (its name when it covered session windows only)")
	pollDuringCommit         = flag.Bool("poll_during_commit", defaults.PollDuringCommit, "a stage polls its next transaction's records while its bundle runs and its transaction commits (for an instance with cores to spare; default: polls only between transactions)")
	stateDir                 = flag.String("state_dir", defaults.StateDir, "directory for task state stores and instance slots (Kafka Streams state.dir); default under the system temp dir")
	stateMemoryMB            = flag.Int("state_memory_mb", defaults.StateMemoryMB, "memory in MiB that every task state store of this instance shares (a block cache and the memtables), at least 16; it does not grow with the task count (RocksDB's shared cache and WriteBufferManager in Kafka Streams)")
	watermarksAddr           = flag.String("watermarks_addr", defaults.WatermarksAddr, "HTTP address of this instance's GET /watermarks, /healthz, /metrics; empty disables")
	defaultIdleness          = flag.Duration("default_idleness", defaults.DefaultIdleness, "idleness of Kafka sources that set none: a partition without records this long stops holding the watermark (0: off)")
	sessionTimeout           = flag.Duration("session_timeout", defaults.SessionTimeout, "stage consumers' session timeout, a Go duration (Kafka session.timeout.ms): a killed instance's tasks move after it; at least the broker's group.min.session.timeout.ms (6s by default)")
	staticMembership         = flag.Bool("static_membership", defaults.StaticMembership, "static consumer group membership (KIP-345, group.instance.id from the instance slot): a copy restarted in a killed one's slot gets its tasks back at once; off by default (a member replaced mid-rebalance can leave partitions unassigned until max.poll.interval.ms)")
	watermarkStuckThreshold  = flag.Duration("watermark_stuck_threshold", defaults.WatermarkStuckThreshold, "how long a stage's watermark may stay put before it is explained as stuck (progress log, the page, GET /watermarks/explain), a positive Go duration")
	errorPolicy              = flag.String("error_policy", string(defaults.ErrorPolicy), "what a stage does with an input record whose bundle fails every time (a DoFn's error or panic): fail (stop, naming the record's stage, topic, partition and offset) or dead_letter (write it to --dead_letter_topic with the error and its origin, exactly once, and go on)")
	gcPercent                = flag.Int("gc_percent", defaults.GCPercent, "Go garbage collector target (GOGC) set while a job runs, unless the GOGC environment variable is set; 0 leaves the process's setting")
	deadLetterTopic          = flag.String("dead_letter_topic", defaults.DeadLetterTopic, "topic of --error_policy=dead_letter, created if missing (default <application_id>.dead-letters)")
	kafkaProperties          = properties{}
)

func init() {
	flag.Var(kafkaProperties, "kafka_property", "extra Kafka client property key=value for every client (repeatable), e.g. security.protocol=SASL_SSL")
}

// OptionsFromFlags returns the runner's flags as the command line set them
// (their defaults where it did not): the one place that reads them.
func OptionsFromFlags() Options {
	return Options{
		BootstrapServers:        *bootstrapServers,
		ApplicationID:           *applicationID,
		InternalTopicPartitions: *internalTopicPartitions,
		CommitInterval:          *commitInterval,
		PurgeInterval:           *purgeInterval,
		StandbyReplicas:         *standbyReplicas,
		MaxBundleSize:           *maxBundleSize,
		GBKFireBudget:           *gbkFireBudget,
		MergeAccumulators:       *mergeAccumulators && *mergeSessionAccumulators,
		PollDuringCommit:        *pollDuringCommit,
		StateDir:                *stateDir,
		StateMemoryMB:           *stateMemoryMB,
		WatermarksAddr:          *watermarksAddr,
		DefaultIdleness:         *defaultIdleness,
		SessionTimeout:          *sessionTimeout,
		StaticMembership:        *staticMembership,
		WatermarkStuckThreshold: *watermarkStuckThreshold,
		ErrorPolicy:             stage.ErrorPolicy(*errorPolicy),
		DeadLetterTopic:         *deadLetterTopic,
		KafkaProperties:         maps.Clone(map[string]string(kafkaProperties)),
		Drain:                   *drainFlag,
		GCPercent:               *gcPercent,
	}
}

type optionsKey struct{}

// WithOptions returns ctx carrying o: Execute (beam.Run with
// --runner=kafkastreams under ctx) runs with o instead of the flags. For
// tests and programs that embed the runner; o is validated as the flags
// are.
func WithOptions(ctx context.Context, o Options) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

// optionsOf returns the Options WithOptions put in ctx, else the flags'.
func optionsOf(ctx context.Context) Options {
	if o, ok := ctx.Value(optionsKey{}).(Options); ok {
		return o
	}
	return OptionsFromFlags()
}

// resolve fills what an empty setting means: BootstrapServers from
// $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092 (noting where it came
// from, for errors); ApplicationID from Beam's --job_name (a fresh one,
// with a warning on log, when that is unset too); a nil KafkaProperties
// as none.
func (o *Options) resolve(log *slog.Logger) {
	o.bootstrapFrom = "--bootstrap_servers"
	if o.BootstrapServers == "" {
		o.BootstrapServers, o.bootstrapFrom = os.Getenv("KAFKA_BOOTSTRAP_SERVERS"), "$KAFKA_BOOTSTRAP_SERVERS"
	}
	if o.BootstrapServers == "" {
		o.BootstrapServers, o.bootstrapFrom = "127.0.0.1:9092", "the default, as neither --bootstrap_servers nor $KAFKA_BOOTSTRAP_SERVERS is set"
	}
	if o.ApplicationID == "" {
		o.ApplicationID = jobopts.GetJobName()
		if *jobopts.JobName == "" {
			log.Warn("kafkastreams: no --application_id or --job_name: using a fresh one; other instances cannot join it", "application_id", o.ApplicationID)
		}
	}
	if o.KafkaProperties == nil {
		o.KafkaProperties = map[string]string{}
	}
	if o.ErrorPolicy == stage.ErrorPolicyDeadLetter && o.DeadLetterTopic == "" {
		o.DeadLetterTopic = kafkaclient.DeadLetterTopic(o.ApplicationID)
	}
}

// Validate checks o: each numeric and duration setting must be positive
// (DefaultIdleness, PurgeInterval and GBKFireBudget excepted: 0 means off),
// InternalTopicPartitions must fit a Kafka partition count (an int32), and
// the settings must agree with each other and with KafkaProperties:
//
//	ErrorPolicy is fail or dead_letter; DeadLetterTopic only with dead_letter, a legal topic name (topicNameProblem)
//	CommitInterval < transaction.timeout.ms (kafkaclient.TransactionTimeoutOf: the broker aborts a longer transaction)
//	no property the runner sets itself (kafkaclient.OwnedProperty: group.id, isolation.level, …)
//	heartbeat.interval.ms < session.timeout.ms (librdkafka refuses the consumer)
//	max.poll.interval.ms ≥ session.timeout.ms (librdkafka refuses the consumer)
//
// with session.timeout.ms and heartbeat.interval.ms as the stage consumers
// get them (groupMembership). Left unchecked, a zero or negative value was
// taken silently (the stage loops replaced it by their default), a
// partition count beyond an int32 wrapped around, and a disagreement was
// found by a consumer or the broker after the topics were created. Every
// bad setting is named by its flag, with its value, in one error each
// (joined), like "kafkastreams: --commit_interval=-1s: must be positive".
// execute calls it first, before anything is created on the cluster.
func (o Options) Validate() error {
	var errs []error
	bad := func(name, value, why string) {
		errs = append(errs, fmt.Errorf("kafkastreams: --%s=%s: %s", name, value, why))
	}
	positiveInt := func(name string, v int) {
		if v <= 0 {
			bad(name, strconv.Itoa(v), "must be positive")
		}
	}
	positiveInt("internal_topic_partitions", o.InternalTopicPartitions)
	if v := o.InternalTopicPartitions; v > math.MaxInt32 {
		bad("internal_topic_partitions", strconv.Itoa(v), fmt.Sprintf("must be at most %d (a Kafka partition count is an int32)", math.MaxInt32))
	}
	for _, k := range slices.Sorted(maps.Keys(o.KafkaProperties)) {
		if why, owned := kafkaclient.OwnedProperty(k); owned {
			bad("kafka_property", k+"="+kafkaclient.Redact(o.KafkaProperties[k], o.KafkaProperties), "the runner sets it itself: "+why)
		}
	}
	txnTimeout, err := kafkaclient.TransactionTimeoutOf(o.KafkaProperties)
	if err != nil {
		bad("kafka_property", "transaction.timeout.ms="+o.KafkaProperties["transaction.timeout.ms"], "must be a positive whole number of milliseconds")
	}
	switch v := o.CommitInterval; {
	case v <= 0:
		bad("commit_interval", v.String(), "must be positive")
	case err == nil && v >= txnTimeout:
		bad("commit_interval", v.String(), fmt.Sprintf("must be below the stages' transaction timeout (transaction.timeout.ms, %v: %s): the broker aborts a transaction open that long", txnTimeout, txnTimeoutSource(o.KafkaProperties)))
	}
	positiveInt("max_bundle_size", o.MaxBundleSize)
	if v := o.StateMemoryMB; v < 16 {
		bad("state_memory_mb", strconv.Itoa(v), "must be at least 16 (MiB)")
	}
	if v := o.PurgeInterval; v < 0 {
		bad("purge_interval", v.String(), "must not be negative (0 turns the purge off)")
	}
	if v := o.GCPercent; v < 0 {
		bad("gc_percent", strconv.Itoa(v), "must not be negative (0: leave the process's garbage collector as it is)")
	}
	if v := o.StandbyReplicas; v < 0 {
		bad("standby_replicas", strconv.Itoa(v), "must not be negative (0: no standby copies)")
	}
	switch o.ErrorPolicy {
	case stage.ErrorPolicyFail, stage.ErrorPolicyDeadLetter:
	default:
		bad("error_policy", string(o.ErrorPolicy), fmt.Sprintf("must be %s or %s", stage.ErrorPolicyFail, stage.ErrorPolicyDeadLetter))
	}
	if t := o.DeadLetterTopic; t != "" {
		if o.ErrorPolicy != stage.ErrorPolicyDeadLetter {
			bad("dead_letter_topic", t, "needs --error_policy=dead_letter (under "+string(o.ErrorPolicy)+" nothing is written there)")
		} else if why := topicNameProblem(t); why != "" {
			bad("dead_letter_topic", t, why)
		}
	}
	if v := o.WatermarkStuckThreshold; v <= 0 {
		bad("watermark_stuck_threshold", v.String(), "must be positive")
	}
	if v := o.DefaultIdleness; v < 0 {
		bad("default_idleness", v.String(), "must not be negative (0 turns idleness off)")
	}
	if v := o.SessionTimeout; v < time.Millisecond {
		bad("session_timeout", v.String(), "must be positive (in whole milliseconds)")
		return errors.Join(errs...)
	}
	gm := groupMembership("", false, o.SessionTimeout, o.KafkaProperties)
	session, errS := strconv.ParseInt(gm["session.timeout.ms"], 10, 64)
	heartbeat, errH := strconv.ParseInt(gm["heartbeat.interval.ms"], 10, 64)
	switch {
	case errS != nil:
		bad("kafka_property", "session.timeout.ms="+gm["session.timeout.ms"], "must be a whole number of milliseconds")
	case errH != nil:
		bad("kafka_property", "heartbeat.interval.ms="+gm["heartbeat.interval.ms"], "must be a whole number of milliseconds")
	case heartbeat < session:
	case o.KafkaProperties["heartbeat.interval.ms"] != "":
		bad("kafka_property", "heartbeat.interval.ms="+gm["heartbeat.interval.ms"], fmt.Sprintf("must be below the session timeout (%d ms, --session_timeout or session.timeout.ms): a member would miss its session between heartbeats", session))
	case o.KafkaProperties["session.timeout.ms"] != "":
		bad("kafka_property", "session.timeout.ms="+gm["session.timeout.ms"], fmt.Sprintf("must be above the heartbeat (%d ms: a third of --session_timeout, at most 1 s; or set heartbeat.interval.ms too)", heartbeat))
	default:
		bad("session_timeout", o.SessionTimeout.String(), "must be at least 2ms: the heartbeat (heartbeat.interval.ms, a third of it, at least 1 ms) must be below it")
	}
	if v, ok := o.KafkaProperties["max.poll.interval.ms"]; ok && errS == nil {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < session {
			bad("kafka_property", "max.poll.interval.ms="+v, fmt.Sprintf("must be whole milliseconds, at least the session timeout (%d ms, --session_timeout or session.timeout.ms)", session))
		}
	}
	return errors.Join(errs...)
}

// topicNameProblem says why name is not a legal Kafka topic name (the
// broker's rule, org.apache.kafka.common.internals.Topic.validate: 1 to
// 249 characters of ASCII letters, digits, '.', '_' and '-', not "." or
// ".."), or "" if it is one.
func topicNameProblem(name string) string {
	if name == "." || name == ".." {
		return "is not a legal Kafka topic name"
	}
	if len(name) > 249 {
		return fmt.Sprintf("is %d characters long: a Kafka topic name has at most 249", len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("holds %q: a Kafka topic name has only ASCII letters, digits, '.', '_' and '-'", c)
		}
	}
	return ""
}

// txnTimeoutSource says where the transaction timeout comes from.
func txnTimeoutSource(props map[string]string) string {
	if _, ok := props["transaction.timeout.ms"]; ok {
		return "from --kafka_property"
	}
	return "the runner's default, kafkaclient.TransactionTimeout; set --kafka_property=transaction.timeout.ms=<ms> for a longer one"
}

// properties collects repeated key=value flags.
type properties map[string]string

// String is the settings as kafkaclient.FormatProperties prints them: a
// secret's value reads "***".
func (p properties) String() string { return kafkaclient.FormatProperties(p) }

// Get returns the settings (flag.Getter), for runner/kafkaio's clients
// built outside the runner (ReadPattern's topic listing).
func (p properties) Get() any { return map[string]string(p) }

func (p properties) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	p[k] = v
	return nil
}

// groupMembership is the settings of every stage consumer's group
// membership: the session timeout (Options.SessionTimeout; the heartbeat every
// third of it, at most every second) and, with static (--static_membership),
// static membership (KIP-345): group.instance.id is the instance slot's
// identity, so a copy restarted in a killed one's slot (same --state_dir)
// takes its place in every group at once, with its tasks, instead of
// waiting for the dead member's session to time out. Properties given with
// --kafka_property win.
func groupMembership(instanceID string, static bool, SessionTimeout time.Duration, props map[string]string) map[string]string {
	ms := SessionTimeout.Milliseconds()
	out := map[string]string{
		"session.timeout.ms":    strconv.FormatInt(ms, 10),
		"heartbeat.interval.ms": strconv.FormatInt(max(min(ms/3, 1000), 1), 10),
	}
	if static {
		out["group.instance.id"] = instanceID
	}
	for k := range out {
		if v, ok := props[k]; ok {
			out[k] = v
		}
	}
	return out
}

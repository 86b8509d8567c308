package runner

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kafkastreams/kafkastreams/stage/gbk"
)

// Flags of the kafkastreams runner, in Beam's style (snake_case). Each says
// its default and the Kafka or Kafka Streams setting it corresponds to. The
// numeric and duration flags must be positive: a job started with a zero or
// negative one fails before anything is created on the cluster
// (validateFlags).
var (
	// BootstrapServers is Kafka's bootstrap.servers. Default
	// $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092.
	BootstrapServers = flag.String("bootstrap_servers", "", "Kafka bootstrap.servers (default $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092)")
	// ApplicationID names the application, like Kafka Streams' application.id:
	// every instance started with the same id shares the work; it prefixes
	// every topic, consumer group and transactional.id. Default: --job_name.
	ApplicationID = flag.String("application_id", "", "application id shared by every instance of the job, like Kafka Streams' application.id (default: --job_name)")
	// InternalTopicPartitions is the partition count of internal topics:
	// the number of tasks of every stage but Impulse. Default 4; from 1 to
	// 2147483647 (a Kafka partition count is an int32).
	InternalTopicPartitions = flag.Int("internal_topic_partitions", 4, "partitions of the topics between stages: tasks per stage (positive)")
	// CommitInterval is how long a transaction collects records, like
	// Kafka Streams' commit.interval.ms, as a Go duration (100ms, 1s).
	// Default 100 ms; must be positive.
	CommitInterval = flag.Duration("commit_interval", 100*time.Millisecond, "longest a transaction collects records before it commits, a positive Go duration such as 100ms or 2s (Kafka Streams commit.interval.ms)")
	// MaxBundleSize bounds the records of one bundle (and one transaction):
	// a task commits after this many records even within CommitInterval, like
	// Kafka's max.poll.records. Default 10 000; must be positive.
	MaxBundleSize = flag.Int("max_bundle_size", 10000, "most records in one bundle and one transaction, positive (like Kafka's max.poll.records)")
	// GBKFireBudget bounds the values one GroupByKey task fires in one
	// transaction under the default trigger (gbk.HeadConfig.FireBudget):
	// past it the task's other due panes fire in the next transactions, at
	// once, and its output watermark waits for them; a pane is never cut.
	// It keeps a transaction's memory and size bounded when the watermark
	// passes millions of values at once (the end of a bounded input).
	// Default gbk.DefaultFireBudget (100 000); 0 or negative: no bound.
	GBKFireBudget = flag.Int("gbk_fire_budget", gbk.DefaultFireBudget, "most values one GroupByKey task fires in one transaction; its other due panes fire in the next ones (0 or negative: no bound)")
	// MergeSessionAccumulators: a lifted combine's GroupByKey over session
	// windows (default trigger, discarding) merges the accumulators of each
	// session at every commit with the combine's MergeAccumulators, run by
	// the SDK, and keeps one per session instead of one per element
	// (gbk.HeadConfig.Compact; Beam's combining state for merging windows).
	// false keeps every accumulator until the session fires.
	MergeSessionAccumulators = flag.Bool("merge_session_accumulators", true, "a lifted combine over session windows keeps one accumulator per session, merged at every commit by the combine's MergeAccumulators, instead of one per element")
	// StateDir is where task state stores and instance slots live, like
	// Kafka Streams' state.dir: <state_dir>/<application_id>/instance-<n>/.
	// A restarted instance takes a free slot and with it a previous
	// instance's transactional ids (instance.go). A local file system.
	// Default: os.TempDir()/kafkastreams-state.
	StateDir = flag.String("state_dir", "", "directory for task state stores and instance slots (Kafka Streams state.dir); default under the system temp dir")
	// WatermarksAddr is where this instance serves GET /watermarks,
	// /healthz and /metrics. Default 127.0.0.1:0 (a free port, logged);
	// empty disables.
	WatermarksAddr = flag.String("watermarks_addr", "127.0.0.1:0", "HTTP address of this instance's GET /watermarks, /healthz, /metrics; empty disables")
	// DefaultIdleness is the idleness of Kafka sources that set none
	// (kafkaio.WithIdleness): a source partition without a record for this
	// long is left out of the watermark's minimum until its next record
	// (seed 002; Flink's withIdleness). Default 5 minutes; 0 turns it off
	// for those sources, and the runner warns at start-up naming each.
	DefaultIdleness = flag.Duration("default_idleness", 5*time.Minute, "idleness of Kafka sources that set none: a partition without records this long stops holding the watermark (0: off)")
	// SessionTimeout is the stage consumers' session timeout, Kafka's
	// session.timeout.ms: how long after an instance's last heartbeat
	// (a SIGKILL, a lost machine) its groups give its tasks to the others.
	// Default 6 s, the smallest the broker allows by default
	// (group.min.session.timeout.ms); the heartbeat interval
	// (heartbeat.interval.ms) is a third of it, at most 1 s: a member
	// learns of a rebalance at its next heartbeat. Kafka's default, 45 s,
	// held a killed instance's tasks for 45 s.
	// A --kafka_property=session.timeout.ms=… wins.
	SessionTimeout = flag.Duration("session_timeout", 6*time.Second, "stage consumers' session timeout, a Go duration (Kafka session.timeout.ms): a killed instance's tasks move after it; at least the broker's group.min.session.timeout.ms (6s by default)")
	// StaticMembership turns on static group membership (KIP-345) for the
	// stage consumers: group.instance.id is the instance slot's identity,
	// so a copy restarted in a killed one's slot (same --state_dir) gets
	// its tasks back at once (measured 0.6-1.6 s) instead of after the
	// dead member's session timeout (6.1 s). Default off, for what it
	// costs, both measured:
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
	StaticMembership = flag.Bool("static_membership", false, "static consumer group membership (KIP-345, group.instance.id from the instance slot): a copy restarted in a killed one's slot gets its tasks back at once; off by default (a member replaced mid-rebalance can leave partitions unassigned until max.poll.interval.ms)")
	// WatermarkStuckThreshold is how long a stage's output watermark may
	// stay where it is before the instance explains it as stuck: in its
	// progress lines (a warning per stuck stage, with the chain of causes),
	// on its page at / and in GET /watermarks/explain. A Go duration;
	// default 1 minute (service.DefaultStuckAfter); must be positive.
	WatermarkStuckThreshold = flag.Duration("watermark_stuck_threshold", time.Minute, "how long a stage's watermark may stay put before it is explained as stuck (progress log, the page, GET /watermarks/explain), a positive Go duration")
	// KafkaProperties are extra librdkafka properties for every client
	// (security settings, …), repeatable: --kafka_property=security.protocol=SSL.
	KafkaProperties = properties{}
)

func init() {
	flag.Var(KafkaProperties, "kafka_property", "extra Kafka client property key=value for every client (repeatable), e.g. security.protocol=SASL_SSL")
}

// validateFlags checks the runner's numeric and duration flags: each must be
// positive (and --internal_topic_partitions fit a Kafka partition count, an
// int32). Left unchecked, a zero or negative value was taken silently (the
// stage loops replaced it by their default), a partition count beyond an
// int32 wrapped around, and a non-positive one was refused by the plan
// without naming the flag. Every bad flag is named, with its value, in one error per
// flag (joined), like "kafkastreams: --commit_interval=-1s: must be positive".
// execute calls it first, before anything is created on the cluster.
func validateFlags() error {
	var errs []error
	bad := func(name, value, why string) {
		errs = append(errs, fmt.Errorf("kafkastreams: --%s=%s: %s", name, value, why))
	}
	positiveInt := func(name string, v int) {
		if v <= 0 {
			bad(name, strconv.Itoa(v), "must be positive")
		}
	}
	positiveInt("internal_topic_partitions", *InternalTopicPartitions)
	if v := *InternalTopicPartitions; v > math.MaxInt32 {
		bad("internal_topic_partitions", strconv.Itoa(v), fmt.Sprintf("must be at most %d (a Kafka partition count is an int32)", math.MaxInt32))
	}
	if v := *CommitInterval; v <= 0 {
		bad("commit_interval", v.String(), "must be positive")
	}
	positiveInt("max_bundle_size", *MaxBundleSize)
	if v := *WatermarkStuckThreshold; v <= 0 {
		bad("watermark_stuck_threshold", v.String(), "must be positive")
	}
	if v := *SessionTimeout; v < time.Millisecond {
		bad("session_timeout", v.String(), "must be positive (in whole milliseconds)")
	}
	return errors.Join(errs...)
}

// properties collects repeated key=value flags.
type properties map[string]string

func (p properties) String() string {
	var kv []string
	for k, v := range p {
		if secretProperty(k) {
			v = "***"
		}
		kv = append(kv, k+"="+v)
	}
	return strings.Join(kv, ",")
}

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
// membership: the session timeout (--session_timeout; the heartbeat every
// third of it, at most every second) and, with static (--static_membership),
// static membership (KIP-345): group.instance.id is the instance slot's
// identity, so a copy restarted in a killed one's slot (same --state_dir)
// takes its place in every group at once, with its tasks, instead of
// waiting for the dead member's session to time out. Properties given with
// --kafka_property win.
func groupMembership(instanceID string, static bool, props map[string]string) map[string]string {
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

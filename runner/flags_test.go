package runner

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestValidate: a zero or negative numeric or duration setting is refused
// with an error naming its flag and value (--commit_interval=-1s was
// accepted and the job ran, with the default interval instead), and so is
// a setting that disagrees with another; a good value passes. Each case
// changes one setting of DefaultOptions.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Options)
		want string // "" for a good value
	}{
		{"commit_interval=-1s", func(o *Options) { o.CommitInterval = -time.Second }, "kafkastreams: --commit_interval=-1s: must be positive"},
		{"purge_interval=-1s", func(o *Options) { o.PurgeInterval = -time.Second }, "kafkastreams: --purge_interval=-1s: must not be negative (0 turns the purge off)"},
		{"purge_interval=0", func(o *Options) { o.PurgeInterval = 0 }, ""},
		{"purge_interval=1s", func(o *Options) { o.PurgeInterval = time.Second }, ""},
		{"commit_interval=0", func(o *Options) { o.CommitInterval = 0 }, "kafkastreams: --commit_interval=0s: must be positive"},
		{"commit_interval=-5ms", func(o *Options) { o.CommitInterval = -5 * time.Millisecond }, "kafkastreams: --commit_interval=-5ms: must be positive"},
		{"commit_interval=250ms", func(o *Options) { o.CommitInterval = 250 * time.Millisecond }, ""},
		{"commit_interval=1ns", func(o *Options) { o.CommitInterval = 1 }, ""},
		{"commit_interval=9.999s", func(o *Options) { o.CommitInterval = 9999 * time.Millisecond }, ""},
		{"commit_interval=10s", func(o *Options) { o.CommitInterval = 10 * time.Second }, "kafkastreams: --commit_interval=10s: must be below the stages' transaction timeout (transaction.timeout.ms, 10s: the runner's default, kafkaclient.TransactionTimeout; set --kafka_property=transaction.timeout.ms=<ms> for a longer one): the broker aborts a transaction open that long"},
		// A user's transaction.timeout.ms is the one the commit interval
		// is checked against (it was overridden by 10 s, quietly, and a
		// 30 s interval refused against the 10 s).
		{"commit_interval=30s under transaction.timeout.ms=60000", func(o *Options) {
			o.CommitInterval = 30 * time.Second
			o.KafkaProperties = map[string]string{"transaction.timeout.ms": "60000"}
		}, ""},
		{"commit_interval=6s under transaction.timeout.ms=5000", func(o *Options) {
			o.CommitInterval = 6 * time.Second
			o.KafkaProperties = map[string]string{"transaction.timeout.ms": "5000"}
		}, "kafkastreams: --commit_interval=6s: must be below the stages' transaction timeout (transaction.timeout.ms, 5s: from --kafka_property): the broker aborts a transaction open that long"},
		{"transaction.timeout.ms=10s", func(o *Options) { o.KafkaProperties = map[string]string{"transaction.timeout.ms": "10s"} },
			"kafkastreams: --kafka_property=transaction.timeout.ms=10s: must be a positive whole number of milliseconds"},
		// Properties the runner sets itself are refused, not overridden
		// quietly, each naming what to use instead.
		{"group.id", func(o *Options) { o.KafkaProperties = map[string]string{"group.id": "mine"} },
			"kafkastreams: --kafka_property=group.id=mine: the runner sets it itself: each stage's consumer group is <application_id>.<stage>: set --application_id"},
		{"isolation.level", func(o *Options) { o.KafkaProperties = map[string]string{"Isolation.Level": "read_uncommitted"} },
			"kafkastreams: --kafka_property=Isolation.Level=read_uncommitted: the runner sets it itself: every stage reads read_committed (exactly once); a Kafka source reads uncommitted records with kafkaio.WithReadUncommitted"},
		{"linger.ms=20 (a tuning the producers keep)", func(o *Options) { o.KafkaProperties = map[string]string{"linger.ms": "20"} }, ""},
		{"watermark_stuck_threshold=0", func(o *Options) { o.WatermarkStuckThreshold = 0 }, "kafkastreams: --watermark_stuck_threshold=0s: must be positive"},
		{"watermark_stuck_threshold=5s", func(o *Options) { o.WatermarkStuckThreshold = 5 * time.Second }, ""},
		{"max_bundle_size=0", func(o *Options) { o.MaxBundleSize = 0 }, "kafkastreams: --max_bundle_size=0: must be positive"},
		{"max_bundle_size=-3", func(o *Options) { o.MaxBundleSize = -3 }, "kafkastreams: --max_bundle_size=-3: must be positive"},
		{"max_bundle_size=1", func(o *Options) { o.MaxBundleSize = 1 }, ""},
		{"error_policy=dead_letter", func(o *Options) { o.ErrorPolicy = "dead_letter" }, ""},
		{"error_policy=skip", func(o *Options) { o.ErrorPolicy = "skip" }, "kafkastreams: --error_policy=skip: must be fail or dead_letter"},
		{"error_policy=", func(o *Options) { o.ErrorPolicy = "" }, "kafkastreams: --error_policy=: must be fail or dead_letter"},
		{"dead_letter_topic=dlq", func(o *Options) { o.ErrorPolicy, o.DeadLetterTopic = "dead_letter", "my.dlq_1-a" }, ""},
		{"dead_letter_topic without dead_letter", func(o *Options) { o.DeadLetterTopic = "dlq" }, "kafkastreams: --dead_letter_topic=dlq: needs --error_policy=dead_letter (under fail nothing is written there)"},
		{"dead_letter_topic=a b", func(o *Options) { o.ErrorPolicy, o.DeadLetterTopic = "dead_letter", "a b" }, `kafkastreams: --dead_letter_topic=a b: holds ' ': a Kafka topic name has only ASCII letters, digits, '.', '_' and '-'`},
		{"dead_letter_topic=..", func(o *Options) { o.ErrorPolicy, o.DeadLetterTopic = "dead_letter", ".." }, "kafkastreams: --dead_letter_topic=..: is not a legal Kafka topic name"},
		{"dead_letter_topic=250 x", func(o *Options) { o.ErrorPolicy, o.DeadLetterTopic = "dead_letter", strings.Repeat("x", 250) }, "kafkastreams: --dead_letter_topic=" + strings.Repeat("x", 250) + ": is 250 characters long: a Kafka topic name has at most 249"},
		{"internal_topic_partitions=0", func(o *Options) { o.InternalTopicPartitions = 0 }, "kafkastreams: --internal_topic_partitions=0: must be positive"},
		{"internal_topic_partitions=-1", func(o *Options) { o.InternalTopicPartitions = -1 }, "kafkastreams: --internal_topic_partitions=-1: must be positive"},
		{"internal_topic_partitions=4294967297", func(o *Options) { o.InternalTopicPartitions = 4294967297 }, "kafkastreams: --internal_topic_partitions=4294967297: must be at most 2147483647 (a Kafka partition count is an int32)"},
		{"internal_topic_partitions=2147483647", func(o *Options) { o.InternalTopicPartitions = 2147483647 }, ""},
		{"default_idleness=0", func(o *Options) { o.DefaultIdleness = 0 }, ""},
		{"default_idleness=-1s", func(o *Options) { o.DefaultIdleness = -time.Second }, "kafkastreams: --default_idleness=-1s: must not be negative (0 turns idleness off)"},
		{"gbk_fire_budget=0", func(o *Options) { o.GBKFireBudget = 0 }, ""},
		{"session_timeout=0", func(o *Options) { o.SessionTimeout = 0 }, "kafkastreams: --session_timeout=0s: must be positive (in whole milliseconds)"},
		{"session_timeout=2s", func(o *Options) { o.SessionTimeout = 2 * time.Second }, ""},
		// The cross-checks: the group membership as the consumers get it.
		{"heartbeat.interval.ms=6000", func(o *Options) { o.KafkaProperties = map[string]string{"heartbeat.interval.ms": "6000"} },
			"kafkastreams: --kafka_property=heartbeat.interval.ms=6000: must be below the session timeout (6000 ms, --session_timeout or session.timeout.ms): a member would miss its session between heartbeats"},
		{"session.timeout.ms=900 beside a 1 s heartbeat", func(o *Options) {
			o.KafkaProperties = map[string]string{"session.timeout.ms": "900", "heartbeat.interval.ms": "1000"}
		}, "kafkastreams: --kafka_property=heartbeat.interval.ms=1000: must be below the session timeout (900 ms, --session_timeout or session.timeout.ms): a member would miss its session between heartbeats"},
		{"session.timeout.ms=900 beside the derived heartbeat", func(o *Options) { o.KafkaProperties = map[string]string{"session.timeout.ms": "900"} },
			"kafkastreams: --kafka_property=session.timeout.ms=900: must be above the heartbeat (1000 ms: a third of --session_timeout, at most 1 s; or set heartbeat.interval.ms too)"},
		{"session_timeout=2ms", func(o *Options) { o.SessionTimeout = 2 * time.Millisecond }, ""},
		{"session_timeout=1ms", func(o *Options) { o.SessionTimeout = time.Millisecond }, // its heartbeat, max(min(1/3, 1000), 1) ms, is 1 ms: not below it
			"kafkastreams: --session_timeout=1ms: must be at least 2ms: the heartbeat (heartbeat.interval.ms, a third of it, at least 1 ms) must be below it"},
		{"session.timeout.ms=abc", func(o *Options) { o.KafkaProperties = map[string]string{"session.timeout.ms": "abc"} },
			"kafkastreams: --kafka_property=session.timeout.ms=abc: must be a whole number of milliseconds"},
		{"max.poll.interval.ms=5000", func(o *Options) { o.KafkaProperties = map[string]string{"max.poll.interval.ms": "5000"} },
			"kafkastreams: --kafka_property=max.poll.interval.ms=5000: must be whole milliseconds, at least the session timeout (6000 ms, --session_timeout or session.timeout.ms)"},
		{"max.poll.interval.ms=6000", func(o *Options) { o.KafkaProperties = map[string]string{"max.poll.interval.ms": "6000"} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.set(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("want error %q, got %v", tc.want, err)
			}
		})
	}
}

// TestValidateNamesEveryBadSetting: several bad settings are all named,
// one line each, so a user fixes them in one go.
func TestValidateNamesEveryBadSetting(t *testing.T) {
	o := DefaultOptions()
	o.CommitInterval, o.MaxBundleSize, o.InternalTopicPartitions = -time.Second, 0, -2
	err := o.Validate()
	if err == nil {
		t.Fatal("want an error, got none")
	}
	want := []string{
		"kafkastreams: --internal_topic_partitions=-2: must be positive",
		"kafkastreams: --commit_interval=-1s: must be positive",
		"kafkastreams: --max_bundle_size=0: must be positive",
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("want the lines\n%s\ngot\n%s", strings.Join(want, "\n"), err)
	}
}

// TestDefaultOptionsAreTheFlagsDefaults: an empty command line gives
// DefaultOptions, which pass Validate.
func TestDefaultOptionsAreTheFlagsDefaults(t *testing.T) {
	for _, name := range []string{"bootstrap_servers", "application_id", "internal_topic_partitions", "commit_interval", "purge_interval", "max_bundle_size", "gbk_fire_budget", "merge_accumulators", "merge_session_accumulators", "state_dir", "watermarks_addr", "default_idleness", "session_timeout", "static_membership", "watermark_stuck_threshold", "drain"} {
		setFlag(t, name, flag.Lookup(name).DefValue)
	}
	if got, want := OptionsFromFlags(), DefaultOptions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the flags' defaults\n%+v\nare not DefaultOptions\n%+v", got, want)
	}
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
}

// TestOptionsFromFlags: a command line's flags land in their fields, and
// a bad one is named by Validate as the user typed it.
func TestOptionsFromFlags(t *testing.T) {
	setFlag(t, "commit_interval", "-1s")
	setFlag(t, "max_bundle_size", "7")
	if err := flag.Set("kafka_property", "security.protocol=SSL"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { delete(kafkaProperties, "security.protocol") })
	o := OptionsFromFlags()
	if o.MaxBundleSize != 7 || o.KafkaProperties["security.protocol"] != "SSL" {
		t.Fatalf("--max_bundle_size=7 --kafka_property=security.protocol=SSL gave %d, %v", o.MaxBundleSize, o.KafkaProperties)
	}
	if err := o.Validate(); err == nil || err.Error() != "kafkastreams: --commit_interval=-1s: must be positive" {
		t.Fatalf("--commit_interval=-1s: got %v", err)
	}
}

// setFlag sets the command-line flag name to value for the test's duration.
func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag --%s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatalf("--%s=%s: %v", name, value, err)
	}
	t.Cleanup(func() {
		if err := flag.Set(name, old); err != nil {
			t.Errorf("restore --%s=%s: %v", name, old, err)
		}
	})
}

package runner

import (
	"bytes"
	"log/slog"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/recordtime"
)

// TestWarnSmallSinks: a Kafka sink whose max.message.bytes is below the
// producers' batch.size is named once at start (librdkafka's batch of
// records that fit one by one would be refused whole); one above it, one
// of unknown limit, or any with a batch.size set at most its limit, not.
func TestWarnSmallSinks(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	pl := &plan.Plan{Stages: []*plan.Stage{
		{Name: "s0", KafkaSinks: []plan.KafkaSink{{Topic: "small"}, {Topic: "big"}, {Topic: "unknown"}}},
		{Name: "s1", KafkaSinks: []plan.KafkaSink{{Topic: "small"}}},
	}}
	limits := map[string]int{"small": 10_000, "big": 2_000_000}
	warnSmallSinks(pl, nil, limits)
	out := buf.String()
	if strings.Count(out, "topic=small") != 1 || strings.Contains(out, "topic=big") || strings.Contains(out, "topic=unknown") {
		t.Errorf("with the default batch.size, want one warning naming small:\n%s", out)
	}
	buf.Reset()
	warnSmallSinks(pl, map[string]string{"batch.size": "10000"}, limits)
	if buf.Len() != 0 {
		t.Errorf("with batch.size 10000, want no warning:\n%s", buf.String())
	}
}

// TestInternalFixes: of the internal topics that existed before the start,
// a max.message.bytes below the runner's is raised, and a data topic's
// finite retention.ms or retention.bytes made -1 and its segment.bytes
// the runner's (issue 23: a data topic
// made by an earlier version kept the broker's 7 days); the metrics and
// control topics' finite retention made -1 (issue 23: the application's
// totals undercounted after 7 days, a drain request could be deleted); a
// changelog's "compact,delete" made "compact" (its retention no matter,
// compacted); a topic created now is left as it is.
func TestInternalFixes(t *testing.T) {
	big := strconv.Itoa(kafkaclient.InternalTopicMaxMessageBytes)
	week := "604800000"
	cfgs := map[string]map[string]string{
		"app-s1":           {"max.message.bytes": big, "retention.ms": week, "retention.bytes": "-1", "segment.bytes": big, "cleanup.policy": "delete"},
		"app-s2":           {"max.message.bytes": "1048588", "retention.ms": "-1", "retention.bytes": "1073741824", "segment.bytes": "1073741824", "cleanup.policy": "delete"},
		"app-s3":           {"max.message.bytes": big, "retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": big, "cleanup.policy": "delete"},
		"app-s1-changelog": {"max.message.bytes": big, "retention.ms": week, "retention.bytes": "-1", "segment.bytes": "1073741824", "cleanup.policy": "compact"},
		"app-s2-changelog": {"max.message.bytes": big, "retention.ms": week, "retention.bytes": "-1", "cleanup.policy": "compact,delete"},
		"app-watermarks":   {"max.message.bytes": big, "retention.ms": week, "retention.bytes": "-1", "cleanup.policy": "compact"},
		"app-metrics":      {"max.message.bytes": big, "retention.ms": week, "retention.bytes": "-1", "cleanup.policy": "delete"},
		"app-control":      {"max.message.bytes": big, "retention.ms": "-1", "retention.bytes": "1073741824", "cleanup.policy": "delete"},
		"app-new":          {"max.message.bytes": big, "retention.ms": week, "retention.bytes": "-1", "segment.bytes": "1073741824"},
	}
	existing := []string{"app-s1", "app-s2", "app-s3", "app-s1-changelog", "app-s2-changelog", "app-watermarks", "app-metrics", "app-control"}
	data, compacted, kept := kafkaclient.DataTopicConfig(), kafkaclient.CompactedTopicConfig(), kafkaclient.KeptTopicConfig()
	settings := map[string]map[string]string{"app-s1": data, "app-s2": data, "app-s3": data, "app-new": data,
		"app-s1-changelog": compacted, "app-s2-changelog": compacted, "app-watermarks": compacted, "app-metrics": kept, "app-control": kept}
	got := internalFixes(cfgs, existing, settings)
	want := map[string]map[string]string{
		"app-s1":           {"retention.ms": "-1"},
		"app-s2":           {"max.message.bytes": big, "retention.bytes": "-1", "segment.bytes": big},
		"app-s2-changelog": {"cleanup.policy": "compact"},
		"app-metrics":      {"retention.ms": "-1"},
		"app-control":      {"retention.bytes": "-1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("internalFixes = %v, want %v", got, want)
	}
}

// TestTimestampAfterMax: a topic's message.timestamp.after.max.ms is how
// far ahead its records' timestamps may be; LogAppendTime, Long.MAX_VALUE
// and a broker without the entry take any; a topic not answered for, or
// whose entry is not a number, is left to the default.
func TestTimestampAfterMax(t *testing.T) {
	got := timestampAfterMax(map[string]map[string]string{
		"hour":      {"message.timestamp.after.max.ms": "3600000", "message.timestamp.type": "CreateTime"},
		"zero":      {"message.timestamp.after.max.ms": "0"},
		"append":    {"message.timestamp.after.max.ms": "3600000", "message.timestamp.type": "LogAppendTime"},
		"unlimited": {"message.timestamp.after.max.ms": "9223372036854775807"},
		"old":       {"max.message.bytes": "1048588"},
		"garbage":   {"message.timestamp.after.max.ms": "soon"},
	})
	want := map[string]time.Duration{"hour": time.Hour, "zero": 0, "append": recordtime.NoTimestampLimit, "unlimited": recordtime.NoTimestampLimit, "old": recordtime.NoTimestampLimit}
	if !maps.Equal(got, want) {
		t.Errorf("timestampAfterMax = %v, want %v", got, want)
	}
}

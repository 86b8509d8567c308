package runner

import (
	"bytes"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
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
// made by an earlier version kept the broker's 7 days); a changelog's or
// the report topic's retention (not data topics) and a topic created now
// are left as they are.
func TestInternalFixes(t *testing.T) {
	big := strconv.Itoa(kafkaclient.InternalTopicMaxMessageBytes)
	cfgs := map[string]map[string]string{
		"app-s1":           {"max.message.bytes": big, "retention.ms": "604800000", "retention.bytes": "-1", "segment.bytes": big},
		"app-s2":           {"max.message.bytes": "1048588", "retention.ms": "-1", "retention.bytes": "1073741824", "segment.bytes": "1073741824"},
		"app-s3":           {"max.message.bytes": big, "retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": big},
		"app-s1-changelog": {"max.message.bytes": big, "retention.ms": "604800000", "retention.bytes": "-1", "segment.bytes": "1073741824"},
		"app-new":          {"max.message.bytes": big, "retention.ms": "604800000", "retention.bytes": "-1", "segment.bytes": "1073741824"},
	}
	existing := []string{"app-s1", "app-s2", "app-s3", "app-s1-changelog"}
	data := map[string]bool{"app-s1": true, "app-s2": true, "app-s3": true, "app-new": true}
	got := internalFixes(cfgs, existing, data)
	want := map[string]map[string]string{
		"app-s1": {"retention.ms": "-1"},
		"app-s2": {"max.message.bytes": big, "retention.bytes": "-1", "segment.bytes": big},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("internalFixes = %v, want %v", got, want)
	}
}

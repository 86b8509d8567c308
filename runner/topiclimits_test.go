package runner

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/kafkastreams/kafkastreams/runner/plan"
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

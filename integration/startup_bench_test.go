package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
)

// startupRounds is how many times BenchmarkStartup measures each side,
// alternating, after one warm-up of each; it reports the medians.
const startupRounds = 5

// BenchmarkStartup measures this runner's start-up, Execute's start to the
// first input record read by any stage (runner.Result.Startup: creating
// topics, recording the plan, the producers' InitTransactions, joining the
// groups, restoring state), for a three-stage job (Create, Reshuffle,
// identity ParDo, Reshuffle) on a fresh application id, against the
// floor any Kafka application pays on the same broker in the same run: a
// bare confluent-kafka-go read_committed consumer created, subscribed to a
// topic holding one record, and polled to that record (one group join and
// one fetch). It reports both medians and their ratio (runner / bare); the
// runner's timeline of its median round is logged step by step. It ignores
// b.N: run it with -benchtime=1x (make bench). (A process of its own adds
// its start to the runner's figure: 30-150 ms for cmd/commitactivity
// here, the timeline's first step.)
func BenchmarkStartup(b *testing.B) {
	if broker == nil {
		b.Skip("needs a Kafka broker; not under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bs := broker.BootstrapServers()
	topic := fmt.Sprintf("startup-bare-%d", time.Now().UnixNano())
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	if err := kafkaenv.Produce(ctx, bs, topic, kafkaenv.Record{Partition: 0, Value: []byte("first")}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var bare, ours []time.Duration
	var timelines [][]runner.StartupStep
	for round := 0; round <= startupRounds; round++ {
		d, err := bareFirstRead(ctx, bs, topic, fmt.Sprintf("%s-g%d", topic, round))
		if err != nil {
			b.Fatal(err)
		}
		p, s := beam.NewPipelineWithRoot()
		_ = beam.Reshuffle(s, beam.ParDo(s, identity, beam.Reshuffle(s, beam.Create(s, "x"))))
		res := runBench(b, ctx, p)
		if len(res.Startup) == 0 || res.Startup[len(res.Startup)-1].Name != "first record" {
			b.Fatalf("round %d: the runner's start-up timeline has no first record: %v", round, res.Startup)
		}
		// From Execute's start: without the first step, the test process's age.
		steps := res.Startup[1:]
		var took time.Duration
		for _, st := range steps {
			took += st.Took
		}
		if round == 0 {
			b.Logf("warm-up: bare consumer %v, runner %v", d.Round(time.Millisecond), took.Round(time.Millisecond))
			continue // the warm-up: connections, the transaction coordinator's first use
		}
		bare, ours = append(bare, d), append(ours, took)
		timelines = append(timelines, steps)
	}
	b.StopTimer()
	bareMed, ourMed := median(bare), median(ours)
	i := slices.Index(ours, ourMed)
	var tl []string
	for _, st := range timelines[i] {
		tl = append(tl, fmt.Sprintf("%s %dms", st.Name, st.Took.Milliseconds()))
	}
	b.ReportMetric(float64(ourMed.Milliseconds()), "runner-ms")
	b.ReportMetric(float64(bareMed.Milliseconds()), "bare-ms")
	b.ReportMetric(float64(ourMed)/float64(bareMed), "runner/bare")
	b.Logf("start-up to the first record read, median of %d: runner %v (rounds %v), bare consumer %v (rounds %v), ratio %.2f",
		startupRounds, ourMed.Round(time.Millisecond), roundAll(ours), bareMed.Round(time.Millisecond), roundAll(bare), float64(ourMed)/float64(bareMed))
	b.Logf("the runner's median round, step by step: %s", strings.Join(tl, ", "))
}

// bareFirstRead creates a read_committed consumer in the new group group,
// subscribes it to topic and polls until it reads a record; it returns the
// time from before the consumer's creation to that record.
func bareFirstRead(ctx context.Context, bs, topic, group string) (time.Duration, error) {
	start := time.Now()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
		"enable.auto.commit": false, "auto.offset.reset": "earliest", "partition.assignment.strategy": "cooperative-sticky"})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.Subscribe(topic, nil); err != nil {
		return 0, err
	}
	for ctx.Err() == nil {
		if m, ok := c.Poll(10).(*kafka.Message); ok && m.TopicPartition.Error == nil {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("bare consumer of %s: no record: %w", topic, ctx.Err())
}

// median returns the median of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

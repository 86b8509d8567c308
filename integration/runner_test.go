package integration

import (
	"context"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner"
)

var (
	doubled = beam.NewCounter("kafkastreams.test", "doubled")
	seen    = beam.NewCounter("kafkastreams.test", "seen")
	sizes   = beam.NewDistribution("kafkastreams.test", "values")
)

func double(ctx context.Context, x int) int {
	doubled.Inc(ctx, 1)
	return 2 * x
}

func observe(ctx context.Context, x int) int {
	seen.Inc(ctx, 1)
	sizes.Update(ctx, int64(x))
	return x
}

func init() {
	register.Function2x1(double)
	register.Function2x1(observe)
}

func counter(t *testing.T, res beam.PipelineResult, name string) int64 {
	t.Helper()
	for _, c := range res.Metrics().AllMetrics().Counters() {
		if c.Key.Name == name {
			return c.Committed
		}
	}
	t.Fatalf("no counter %q in %v", name, res.Metrics().AllMetrics().Counters())
	return 0
}

// TestCreateParDoReshuffleParDo runs Create -> ParDo -> Reshuffle -> ParDo ->
// Reshuffle on the real broker and checks that every element went through
// each ParDo exactly once (committed counters) and reached the last topic
// exactly once (read_committed).
func TestCreateParDoReshuffleParDo(t *testing.T) {
	b := needBroker(t)
	const n = 1000
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	p, s := beam.NewPipelineWithRoot()
	col := beam.ParDo(s, double, beam.CreateList(s, in))
	col = beam.ParDo(s, observe, beam.Reshuffle(s, col))
	_ = beam.Reshuffle(s, col)

	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := beam.Run(withJob(ctx, b.BootstrapServers(), app), runner.Name, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ran in %v; stats %+v", time.Since(start), res.(*runner.Result).Stats)
	if got := counter(t, res, "doubled"); got != n {
		t.Errorf("doubled: %d, want %d", got, n)
	}
	if got := counter(t, res, "seen"); got != n {
		t.Errorf("seen: %d, want %d", got, n)
	}
	pl := res.(*runner.Result).Plan
	last := pl.Stages[len(pl.Stages)-1]
	recs, err := kafkaenv.Consume(ctx, b.BootstrapServers(), last.InputTopic, -1, kafkaenv.ReadCommitted, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	elements := 0
	for _, r := range recs {
		env := &pb.Envelope{}
		if err := proto.Unmarshal(r.Value, env); err != nil {
			t.Fatalf("record in %s is not an Envelope: %v", last.InputTopic, err)
		}
		if env.GetElement() != nil {
			elements++
		}
	}
	if elements != n {
		t.Errorf("elements in %s: %d, want %d", last.InputTopic, elements, n)
	}
}

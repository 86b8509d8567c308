package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// topicsWithPrefix lists the broker's topics whose names start with prefix.
func topicsWithPrefix(t *testing.T, bootstrap, prefix string) []string {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	md, err := a.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name := range md.Topics {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out
}

// TestSecondInstanceWithAnotherPlanRefusesToStart: the plan is recorded for
// the application; an instance whose pipeline plans differently stops before
// it processes anything and says what differs.
func TestSecondInstanceWithAnotherPlanRefusesToStart(t *testing.T) {
	b := needBroker(t)
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	p1, s1 := beam.NewPipelineWithRoot()
	_ = beam.Reshuffle(s1, beam.ParDo(s1, double, beam.Create(s1, 1, 2, 3)))
	if _, err := beam.Run(withJob(ctx, b.BootstrapServers(), app), runner.Name, p1); err != nil {
		t.Fatal(err)
	}

	p2, s2 := beam.NewPipelineWithRoot()
	_ = beam.Reshuffle(s2, beam.ParDo(s2, observe, beam.Create(s2, 1, 2, 3)))
	_, err := beam.Run(withJob(ctx, b.BootstrapServers(), app), runner.Name, p2)
	if !errors.Is(err, plan.ErrPlanMismatch) {
		t.Fatalf("want ErrPlanMismatch, got %v", err)
	}
	for _, want := range []string{"s0-Impulse", "transforms", "integration.double", "integration.observe"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q:\n%v", want, err)
		}
	}
	t.Logf("refused as expected:\n%v", err)
}

// TestUnsupportedTransformFailsBeforeAnyTopic: a transform this runner cannot
// execute is an error naming it and its URN, and no topic of the application
// exists afterwards.
func TestUnsupportedTransformFailsBeforeAnyTopic(t *testing.T) {
	b := needBroker(t)
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// An external transform with a URN no runner knows (TestStream, the
	// example here before, runs now).
	const urn = "beam:transform:kafkastreams_test_unknown:v1"
	p, s := beam.NewPipelineWithRoot()
	out := beam.External(s, urn, nil, nil, []beam.FullType{typex.New(reflectx.String)}, false)
	_ = beam.ParDo(s, strings.ToUpper, out[0])
	_, err := beam.Run(withJob(ctx, b.BootstrapServers(), app), runner.Name, p)
	if !errors.Is(err, plan.ErrUnsupported) || !strings.Contains(err.Error(), urn) {
		t.Fatalf("want ErrUnsupported naming the URN %s, got %v", urn, err)
	}
	if got := topicsWithPrefix(t, b.BootstrapServers(), app); len(got) != 0 {
		t.Fatalf("topics exist after a refused pipeline: %v", got)
	}
	t.Logf("refused as expected: %v", err)
}

// sideSDF is an unbounded splittable DoFn (it may checkpoint) that reads a
// side input: refused by the plan (not built yet).
type sideSDF struct{}

func (sideSDF) CreateInitialRestriction(_ []byte) offsetrange.Restriction {
	return offsetrange.Restriction{Start: 0, End: 1}
}
func (sideSDF) SplitRestriction(_ []byte, r offsetrange.Restriction) []offsetrange.Restriction {
	return []offsetrange.Restriction{r}
}
func (sideSDF) RestrictionSize(_ []byte, r offsetrange.Restriction) float64 { return r.Size() }
func (sideSDF) CreateTracker(r offsetrange.Restriction) *sdf.LockRTracker {
	return sdf.NewLockRTracker(offsetrange.NewTracker(r))
}
func (sideSDF) ProcessElement(rt *sdf.LockRTracker, _ []byte, side []int, emit func(int)) sdf.ProcessContinuation {
	if rt.TryClaim(int64(0)) {
		emit(len(side))
	}
	return sdf.StopProcessing()
}

func init() {
	register.DoFn4x1[*sdf.LockRTracker, []byte, []int, func(int), sdf.ProcessContinuation](&sideSDF{})
	register.Emitter1[int]()
}

// TestRefusedSplittableDoFnFailsBeforeAnyTopic: a splittable DoFn the
// runner refuses (an unbounded one, which may checkpoint, reading a side
// input) is refused before any topic exists (found by a newcomer: such
// errors used to come after the topics), naming the DoFn.
func TestRefusedSplittableDoFnFailsBeforeAnyTopic(t *testing.T) {
	b := needBroker(t)
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, s := beam.NewPipelineWithRoot()
	side := beam.Create(s, 1, 2, 3)
	_ = beam.ParDo(s, &sideSDF{}, beam.Impulse(s), beam.SideInput{Input: side})
	_, err := beam.Run(withJob(ctx, b.BootstrapServers(), app), runner.Name, p)
	if err == nil || !strings.Contains(err.Error(), "splittable") || !strings.Contains(err.Error(), "sideSDF") {
		t.Fatalf("want an error naming the splittable DoFn sideSDF, got %v", err)
	}
	if got := topicsWithPrefix(t, b.BootstrapServers(), app); len(got) != 0 {
		t.Fatalf("topics exist after a refused pipeline: %v", got)
	}
	t.Logf("refused as expected: %v", err)
}

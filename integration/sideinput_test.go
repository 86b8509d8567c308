package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"

	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

var (
	sideProduct = beam.NewCounter("kafkastreams.test", "side_product")
	sideCalls   = beam.NewCounter("kafkastreams.test", "side_calls")
	mapFound    = beam.NewCounter("kafkastreams.test", "map_found")
)

// slowSide passes x on after a pause on the first element of each bundle,
// so the side input is complete well after the main input is ready.
func slowSide(x int) int {
	if x == 0 {
		time.Sleep(2 * time.Second)
	}
	return x
}

// timesSideCount emits x times the number of side input elements and counts
// that product, exactly once per committed bundle.
func timesSideCount(ctx context.Context, x int, side []int) int {
	sideCalls.Inc(ctx, 1)
	sideProduct.Inc(ctx, int64(x*len(side)))
	return x * len(side)
}

// lookupSum emits the key and the sum of its values in the multimap side
// input, and counts the values found.
func lookupSum(ctx context.Context, k string, vals func(string) func(*int) bool) (string, int) {
	sum, n := 0, 0
	var v int
	iter := vals(k)
	for iter(&v) {
		sum += v
		n++
	}
	mapFound.Inc(ctx, int64(n))
	return k, sum
}

func keyOf(k string, _ func(*int) bool) string { return k }

func sideLen(s string) (string, int) { return s, len(s) }

func sideFormat(k string, v int) string { return fmt.Sprintf("%s=%d", k, v) }

func init() {
	register.Function1x1(slowSide)
	register.Function3x1(timesSideCount)
	register.Function3x2(lookupSum)
	register.Function2x1(keyOf)
	register.Function1x2(sideLen)
	register.Function2x1(sideFormat)
}

// runOn runs p on the test broker as a fresh application and returns its
// result.
func runOn(t *testing.T, p *beam.Pipeline) *runner.Result {
	t.Helper()
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := beam.Run(withJob(ctx, b.BootstrapServers(), uniqueName(t, "app")), runner.Name, p)
	if err != nil {
		t.Fatal(err)
	}
	r := res.(*runner.Result)
	t.Logf("ran in %v; stats %+v", time.Since(start), r.Stats)
	return r
}

// sideStageOf returns the one stage of pl with side inputs.
func sideStageOf(t *testing.T, pl *plan.Plan) *plan.Stage {
	t.Helper()
	var out *plan.Stage
	for _, s := range pl.Stages {
		if len(s.SideInputs) > 0 {
			if out != nil {
				t.Fatalf("two stages with side inputs: %s and %s", out.Name, s.Name)
			}
			out = s
		}
	}
	if out == nil {
		t.Fatal("no stage with side inputs")
	}
	return out
}

// TestIterableSideInputSum: each of 1..100 is multiplied by the size of a
// side input of 10 elements whose producer is slow (2 s). Every main element
// must wait for the whole side input: the committed sum of products is
// exactly 5050*10 and each element is processed once. The side-input stage
// never aborts: it never ran a bundle before its side input was complete
// (the State service would have refused it).
func TestIterableSideInputSum(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	main := make([]int, 100)
	for i := range main {
		main[i] = i + 1
	}
	side := beam.ParDo(s, slowSide, beam.Create(s, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9))
	_ = beam.ParDo(s, timesSideCount, beam.CreateList(s, main), beam.SideInput{Input: side})
	res := runOn(t, p)
	if got := counter(t, res, "side_product"); got != 50500 {
		t.Errorf("sum of x*len(side): %d, want 50500", got)
	}
	if got := counter(t, res, "side_calls"); got != 100 {
		t.Errorf("elements processed: %d, want 100", got)
	}
	st := sideStageOf(t, res.Plan)
	if a := res.Stats[st.Name].Aborts; a != 0 {
		t.Errorf("stage %s aborted %d transactions, want 0 (a bundle ran before its side input was ready)", st.Name, a)
	}
}

// TestMultimapSideInputAfterGroupByKey: the main input comes out of a
// GroupByKey (a stateful head), so the ParDo with the multimap side input
// gets a stage of its own (HeadSideInputs). Each key's lookup finds its
// values; an absent key finds none; passert checks the output.
func TestMultimapSideInputAfterGroupByKey(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	side := beam.ParDo(s, sideLen, beam.Create(s, "a", "bb", "a", "ccc"))
	keys := beam.ParDo(s, keyOf, beam.GroupByKey(s, beam.ParDo(s, sideLen, beam.Create(s, "a", "bb", "zz", "a"))))
	out := beam.ParDo(s, sideFormat, beam.ParDo(s, lookupSum, keys, beam.SideInput{Input: side}))
	passert.Equals(s, out, "a=2", "bb=2", "zz=0")
	res := runOn(t, p)
	if got := counter(t, res, "map_found"); got != 3 {
		t.Errorf("values found: %d, want 3 (a twice, bb once)", got)
	}
	found := false
	for _, st := range res.Plan.Stages {
		if st.Head == plan.HeadSideInputs {
			found = true
		}
	}
	if !found {
		t.Errorf("no %s stage in the plan", plan.HeadSideInputs)
	}
}

// TestPassertEqualsWithSideInputs: passert.Equals (CoGroupByKey, then a
// ParDo on an Impulse reading three side inputs in the global window)
// passes on a correct pipeline and fails the run on a wrong one with
// passert's report of what differs.
func TestPassertEqualsWithSideInputs(t *testing.T) {
	t.Run("equal", func(t *testing.T) {
		p, s := beam.NewPipelineWithRoot()
		side := beam.Create(s, 7, 8, 9)
		out := beam.ParDo(s, timesSideCount, beam.Create(s, 1, 2, 3), beam.SideInput{Input: side})
		passert.Equals(s, out, 3, 6, 9)
		runOn(t, p)
	})
	t.Run("not equal", func(t *testing.T) {
		p, s := beam.NewPipelineWithRoot()
		side := beam.Create(s, 7, 8, 9)
		out := beam.ParDo(s, timesSideCount, beam.Create(s, 1, 2, 3), beam.SideInput{Input: side})
		passert.Equals(s, out, 3, 6, 10)
		b := needBroker(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, err := beam.Run(withJob(ctx, b.BootstrapServers(), uniqueName(t, "app")), runner.Name, p)
		if err == nil {
			t.Fatal("passert.Equals of different collections: the run succeeded")
		}
		t.Logf("error (expected): %v", err)
		// passert's own failure, naming what differs (9 unexpected, 10
		// missing): not any error, such as a timeout or a failed start.
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Fatalf("the run ended by its context, not by passert: %v", err)
		}
		for _, want := range []string{"actual PCollection does not match expected values", "2 correct entries", "1 unexpected entries", "+++\n9", "1 missing entries", "---\n10"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the run's error lacks passert's %q: %v", want, err)
			}
		}
	})
}

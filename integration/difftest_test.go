package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/kafkastreams/kafkastreams/integration/difftest"
	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
)

// TestDifferential runs random pipelines (integration/difftest.Generate:
// Create or TestStream, ParDo, Flatten, Reshuffle, GroupByKey,
// CoGroupByKey, lifted and unlifted Combine, side inputs, a stateful DoFn
// with bag and value state and an event-time timer, global, fixed, sliding
// and session windows, allowed lateness, the SDK's triggers, accumulating
// and discarding panes) on Prism, in process, and on this runner against
// the real broker, and compares their outputs as multisets
// (difftest.Observe: each element with its key, value, window, timestamp
// and pane info where the model fixes them). Which seeds:
//
//   - KAFKASTREAMS_DIFFTEST_SEED=s: seed s alone (replays a difference);
//   - KAFKASTREAMS_DIFFTEST_SPEC='<json>': that Spec alone (a minimal
//     pipeline, as a difference prints it);
//   - KAFKASTREAMS_DIFFTEST_N=n: n seeds from a random start (logged),
//     KAFKASTREAMS_DIFFTEST_MINUTES=m: as many as fit in m minutes
//     (`make difftest N=n` or `MINUTES=m`);
//   - else difftest.MakeTestSeeds (`make test`; picked so that together
//     they have every feature difftest.Features names).
//
// A difference fails the test with the seed, the pipeline, the lines in
// one output only, and a minimal pipeline that still differs (shrunk by
// difftest.Shrink, at most KAFKASTREAMS_DIFFTEST_SHRINK_MINUTES, default
// 10). A seed whose runs both observed nothing fails too (every sink left
// out or empty: equal whatever the runners did; difftest.Observed).
// Pipelines are made with difftest.DefaultOptions: also stateful
// DoFns with side inputs, refused by this runner before issue 14
// (KAFKASTREAMS_DIFFTEST_REFUSED=0 leaves them out).
//
// Exclusions: what the generator never builds or the comparison leaves
// out, each with its reason (the Beam model leaves the result open, the Go
// SDK or Prism cannot run it, this runner refuses it, or Prism departs from
// the model and the case is compared as the model leaves it comparable),
// are listed in one place, difftest.Exclusions (integration/difftest/doc.go;
// `go doc ./integration/difftest Exclusions`); README.md and CONTRIBUTING.md
// point at it.
func TestDifferential(t *testing.T) {
	needBroker(t)
	if js := os.Getenv("KAFKASTREAMS_DIFFTEST_SPEC"); js != "" {
		var sp difftest.Spec
		if err := json.Unmarshal([]byte(js), &sp); err != nil {
			t.Fatalf("KAFKASTREAMS_DIFFTEST_SPEC: not a difftest.Spec in JSON: %v", err)
		}
		t.Run("spec", func(t *testing.T) {
			diff, err := difftestRun(t, sp)
			if err != nil {
				t.Fatalf("%v\n%s", err, sp)
			}
			if len(diff) > 0 {
				t.Errorf("DIFFERENCE: Prism (-) and kafkastreams (+) differ:\n  %s\npipeline:\n%s", strings.Join(diff, "\n  "), sp)
			}
		})
		return
	}
	seeds, deadline := difftestPlan(t)
	o := difftest.DefaultOptions()
	if os.Getenv("KAFKASTREAMS_DIFFTEST_REFUSED") == "0" {
		// what this runner refused before issue 14 left out
		o = difftest.Options{}
	}
	for i := 0; ; i++ {
		var seed int64
		if seeds != nil {
			if i >= len(seeds) {
				break
			}
			seed = seeds[i]
		} else {
			if time.Now().After(deadline) {
				break
			}
			seed = difftestStart + int64(i)
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			sp := difftest.Generate(seed, o)
			diff, err := difftestRun(t, sp)
			if err != nil {
				t.Fatalf("seed %d: %v\n%s", seed, err, sp)
			}
			if len(diff) == 0 {
				return
			}
			t.Errorf("DIFFERENCE seed %d: Prism (-) and kafkastreams (+) differ:\n  %s\npipeline:\n%s", seed, strings.Join(diff, "\n  "), sp)
			min, mdiff := difftestShrink(t, sp)
			js, _ := json.Marshal(min)
			t.Errorf("DIFFERENCE seed %d, minimal pipeline:\n%s  differences:\n  %s\n  replay: KAFKASTREAMS_DIFFTEST_SPEC='%s'", seed, min, strings.Join(mdiff, "\n  "), js)
		})
	}
}

// difftestStart is the first seed of a random run (logged).
var difftestStart int64

func difftestPlan(t *testing.T) ([]int64, time.Time) {
	if s := os.Getenv("KAFKASTREAMS_DIFFTEST_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("KAFKASTREAMS_DIFFTEST_SEED=%q: not an integer", s)
		}
		return []int64{seed}, time.Time{}
	}
	n, mins := os.Getenv("KAFKASTREAMS_DIFFTEST_N"), os.Getenv("KAFKASTREAMS_DIFFTEST_MINUTES")
	if n == "" && mins == "" {
		return difftest.MakeTestSeeds, time.Time{}
	}
	difftestStart = time.Now().UnixNano() % 1_000_000_000
	t.Logf("difftest: random seeds from %d (KAFKASTREAMS_DIFFTEST_SEED=<seed> replays one)", difftestStart)
	if mins != "" {
		m, err := strconv.ParseFloat(mins, 64)
		if err != nil || m <= 0 {
			t.Fatalf("KAFKASTREAMS_DIFFTEST_MINUTES=%q: want a positive number", mins)
		}
		return nil, time.Now().Add(time.Duration(m * float64(time.Minute)))
	}
	k, err := strconv.Atoi(n)
	if err != nil || k <= 0 {
		t.Fatalf("KAFKASTREAMS_DIFFTEST_N=%q: want a positive integer", n)
	}
	var seeds []int64
	for i := 0; i < k; i++ {
		seeds = append(seeds, difftestStart+int64(i))
	}
	return seeds, time.Time{}
}

// difftestRun runs sp on both runners and returns the difference of their
// observations; an error if either cannot run it, or, when they agree, if
// either observed nothing (difftest.Observed: an error wrapping
// difftest.ErrNothingObserved; the seed fails, as the comparison could
// not have).
func difftestRun(t *testing.T, sp difftest.Spec) ([]string, error) {
	prismLines, err := difftestPrism(sp)
	if err != nil {
		return nil, fmt.Errorf("on Prism: %w", err)
	}
	ksLines, err := difftestKafkaStreams(t, sp)
	if err != nil {
		return nil, fmt.Errorf("on kafkastreams: %w", err)
	}
	a, err := difftest.Observe(sp, prismLines)
	if err != nil {
		return nil, fmt.Errorf("Prism's output: %w", err)
	}
	b, err := difftest.Observe(sp, ksLines)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams' output: %w", err)
	}
	t.Logf("seed %d: %d lines observed on Prism, %d on kafkastreams", sp.Seed, len(a), len(b))
	if d := difftest.Diff(a, b); len(d) > 0 {
		return d, nil
	}
	// Equal, but two empty observations are equal whatever the runners
	// did: a seed must observe lines (issue 23).
	return nil, difftest.Observed(a, b)
}

var difftestRunID int

func difftestPrism(sp difftest.Spec) ([]string, error) {
	difftestRunID++
	id := fmt.Sprintf("run%d", difftestRunID)
	p, err := difftest.Build(sp, id)
	if err != nil {
		return nil, err
	}
	if !beam.Initialized() {
		beam.Init() // Prism's universal runner insists; kafkastreams does it itself
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := prism.Execute(ctx, p); err != nil {
		return nil, err
	}
	return difftest.Collected(id), nil
}

func difftestKafkaStreams(t *testing.T, sp difftest.Spec) ([]string, error) {
	p, err := difftest.Build(sp, "")
	if err != nil {
		return nil, err
	}
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app := uniqueName(t, "app")
	start := time.Now()
	res, err := beam.Run(withJob(ctx, b.BootstrapServers(), app, func(o *runner.Options) {
		if sp.OnePartition {
			o.InternalTopicPartitions = 1
		}
	}), runner.Name, p)
	if err != nil {
		return nil, err
	}
	r := res.(*runner.Result)
	t.Logf("seed %d ran on kafkastreams in %v", sp.Seed, time.Since(start).Round(time.Millisecond))
	lines := sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false)
	// Hundreds of applications on one broker: without this its heap ran
	// out after 38 minutes of `make difftest` (-Xmx512m, 340 seeds).
	if _, err := kafkaenv.DeleteTopicsWithPrefix(ctx, b.BootstrapServers(), app+"-"); err != nil {
		return nil, err
	}
	return lines, nil
}

// difftestShrink looks for a smaller pipeline than sp whose outputs still
// differ (any difference, or an error on one runner), one change at a
// time, until no change keeps a difference or the time is up.
func difftestShrink(t *testing.T, sp difftest.Spec) (difftest.Spec, []string) {
	mins := 10.0
	if s := os.Getenv("KAFKASTREAMS_DIFFTEST_SHRINK_MINUTES"); s != "" {
		if m, err := strconv.ParseFloat(s, 64); err == nil {
			mins = m
		}
	}
	deadline := time.Now().Add(time.Duration(mins * float64(time.Minute)))
	cur, curDiff := sp, []string(nil)
	for {
		better := false
		for _, c := range difftest.Shrink(cur) {
			if time.Now().After(deadline) {
				t.Logf("shrinking stopped: %v minutes are up", mins)
				return cur, curDiff
			}
			if _, err := difftest.Build(c, ""); err != nil {
				continue // the SDK refuses this shrink (two windowing strategies flattened, …)
			}
			d, err := difftestRun(t, c)
			if errors.Is(err, difftest.ErrNothingObserved) {
				continue // equal and empty: not a smaller difference
			}
			if err != nil {
				d = []string{"error: " + err.Error()}
			}
			if len(d) > 0 {
				cur, curDiff, better = c, d, true
				break
			}
		}
		if !better {
			return cur, curDiff
		}
	}
}

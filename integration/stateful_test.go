package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// stCountFn counts the elements of each key in user state: for each element
// it emits "<key>=<count so far>", and an event-time timer at the end of the
// window emits "<key> final=<count>" once the input is complete.
type stCountFn struct {
	Count state.Value[int]
	Final timers.EventTime
}

func (f *stCountFn) ProcessElement(w beam.Window, sp state.Provider, tp timers.Provider, key string, _ int, emit func(string)) error {
	n, _, err := f.Count.Read(sp)
	if err != nil {
		return err
	}
	n++
	if err := f.Count.Write(sp, n); err != nil {
		return err
	}
	f.Final.Set(tp, w.MaxTimestamp().ToTime())
	emit(fmt.Sprintf("%s=%d", key, n))
	return nil
}

func (f *stCountFn) OnTimer(_ context.Context, _ beam.EventTime, sp state.Provider, _ timers.Provider, key string, _ timers.Context, emit func(string)) error {
	n, _, err := f.Count.Read(sp)
	if err != nil {
		return err
	}
	emit(fmt.Sprintf("%s final=%d", key, n))
	return nil
}

// stKeyed makes element i the KV ("k<i mod 7>", i).
func stKeyed(i int) (string, int) { return fmt.Sprintf("k%d", i%7), i }

func init() {
	register.DoFn6x1[beam.Window, state.Provider, timers.Provider, string, int, func(string), error](&stCountFn{})
	register.Function1x2(stKeyed)
	register.Emitter1[string]()
}

// stCountPipeline: 0..n-1 keyed by i mod 7, counted per key by stCountFn,
// reshuffled (the sink topic the test reads). With slow > 0 the second half
// of the elements goes through a slow stage (slow ms per element) first.
func stCountPipeline(n, slow int) *beam.Pipeline {
	var fast, late []int
	for i := 0; i < n; i++ {
		if slow > 0 && i >= n/2 {
			late = append(late, i)
		} else {
			fast = append(fast, i)
		}
	}
	p, s := beam.NewPipelineWithRoot()
	in := beam.CreateList(s, fast)
	if len(late) > 0 {
		in = beam.Flatten(s, in, beam.ParDo(s, &gbkSlow{SlowMillis: slow}, beam.Reshuffle(s, beam.CreateList(s, late))))
	}
	kv := beam.ParDo(s, stKeyed, in)
	out := beam.ParDo(s, &stCountFn{Count: state.MakeValueState[int]("count"), Final: timers.InEventTime("final")}, kv)
	_ = beam.Reshuffle(s, out)
	return p
}

// wantCounts is stCountPipeline's output: "k=1" … "k=c" and "k final=c"
// for each key k with c elements.
func wantCounts(n int) []string {
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		counts[fmt.Sprintf("k%d", i%7)]++
	}
	var out []string
	for k, c := range counts {
		for j := 1; j <= c; j++ {
			out = append(out, fmt.Sprintf("%s=%d", k, j))
		}
		out = append(out, fmt.Sprintf("%s final=%d", k, c))
	}
	return out
}

// TestStatefulCountPerKey: a stateful DoFn (value state and an event-time
// timer) counts per key across the stage's tasks; the sink topic
// (read_committed) holds every running count and one final count per key,
// each exactly once.
func TestStatefulCountPerKey(t *testing.T) {
	b := needBroker(t)
	const n = 300
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), stCountPipeline(n, 0))
	stateful := 0
	for _, s := range r.Plan.Stages {
		if s.Head == plan.HeadStateful {
			stateful++
		}
	}
	if stateful != 1 {
		t.Fatalf("plan has %d stateful stages, want 1", stateful)
	}
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, false), wantCounts(n))
}

// TestStatefulRecovery: an instance is stopped once the stateful stage has
// committed state to its changelog (the fast half of the input) while the
// slow half is still on its way; a new instance of the same application
// restores the task stores (counts and pending timers) from the changelog
// and finishes. The sink topic (read_committed) holds exactly the outputs of
// one uninterrupted run: the counts continue where the first instance left
// them, nothing is repeated or lost, and each key's timer fires once.
func TestStatefulRecovery(t *testing.T) {
	b := needBroker(t)
	const n, slow = 300, 25
	app := uniqueName(t, "app")
	bs := b.BootstrapServers()

	stopOnceStateCommitted(t, bs, app, stCountPipeline(n, slow), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	r := runApp(t, ctx, bs, app, stCountPipeline(n, slow))
	checkLines(t, sinkStrings(t, ctx, bs, r.Plan, false), wantCounts(n))
	for _, s := range r.Plan.Stages {
		if s.Head == plan.HeadStateful {
			if st := r.Stats[s.Name]; st.ElementsIn >= n {
				t.Errorf("second instance's stateful stage %s: %+v, want fewer than %d elements in (the first instance's restored)", s.Name, st, n)
			}
		}
	}
}

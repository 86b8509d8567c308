package integration

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// bigValues emits N values of 1 KiB over 50 keys, all at event time 0, so
// a GroupByKey holds every one of them until the input ends.
type bigValues struct{ N int }

func (g *bigValues) ProcessElement(_ []byte, emit func(string, string)) {
	v := strings.Repeat("x", 1024)
	for i := 0; i < g.N; i++ {
		emit("k"+strconv.Itoa(i%50), v)
	}
}

func countValues(k string, vs func(*string) bool) (string, int) {
	n := 0
	var v string
	for vs(&v) {
		n++
	}
	return k, n
}

func init() {
	register.DoFn2x0[[]byte, func(string, string)](&bigValues{})
	register.Function2x2(countValues)
}

// tenValues emits ten values of 10 KiB for its element, under one key:
// one GroupByKey task holds them all (a task store flushes its memtable
// to disk at 16 MiB).
func tenValues(_ int, emit func(string, string)) {
	v := strings.Repeat("y", 10<<10)
	for j := 0; j < 10; j++ {
		emit("k", v)
	}
}

func init() { register.Function2x0(tenValues) }

// TestStateDirFullFailsTheJob (issue 23): a job whose --state_dir is a
// tmpfs of 8 MiB fails with state.ErrStateDir naming the directory and
// "no space left on device", within a minute, whichever file fills it:
//
//   - spill: one attempt's 40 MiB of output, spilled to the stage's spill
//     file in the state directory (the failure named the file before, not
//     as the state directory's);
//   - store: a GroupByKey's task store given 40 MiB of values in attempts
//     of 2 MiB (no spill): before, its flushes failed in the background
//     with a warning each, its memtables filled, and the stage's next
//     commit of its store waited for ever (TestStateDirFullFailsPrepare,
//     package state, shows that wait: Committed blocked).
//
// Needs root to mount the tmpfs (CI runs as root); skipped otherwise,
// saying so.
func TestStateDirFullFailsTheJob(t *testing.T) {
	b := needBroker(t)
	for _, tc := range []struct {
		name string
		job  func() *beam.Pipeline
		set  func(*runner.Options)
	}{
		{"spill", func() *beam.Pipeline {
			p, s := beam.NewPipelineWithRoot()
			kv := beam.ParDo(s, &bigValues{N: 40_000}, beam.Impulse(s))
			_ = beam.Reshuffle(s, beam.ParDo(s, countValues, beam.GroupByKey(s, beam.Reshuffle(s, kv))))
			return p
		}, func(*runner.Options) {}},
		{"store", func() *beam.Pipeline {
			p, s := beam.NewPipelineWithRoot()
			ints := make([]int, 400)
			for i := range ints {
				ints[i] = i
			}
			kv := beam.ParDo(s, tenValues, beam.Reshuffle(s, beam.CreateList(s, ints)))
			_ = beam.Reshuffle(s, beam.ParDo(s, countValues, beam.GroupByKey(s, kv)))
			return p
		}, func(o *runner.Options) { o.MaxBundleSize = 20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
				t.Skipf("mounting a tmpfs of 8 MiB at %s needs root: %v: %s", dir, err, out)
			}
			t.Cleanup(func() {
				if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
					t.Errorf("umount %s: %v: %s", dir, err, out)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			_, err := beam.Run(withJob(ctx, b.BootstrapServers(), uniqueName(t, "app"), func(o *runner.Options) {
				o.StateDir = dir
				tc.set(o)
			}), runner.Name, tc.job())
			took := time.Since(start)
			if err == nil {
				t.Fatalf("the job ended well with 40 MiB held in a state directory of 8 MiB")
			}
			if !errors.Is(err, state.ErrStateDir) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("after %v: %v; want state.ErrStateDir naming %s and 'no space left on device'", took.Round(time.Millisecond), err, dir)
			}
			if took > time.Minute {
				t.Fatalf("the job took %v to fail", took)
			}
			t.Logf("the job failed after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
)

// mwStamp gives x the event time x seconds.
func mwStamp(x int, emit func(beam.EventTime, int)) {
	emit(beam.EventTime(int64(x)*1000), x)
}

// mwFormat is x with its timestamp in milliseconds.
func mwFormat(ts beam.EventTime, x int) string { return fmt.Sprintf("%d@%d", x, int64(ts)) }

// mwCount formats a count of x with its window's start in milliseconds.
func mwCount(w beam.Window, x int, n int) string {
	return fmt.Sprintf("%d in %d: %d", x, int64(w.(window.IntervalWindow).Start), n)
}

func init() {
	register.Function2x0(mwStamp)
	register.Function2x1(mwFormat)
	register.Function3x1(mwCount)
}

// TestMultiWindowElementsAcrossStages: an element in several sliding windows
// is that many elements (the Beam model; Java's WindowedValue.explodeWindows;
// Prism stores a stage's outputs one element per window). Reshuffled to
// another stage and re-windowed, each copy is assigned its own windows: the
// Go SDK's WindowInto assigns from the timestamp alone, so a stage that
// wrote the element once, with its four windows, made it one (difftest seed
// 274643990: 1 element where Prism gives 4).
func TestMultiWindowElementsAcrossStages(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	xs := beam.ParDo(s, mwStamp, beam.Create(s, 1, 7, 12))
	// 20-s windows every 5 s: each element is in 4 of them.
	sliding := beam.Reshuffle(s, beam.WindowInto(s, window.NewSlidingWindows(5*time.Second, 20*time.Second), xs))

	global := beam.WindowInto(s, window.NewGlobalWindows(), sliding)
	var want []any
	for _, x := range []int{1, 7, 12} {
		for range 4 {
			want = append(want, fmt.Sprintf("%d@%d", x, x*1000))
		}
	}
	passert.Equals(s, beam.ParDo(s, mwFormat, global), want...)

	// Re-windowed into fixed 30-s windows and counted by a GroupByKey:
	// each value 4 times, all in [0, 30 s).
	fixed := beam.WindowInto(s, window.NewFixedWindows(30*time.Second), sliding)
	counts := beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, mwCount, stats.Count(s, fixed)))
	passert.Equals(s, counts, "1 in 0: 4", "7 in 0: 4", "12 in 0: 4")
	runOn(t, p)
}

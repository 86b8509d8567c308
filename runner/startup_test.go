package runner

import (
	"testing"
	"time"
)

func TestProcessStartBeforeInit(t *testing.T) {
	s := processStart()
	if s.After(initTime) {
		t.Fatalf("processStart %v is after the package's init %v", s, initTime)
	}
	// The test binary started moments before its packages' init.
	if d := initTime.Sub(s); d > time.Minute {
		t.Fatalf("processStart %v is %v before init: not this process's start", s, d)
	}
}

func TestTimelineSteps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := &timeline{start: t0, last: t0}
	tl.markAt("a", t0.Add(100*time.Millisecond))
	tl.markAt("b", t0.Add(350*time.Millisecond))
	// A step that ended before the last one counts 0 and moves nothing.
	tl.markAt("c", t0.Add(200*time.Millisecond))
	tl.markAt("d", t0.Add(400*time.Millisecond))
	steps, total := tl.snapshot()
	want := []StartupStep{{"a", 100 * time.Millisecond}, {"b", 250 * time.Millisecond}, {"c", 0}, {"d", 50 * time.Millisecond}}
	if len(steps) != len(want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	var sum time.Duration
	for i := range want {
		if steps[i] != want[i] {
			t.Errorf("step %d: %v, want %v", i, steps[i], want[i])
		}
		sum += steps[i].Took
	}
	if total != 400*time.Millisecond || sum != total {
		t.Errorf("total %v, sum of steps %v, want both 400ms", total, sum)
	}
}

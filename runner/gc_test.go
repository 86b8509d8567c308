package runner

import (
	"runtime/debug"
	"testing"
)

// TestSetGCPercent: a job sets the target while it runs, the last of
// several puts the process's own back; 0 and a GOGC set by the user leave
// it alone.
func TestSetGCPercent(t *testing.T) {
	t.Setenv("GOGC", "")
	own := debug.SetGCPercent(100)
	defer debug.SetGCPercent(own)
	current := func() int { v := debug.SetGCPercent(-1); debug.SetGCPercent(v); return v }

	a := setGCPercent(200)
	if got := current(); got != 200 {
		t.Fatalf("while a job runs: GC percent %d, want 200", got)
	}
	b := setGCPercent(300)
	a()
	if got := current(); got != 200 {
		t.Errorf("one job of two ended: GC percent %d, want the first job's 200", got)
	}
	b()
	if got := current(); got != 100 {
		t.Errorf("every job ended: GC percent %d, want the process's 100 back", got)
	}
	setGCPercent(0)()
	if got := current(); got != 100 {
		t.Errorf("--gc_percent=0: GC percent %d, want 100 left alone", got)
	}
	t.Setenv("GOGC", "150")
	c := setGCPercent(200)
	if got := current(); got != 100 {
		t.Errorf("GOGC set: GC percent %d, want the process's 100 left alone", got)
	}
	c()
}

package runner

import (
	"os"
	"runtime/debug"
	"sync"
)

// gcTarget is the garbage collector's target the running jobs of this
// process set (Options.GCPercent): the first job to start sets it, the
// last to end puts the process's own back. Jobs with different targets in
// one process share the first one's.
var gcTarget struct {
	sync.Mutex
	jobs int // running jobs that set it
	prev int // the process's own setting, put back by the last
}

// setGCPercent sets the garbage collector's target to percent for a job
// (Options.GCPercent) and returns what puts it back when the job ends. It
// does nothing when percent is 0 or the GOGC environment variable is set
// (the user's choice wins).
func setGCPercent(percent int) (restore func()) {
	if percent <= 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	gcTarget.Lock()
	defer gcTarget.Unlock()
	if gcTarget.jobs == 0 {
		gcTarget.prev = debug.SetGCPercent(percent)
	}
	gcTarget.jobs++
	return func() {
		gcTarget.Lock()
		defer gcTarget.Unlock()
		if gcTarget.jobs--; gcTarget.jobs == 0 {
			debug.SetGCPercent(gcTarget.prev)
		}
	}
}

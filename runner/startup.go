package runner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kafkastreams/kafkastreams/stage"
)

// initTime is when this package was initialised: the process start when
// the kernel's own record of it cannot be read (processStart).
var initTime = time.Now()

// processStart returns when this process started: now less its age, the
// system's uptime (/proc/uptime, in seconds to 10 ms) less the process's
// start after boot (/proc/self/stat, field 22, starttime, in clock ticks
// of USER_HZ 100, what Linux exports on every architecture); the runner
// package's initialisation time elsewhere, or when either cannot be read,
// or when the result is later than it.
func processStart() time.Time {
	now := time.Now()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return initTime
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return initTime
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return initTime
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64) // field 22 of the whole line
	if err != nil {
		return initTime
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return initTime
	}
	f := strings.Fields(string(up))
	if len(f) == 0 {
		return initTime
	}
	uptime, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return initTime
	}
	age := time.Duration(uptime*float64(time.Second)) - time.Duration(ticks)*10*time.Millisecond
	if t := now.Add(-age); age >= 0 && t.Before(initTime) {
		return t
	}
	return initTime
}

// closing counts the clients being closed in the background (closeLater);
// Execute waits for them before it returns.
var closing sync.WaitGroup

// closeLater runs close, a Kafka client's Close, in the background:
// librdkafka's destroy waits for the client's threads to end (about 100 ms
// a client here), time a start-up step need not wait for once the client
// is done with.
func closeLater(close func()) {
	closing.Add(1)
	go func() {
		defer closing.Done()
		close()
	}()
}

// StartupStep is one step of an instance's start-up (Result.Startup): its
// name and how long it took (wall time, from the end of the step before).
type StartupStep struct {
	Name string
	Took time.Duration
}

// timeline records the start-up steps of one instance, from the process
// start to the first input record read by any of its stages. Safe for
// concurrent use.
type timeline struct {
	mu    sync.Mutex
	start time.Time
	last  time.Time
	steps []StartupStep
}

func newTimeline() *timeline {
	s := processStart()
	return &timeline{start: s, last: s}
}

// mark ends the step name at now.
func (t *timeline) mark(name string) { t.markAt(name, time.Now()) }

// markAt ends the step name at at (a step that ended before the last one
// ended counts 0).
func (t *timeline) markAt(name string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := at.Sub(t.last)
	if d < 0 {
		d = 0
	} else {
		t.last = at
	}
	t.steps = append(t.steps, StartupStep{Name: name, Took: d})
}

// snapshot returns the steps so far and the time from the process start to
// the end of the last one.
func (t *timeline) snapshot() ([]StartupStep, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]StartupStep(nil), t.steps...), t.last.Sub(t.start)
}

// log writes the timeline as one line at Info: the total and every step in
// milliseconds, in order.
func (t *timeline) log(log *slog.Logger) {
	steps, total := t.snapshot()
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %dms", s.Name, s.Took.Milliseconds())
	}
	log.Info("kafkastreams: start-up: process start to the first input record read", "took", total.Round(time.Millisecond), "steps", b.String())
}

// watchStartup ends the timeline when the first stage of loops has read
// its first input record: the step "groups joined and tasks restored" ends
// at the first assignment any stage served before that record (state
// stores restored in its rebalance callback), "first record" at the
// record. It logs the timeline then (Info) and every stage's own
// assignment and first record (Debug), and returns; or returns when ctx
// ends.
func watchStartup(ctx context.Context, log *slog.Logger, tl *timeline, loops map[string]*stage.Loop) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var first, assigned time.Time
		for _, l := range loops {
			st := l.Stats()
			if !st.FirstRecord.IsZero() && (first.IsZero() || st.FirstRecord.Before(first)) {
				first = st.FirstRecord
			}
		}
		if !first.IsZero() {
			for name, l := range loops {
				st := l.Stats()
				if !st.Assigned.IsZero() && !st.Assigned.After(first) && st.Assigned.After(assigned) {
					assigned = st.Assigned
				}
				log.Debug("kafkastreams: start-up of a stage", "stage", name, "assigned", st.Assigned, "first_record", st.FirstRecord)
			}
			tl.markAt("groups joined and tasks restored", assigned)
			tl.markAt("first record", first)
			tl.log(log)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

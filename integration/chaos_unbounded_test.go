package integration

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
)

// The unbounded case of TestChaos: the scenario job (scenariojob_test.go)
// under the scenario producer's steady load (scenarios_test.go) while
// instances are killed, stopped and started at random for minutes; then
// the output is checked exactly as after a scenario (finish).
//
// Optional: KAFKASTREAMS_CHAOS_MINUTES=<minutes> (a decimal; default 3) is
// how long the chaos lasts, not counting the start and the catch-up.

// chaosFresh names a start in a --state_dir of its own.
const chaosFresh = "a fresh --state_dir"

// chaosUnboundedMinutes is the chaos's default length in minutes.
const chaosUnboundedMinutes = 3

// chaosMaxLive and chaosMinLive bound the instances running (started and
// not signalled) between the events.
const (
	chaosMinLive = 1
	chaosMaxLive = 3
)

// chaosSlotDir is a --state_dir of the unbounded chaos: an instance's own
// directory, as on a machine of its own. holder is the last instance
// started with it; a directory whose holder was signalled and has exited
// is vacant, and an instance started in it takes its slot over (the
// slot's identity: its transactional ids and its static group membership).
type chaosSlotDir struct {
	dir    string
	holder *scKid
}

// chaosEvent is one event of the unbounded chaos.
type chaosEvent struct {
	at  time.Time
	sig syscall.Signal // SIGKILL or SIGTERM; 0 for a start
	kid *scKid
	// tasks are what a signalled instance owned when signalled (from its
	// log); exited how long after the signal it had exited.
	tasks  []scTask
	exited time.Duration
	// died: a SIGKILLed instance died of it (its wait status).
	died bool
	// slot says, for a start, in which directory: fresh, or whose.
	slot string
}

// runChaosUnbounded starts 1-3 instances of the scenario job, then, for
// KAFKASTREAMS_CHAOS_MINUTES, every 2-15 s does one of: SIGKILL a random
// running instance, SIGTERM one (and wait for its clean exit), start one
// (in a fresh --state_dir or, by a draw, in a vacant one: a killed or
// stopped instance's slot), keeping 1-3 running. Every choice comes from
// seed; the state the choices depend on (which instances run, which
// directories are vacant) follows from them alone, so a seed replays the
// schedule (the timing of a loaded machine differs). At the end it stops
// the load, ticks, waits for the job to catch up and checks the output
// exactly (finish: every key's window once, its sum and running total);
// each SIGTERM-ed instance must have stopped cleanly, each SIGKILLed one
// died of it, and one SIGKILL and one SIGTERM at least must have come to
// an instance holding tasks (chaosSignalsLanded); an instance that exits
// by itself fails the test. The summary lists the events with, per
// signal, signal → first and last commit of the instance's tasks (by
// whichever instance took them), and per start, start → its first task.
func runChaosUnbounded(t *testing.T, seed int64) {
	length := chaosUnboundedMinutes * time.Minute
	if s := os.Getenv("KAFKASTREAMS_CHAOS_MINUTES"); s != "" {
		m, err := strconv.ParseFloat(s, 64)
		if err != nil || m <= 0 {
			t.Fatalf("KAFKASTREAMS_CHAOS_MINUTES=%q: want a positive number of minutes", s)
		}
		length = time.Duration(m * float64(time.Minute))
	}
	rng := rand.New(rand.NewSource(seed))
	r := newScenario(t, "chaos-unbounded")
	// A kill just before the end leaves tasks for the session timeout and
	// the next holder's restore: more than a scenario's catch-up.
	r.catchUp = 5 * time.Minute
	initial := chaosMinLive + rng.Intn(chaosMaxLive-chaosMinLive+1)
	t.Logf("unbounded: seed %d, %v of chaos at %d records/s, %d instances at first", seed, length, r.load.Rate, initial)

	var (
		dirs    []*chaosSlotDir
		events  []chaosEvent
		live    []*scKid // started and not signalled, in start order
		watched *scKid   // whose GET /watermarks the monitor reads
	)
	start := func(d *chaosSlotDir, slot string) *scKid {
		k := r.startKid(d.dir)
		d.holder = k
		live = append(live, k)
		events = append(events, chaosEvent{at: k.started, kid: k, slot: slot})
		return k
	}
	fresh := func() *chaosSlotDir {
		d := &chaosSlotDir{dir: t.TempDir()}
		dirs = append(dirs, d)
		return d
	}
	k0 := start(fresh(), chaosFresh)
	r.begin(k0)
	watched = k0
	for i := 1; i < initial; i++ {
		start(fresh(), chaosFresh)
	}

	began := time.Now()
	for {
		wait := time.Duration(2000+rng.Intn(13_001)) * time.Millisecond // 2-15 s
		if time.Since(began)+wait > length {
			break
		}
		time.Sleep(wait)
		// An instance nobody signalled has no reason to exit.
		live = r.stillRunning(t, live)

		act := rng.Intn(3) // 0 SIGKILL, 1 SIGTERM, 2 start
		switch {
		case len(live) <= chaosMinLive:
			act = 2
		case len(live) >= chaosMaxLive && act == 2:
			act = rng.Intn(2)
		}
		if act == 2 {
			var vacant []*chaosSlotDir
			for _, d := range dirs {
				if d.holder.exited() {
					vacant = append(vacant, d)
				}
			}
			if len(vacant) > 0 && rng.Intn(2) == 0 {
				d := vacant[rng.Intn(len(vacant))]
				how := "killed"
				if chaosSignalOf(events, d.holder) == syscall.SIGTERM {
					how = "stopped"
				}
				start(d, fmt.Sprintf("instance %d's slot (%s)", d.holder.idx, how))
			} else {
				start(fresh(), chaosFresh)
			}
			continue
		}
		sig := syscall.SIGKILL
		if act == 1 {
			sig = syscall.SIGTERM
		}
		i := rng.Intn(len(live))
		k := live[i]
		live = append(live[:i:i], live[i+1:]...)
		at := r.signal(k, sig)
		ev := chaosEvent{at: at, sig: sig, kid: k, tasks: r.owned(k, at)}
		// Wait for the exit, so that the directory is vacant at the next
		// event whatever the machine's speed (the schedule stays the
		// seed's); a clean stop takes a commit and the groups' leave.
		ev.exited = r.waitExit(k, time.Minute).Sub(at)
		ev.died = killedBy(k.err, syscall.SIGKILL)
		events = append(events, ev)
		if k == watched || watched == nil {
			watched = chaosRewatch(r, live)
		}
	}
	if len(live) == 0 {
		// Only after crashes (already failed): let the job catch up.
		start(fresh(), chaosFresh)
	}
	chaosEnd := time.Now()
	t.Logf("%s: %v of chaos done, %d events, instances running %v; stopping the load", r.since(), chaosEnd.Sub(began).Round(time.Millisecond), len(events)-initial, chaosIdxs(live))
	if err := chaosSignalsLanded(events); err != nil {
		t.Errorf("%v (seed %d)", err, seed)
	}

	r.finish(fmt.Sprintf("chaos %v (seed %d): %s", chaosEnd.Sub(began).Round(time.Second), seed, chaosCounts(events, initial)))
	caughtUp := time.Duration(0)
	for _, at := range r.outs.waitFor(nil, 0) {
		if d := at.Sub(chaosEnd); d > caughtUp {
			caughtUp = d
		}
	}
	t.Logf("unbounded: every window was in the output %v after the end of the chaos (then the load stopped and the ticks were written)", caughtUp.Round(time.Millisecond))
	t.Logf("unbounded: events (seed %d):\n  %s", seed, strings.Join(chaosEventLines(r, events, began), "\n  "))
	r.stopAll()
	for _, e := range events {
		if e.sig == syscall.SIGTERM {
			chaosCheckStopped(t, e.kid)
		}
	}
	for _, k := range live {
		checkCleanExit(t, k)
	}
	if t.Failed() {
		chaosKeepLogs(t, events, seed, r.broker)
		t.Logf("FAILED with seed %d (KAFKASTREAMS_CHAOS_SEED=<TestChaos's seed, logged first> replays the schedule)", seed)
	}
}

// chaosSignalsLanded checks the unbounded chaos's signals (issue 23: a
// signal counted without checking it landed): every SIGKILL killed its
// instance (it had not exited by itself), and at least one SIGKILL and one
// SIGTERM came to an instance that held tasks (a chaos of signals to
// instances still starting, or of none, tested no hand-over). A SIGTERM's
// clean stop is chaosCheckStopped's.
func chaosSignalsLanded(events []chaosEvent) error {
	var errs []error
	kills, terms := 0, 0
	for _, e := range events {
		switch e.sig {
		case syscall.SIGKILL:
			if !e.died {
				errs = append(errs, fmt.Errorf("the SIGKILL of instance %d did not kill it (it exited with %v)", e.kid.idx, e.kid.err))
			} else if len(e.tasks) > 0 {
				kills++
			}
		case syscall.SIGTERM:
			if len(e.tasks) > 0 {
				terms++
			}
		}
	}
	if kills == 0 {
		errs = append(errs, fmt.Errorf("no SIGKILL killed an instance holding tasks"))
	}
	if terms == 0 {
		errs = append(errs, fmt.Errorf("no SIGTERM stopped an instance holding tasks"))
	}
	return errors.Join(errs...)
}

// chaosKeepLogs writes the log of every instance the chaos started to a
// directory that outlives the test (instance-<idx>.log), and logs where:
// a failure's cause is in them (an abort, a rebalance, a late drop) and a
// replay of the seed need not fail again. Each broker's log so far
// (brokers: the nodes; one whose Broker has no log file, an external
// one, is left out) is copied there too, broker-<i>.log: Stop removes
// the broker's own file when the package's tests end (a failure's input
// check once had nothing to read it in).
func chaosKeepLogs(t *testing.T, events []chaosEvent, seed int64, brokers ...*kafkaenv.Broker) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("kafkastreams-chaos-%d-", seed))
	if err != nil {
		t.Logf("instances' logs not kept: %v", err)
		return
	}
	for i, b := range brokers {
		if b == nil || b.LogPath() == "" {
			continue
		}
		data, err := os.ReadFile(b.LogPath())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("broker-%d.log", i)), data, 0o644)
		}
		if err != nil {
			t.Logf("broker %d's log (%s) not kept: %v", i, b.LogPath(), err)
			continue
		}
		t.Logf("broker %d's log kept: %s", i, filepath.Join(dir, fmt.Sprintf("broker-%d.log", i)))
	}
	n := 0
	for _, e := range events {
		if e.sig != 0 {
			continue // a start names each instance once
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("instance-%d.log", e.kid.idx)), []byte(e.kid.log.String()), 0o644); err != nil {
			t.Logf("instance %d's log not kept: %v", e.kid.idx, err)
			continue
		}
		n++
	}
	t.Logf("the logs of the %d instances started are in %s", n, dir)
}

// chaosSignalled returns the event that signalled k, if any.
func chaosSignalled(events []chaosEvent, k *scKid) (chaosEvent, bool) {
	for _, e := range events {
		if e.kid == k && e.sig != 0 {
			return e, true
		}
	}
	return chaosEvent{}, false
}

// chaosSignalOf is the signal that stopped k (0: none).
func chaosSignalOf(events []chaosEvent, k *scKid) syscall.Signal {
	e, _ := chaosSignalled(events, k)
	return e.sig
}

// chaosRewatch points the watermark monitor at a running instance that has
// logged its GET /watermarks address, and returns it (nil if none has yet:
// the monitor keeps no samples until the next signal's re-watch; the
// figures' sample counts show the gaps).
func chaosRewatch(r *scRun, live []*scKid) *scKid {
	for _, k := range live {
		if m := curlRe.FindStringSubmatch(k.log.String()); m != nil {
			r.wms.watch(m[1], r.prod)
			return k
		}
	}
	r.wms.stop()
	return nil
}

// chaosCheckStopped: an instance stopped by SIGTERM exits with the job's
// cancellation (checkCleanExit), unless the signal came before the child
// installed its handler (a few ms after its start): then it died of it, as
// any program, with no result.
func chaosCheckStopped(t *testing.T, k *scKid) {
	t.Helper()
	var ee *exec.ExitError
	if _, err := os.Stat(k.out); err != nil && errors.As(k.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			t.Logf("instance %d died of SIGTERM before its handler was installed (%v after its start)", k.idx, time.Since(k.started).Round(time.Millisecond))
			return
		}
	}
	checkCleanExit(t, k)
}

func chaosIdxs(ks []*scKid) []int {
	var out []int
	for _, k := range ks {
		out = append(out, k.idx)
	}
	return out
}

// chaosCounts: "n SIGKILL, n SIGTERM, n starts (n in a vacant slot)".
func chaosCounts(events []chaosEvent, initial int) string {
	kills, terms, starts, reused := 0, 0, -initial, 0
	for _, e := range events {
		switch e.sig {
		case syscall.SIGKILL:
			kills++
		case syscall.SIGTERM:
			terms++
		default:
			starts++
			if e.slot != chaosFresh {
				reused++
			}
		}
	}
	return fmt.Sprintf("%d SIGKILL, %d SIGTERM, %d starts (%d in a vacant slot) after %d at first", kills, terms, starts, reused, initial)
}

// chaosEventLines describes each event: when (since the chaos began; the
// first instances before it), what, and for a signal, how long after it
// the first and the last of the instance's tasks committed again (the
// committed input offsets; by whichever instance took the task, a
// survivor or a new copy; after a SIGTERM, the commits after the exit),
// for a start, when it had its first task.
func chaosEventLines(r *scRun, events []chaosEvent, began time.Time) []string {
	var out []string
	for _, e := range events {
		when := fmt.Sprintf("%+8.1fs", e.at.Sub(began).Seconds())
		if e.sig == 0 {
			first := "no task yet"
			for _, te := range parseTaskEvents(e.kid.log.String()) {
				if te.assigned && len(te.partitions) > 0 {
					first = fmt.Sprintf("first task %v after its start", te.at.Sub(e.kid.started).Round(time.Millisecond))
					break
				}
			}
			up := "running at the end"
			if s, ok := chaosSignalled(events, e.kid); ok {
				up = fmt.Sprintf("up %v", s.at.Sub(e.kid.started).Round(time.Millisecond))
			}
			out = append(out, fmt.Sprintf("%s start instance %d in %s: %s, %s", when, e.kid.idx, e.slot, first, up))
			continue
		}
		// A stopping instance commits what it has before it exits: its
		// tasks' next commits are those after its exit.
		from := e.at
		if e.sig == syscall.SIGTERM {
			from = e.at.Add(e.exited)
		}
		since := "the kill"
		if e.sig == syscall.SIGTERM {
			since = "its exit"
		}
		_, handover := r.offs.handover(e.tasks, from, e.at, since)
		name := "SIGKILL"
		if e.sig == syscall.SIGTERM {
			name = "SIGTERM"
		}
		out = append(out, fmt.Sprintf("%s %s instance %d (up %v; exited in %v): %s", when, name, e.kid.idx, e.at.Sub(e.kid.started).Round(time.Millisecond), e.exited.Round(time.Millisecond), handover))
	}
	return out
}

package stage

import (
	"github.com/kafkastreams/kafkastreams/stage/step"

	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// sideGate is the Loop's state for holding back main input: the tasks
// stopped at an element whose side inputs are not ready. Owned by the
// goroutine running Run.
//
// Step.Decide applies the gate and returns the blocked tasks (Ready.Blocked).
//
// The rule (exactly once, never early, never dropped): a task processes its
// partition's records in offset order up to, not including, the first
// element record that is not Ready. That record and every later one of the
// partition (elements and reports alike: a report after it covers it) stay
// unconsumed in this transaction: the committed offset is the held record's
// offset, the partition is sought back to it and paused, and resumed when
// the gate's Changed fires (or after sideRecheck), to be read again.
//
// No lost wake-ups (issue 24): the channel a paused task waits on is the
// gate's Changed fetched before the readiness check that held it back
// (arm, before Step.Decide), never after: a side watermark that moves
// between the check and the fetch closes the channel fetched before, so
// the task resumes at the next poll. Fetched after the commit, as before,
// the channel was already the next one, and the task slept until the
// following change or sideRecheck (the Go SDK's pingpong example: 2.2 s or
// 7.5-7.8 s, a 5.5-5.9 s pause in 10 runs of 16). A channel fetched
// earlier closes no later than one fetched after it, so the paused tasks
// share the oldest one (the first pause's): a spurious wake-up costs one
// more check, never a missed one.
type sideGate struct {
	// paused[p] is when partition p was paused.
	paused map[int32]time.Time
	// armed is the gate's Changed channel as of the attempt's readiness
	// checks (arm: fetched before Step.Decide).
	armed <-chan struct{}
	// wake is the channel the paused tasks wait on: armed as of the
	// attempt that paused the first of them.
	wake <-chan struct{}
	// logged is when the loop last logged the pauses (sideLogEvery);
	// since counts what happened since that line.
	logged time.Time
	since  sidePauses
}

// sidePauses counts the pauses of tasks held by side inputs between two
// log lines: a wake-up that comes late shows as resumes by the recheck
// and a long longest pause, not hidden behind the line's rate limit.
type sidePauses struct {
	// paused counts the tasks paused (a task paused again counts again).
	paused int
	// onChange and byRecheck count the tasks resumed because the gate's
	// Changed fired, and because sideRecheck passed without it.
	onChange, byRecheck int
	// longest is the longest pause of a task resumed.
	longest time.Duration
}

// sideRecheck is how long a paused partition waits at most before it is
// resumed and its held element checked again, even without a Changed
// signal: a safety net, not the mechanism.
const sideRecheck = 5 * time.Second

// sideLogEvery is the least time between two lines logging the pauses of a
// stage's tasks held by side inputs.
const sideLogEvery = 10 * time.Second

// arm fetches gate's Changed channel: called before the readiness checks
// of an attempt (Step.Decide), so that a change after them closes it. A
// nil gate (no side inputs) does nothing.
func (g *sideGate) arm(gate step.SideInputGate) {
	if gate != nil {
		g.armed = gate.Changed()
	}
}

// hold records partitions ps as paused at now, waiting on the channel
// armed before the check that held them back (or on the one the tasks
// paused already wait on, which is older), and returns how many were not
// paused already.
func (g *sideGate) hold(ps []int32, now time.Time) int {
	if g.paused == nil {
		g.paused = map[int32]time.Time{}
	}
	if len(g.paused) == 0 {
		g.wake = g.armed
	}
	n := 0
	for _, p := range ps {
		if _, ok := g.paused[p]; !ok {
			g.paused[p] = now
			g.since.paused++
			n++
		}
	}
	return n
}

// due returns the paused partitions to resume at now, sorted, and forgets
// them: every one if the channel they wait on is closed (a side input
// changed), else those paused more than sideRecheck ago.
func (g *sideGate) due(now time.Time) []int32 {
	if len(g.paused) == 0 {
		return nil
	}
	woken := false
	select {
	case <-g.wake:
		woken = true
	default:
	}
	var out []int32
	for _, p := range slices.Sorted(maps.Keys(g.paused)) {
		waited := now.Sub(g.paused[p])
		if !woken && waited <= sideRecheck {
			continue
		}
		out = append(out, p)
		delete(g.paused, p)
		g.since.longest = max(g.since.longest, waited)
		if woken {
			g.since.onChange++
		} else {
			g.since.byRecheck++
		}
	}
	return out
}

// logDue reports whether a line about the pauses is due at now (the first
// pause, then at most every sideLogEvery while anything happened), and
// returns the counts since the last line, starting new ones.
func (g *sideGate) logDue(now time.Time) (sidePauses, bool) {
	if g.since == (sidePauses{}) || now.Sub(g.logged) < sideLogEvery {
		return sidePauses{}, false
	}
	c := g.since
	g.since, g.logged = sidePauses{}, now
	return c, true
}

// holdBlocked seeks every task blocked in the attempt just committed
// (Ready.Blocked: task -> offset of its held record) back to its held
// record and pauses it.
func (l *Loop) holdBlocked(blocked map[int32]int64) error {
	if len(blocked) == 0 {
		return nil
	}
	topic := l.cfg.Spec.InputTopic
	var tps []kafka.TopicPartition
	for _, p := range slices.Sorted(maps.Keys(blocked)) {
		if l.tasks[p] == nil {
			continue
		}
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(blocked[p])})
	}
	if len(tps) == 0 {
		return nil
	}
	if err := l.consumer.Pause(tps); err != nil {
		return fmt.Errorf("stage %s: pause tasks held by side inputs: %w", l.cfg.Spec.Name, err)
	}
	// Records polled past the held one during the commit (prefetch.go)
	// are read again after the resume.
	l.dropAhead(partitionsOf(tps)...)
	sought, err := l.consumer.SeekPartitions(tps)
	if err != nil {
		return fmt.Errorf("stage %s: seek tasks held by side inputs: %w", l.cfg.Spec.Name, err)
	}
	if err := partitionErrors(sought); err != nil {
		l.log.Warn("stage: tasks held by side inputs not sought back", "err", err)
	}
	if le, ok := l.head.(step.LogEnds); ok {
		// Sought back before records the EOF was past: not caught up
		// (issue 21, section 2: a paused partition with records is not idle).
		for _, tp := range tps {
			le.Rewound(tp.Partition)
		}
	}
	l.stats.sidePauses.Add(uint64(l.side.hold(partitionsOf(tps), time.Now())))
	l.logSidePauses(time.Now(), tps)
	return nil
}

// logSidePauses logs the pauses of tasks held by side inputs when a line
// is due (sideGate.logDue): the first pause at once, then at most every
// sideLogEvery, with how many tasks were paused and resumed since the last
// line and how: a resume by the recheck is a pause that no side input
// change ended (a side input that did not move for sideRecheck, or a lost
// wake-up), so a repeated one no longer hides behind the rate limit.
// paused are the partitions just paused (nil: none; the line then only
// sums up).
func (l *Loop) logSidePauses(now time.Time, paused []kafka.TopicPartition) {
	c, ok := l.side.logDue(now)
	if !ok {
		return
	}
	msg := "stage: tasks wait for side inputs"
	if paused == nil {
		msg = "stage: tasks held by side inputs, since the last line"
	}
	l.log.Info(msg, "partitions", partitionsOf(paused), "paused", c.paused, "resumed_on_change", c.onChange,
		"resumed_by_recheck", c.byRecheck, "longest_pause", c.longest.Round(time.Millisecond), "still_paused", len(l.side.paused),
		"side_inputs", l.cfg.SideInputs.Waiting())
}

// resumeHeld resumes the paused tasks when the gate signalled a change or
// sideRecheck passed (sideGate.due); their held records are read and
// checked again. The pauses are counted (Stats.SidePauses,
// Stats.SideRechecks) and logged (logSidePauses).
func (l *Loop) resumeHeld() error {
	now := time.Now()
	defer l.logSidePauses(now, nil)
	recheck := l.side.since.byRecheck
	ps := l.side.due(now)
	if n := l.side.since.byRecheck - recheck; n > 0 {
		l.stats.sideRechecks.Add(uint64(n))
		l.log.Debug("stage: tasks held by side inputs resumed by the recheck, no side input change in "+sideRecheck.String(), "partitions", ps, "side_inputs", l.cfg.SideInputs.Waiting())
	}
	if len(ps) == 0 {
		return nil
	}
	topic := l.cfg.Spec.InputTopic
	tps := make([]kafka.TopicPartition, len(ps))
	for i, p := range ps {
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: p}
	}
	if err := l.consumer.Resume(tps); err != nil {
		return fmt.Errorf("stage %s: resume tasks held by side inputs: %w", l.cfg.Spec.Name, err)
	}
	return nil
}

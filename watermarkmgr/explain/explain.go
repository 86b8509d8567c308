// Package explain says, in plain sentences, why a stage's watermark does not
// move: a chain from the stage down to the root cause, such as "s3 is held by
// its input from s1; s1 task 2 has not reported since 12:01:07; task 2 is
// owned by this instance (vm-1), whose attempt has been open for 14 s".
//
// It is a pure core in the sense of the project's style notes: Explain takes
// everything it needs (the stages' watermark state, the stage graph, what
// this instance knows of its own tasks, and the time now) and returns the
// explanations. It reads no clock, does no I/O and starts no goroutine. The
// WatermarkManager service builds its Input (GET /watermarks/explain, the
// live page) and the runner logs the explanations of stuck stages in its
// progress lines.
//
// It may import the Beam SDK's mtime only.
package explain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Input is what Explain reads.
type Input struct {
	// Now is the wall-clock time of the explanation.
	Now time.Time
	// StuckAfter is how long a stage's watermark must not have moved for
	// the stage to count as stuck. Must be positive.
	StuckAfter time.Duration
	// Stages are the application's stages, in plan order. A stage named
	// as an upstream but absent here is one no report has named yet.
	Stages []Stage
	// Since is when the caller began watching the reports (the service's
	// start): a stage that has not reported counts as stuck from Since +
	// StuckAfter on.
	Since time.Time
}

// Stage is one stage's watermark state, from the WatermarkManager's
// snapshot (watermarkmgr.Snapshot) and the plan.
type Stage struct {
	// Name is the plan's stage name ("s3-…").
	Name string
	// Upstreams are the stages whose reports make its input watermark
	// (plan.Stage.Upstreams); empty for a source stage, and when the stage
	// graph is unknown (a service that has not read the plan).
	Upstreams []string
	// Head is the kind of the stage's head (plan.HeadKind, e.g.
	// "kafka_source", "group_by_key"); empty if unknown.
	Head string
	// Reported is false while no report of the stage has been applied: the
	// other watermark fields are then meaningless.
	Reported bool
	// Watermark is the stage's emitted output watermark (mtime.Time, ms).
	Watermark mtime.Time
	// Held: some of Total tasks have not reported (Missing lists them).
	Held    bool
	Missing []int32
	// Total is the stage's task count (totalSourcePartitions).
	Total int32
	// AllIdle: every task is idle.
	AllIdle bool
	// MinPartition is the task defining Watermark; -1 if none.
	MinPartition int32
	// MovedAt is when Watermark (or Held) last changed, as this process saw
	// it; the stage is stuck when Now - MovedAt >= StuckAfter.
	MovedAt time.Time
	// Partitions are the stage's tasks, by partition.
	Partitions []Partition
	// LocalTasks are the tasks of the stage this instance is assigned
	// (Instance is its id); empty in cmd/watermarkmgr.
	LocalTasks []int32
	Instance   string
}

// Partition is one task (source partition) of a stage.
type Partition struct {
	Partition int32
	// Watermark is the task's last reported output watermark (mtime.Time).
	Watermark mtime.Time
	// Reported: the task has reported since its total was last set.
	Reported bool
	Idle     bool
	// LastReport is when this process applied the task's last report; zero
	// if none since it started.
	LastReport time.Time
	// Owner is the instance that wrote the task's last report; empty if no
	// report named one.
	Owner string
	// Source is set for a Kafka source stage's task: its partition of the
	// user's topic, as of the last report.
	Source *Source
	// Local is set when this instance is assigned the task.
	Local *Local
}

// Source is a partition of a user's topic read by a Kafka source stage
// (seed 002's fields of GET /watermarks).
type Source struct {
	Topic string
	// HasLastEventTime is false until the partition's first record.
	HasLastEventTime bool
	LastEventTime    mtime.Time
	// Idleness is the idleness timeout in force; 0: off.
	Idleness time.Duration
	// AlignmentGroup is empty without watermark alignment; AlignmentHeld
	// says the partition is paused for being DriftFromGroupMin ahead of its
	// group's minimum.
	AlignmentGroup    string
	AlignmentHeld     bool
	DriftFromGroupMin time.Duration
	// UnreadBecause, when set, says the partition's log holds records its
	// consumer cannot read yet, and why (the end of the sentence "partition
	// P of topic T holds records it cannot read yet because …"): it is
	// never idle until they are read (issue 21, section 2).
	UnreadBecause string
	// NotIdleBecause, when set, says why the partition, which has had no
	// record for its idleness timeout, is not idle, for a cause other than
	// unread records (the end of the sentence "partition P of topic T is
	// not idle though it has had no record for its idleness of D, because
	// …"): its leader cannot be fetched from, its consumer has not
	// confirmed the end of the log.
	NotIdleBecause string
}

// Local is what this instance knows of a task it is assigned.
type Local struct {
	// Instance is this instance's id.
	Instance string
	// AttemptSince is when the attempt now running for the task began (its
	// bundles and transaction); zero between attempts.
	AttemptSince time.Time
	// LastCommit is when the task's work last committed here; zero if never.
	LastCommit time.Time
	// Paused: the consumer is paused on the partition (watermark alignment).
	Paused bool
	// LagRecords is the consumer lag in records; -1 unknown.
	LagRecords int64
}

// Cause names the root cause of an Explanation.
type Cause string

// The causes.
const (
	// CauseDone: the stage's watermark is at the end of time.
	CauseDone Cause = "done"
	// CauseMoving: the watermark moved within StuckAfter.
	CauseMoving Cause = "moving"
	// CauseNoReport: no report of the stage (or of the stage it waits on)
	// has been seen.
	CauseNoReport Cause = "no_report"
	// CauseTaskNotReported: a task has not reported for StuckAfter or more,
	// or never since its total was set.
	CauseTaskNotReported Cause = "task_not_reported"
	// CauseAttemptOpen: the task's owner (this instance) has had an attempt
	// (bundles, transaction) open for StuckAfter or more.
	CauseAttemptOpen Cause = "attempt_open"
	// CauseNeverReceivedNoIdleness: a source partition has never received
	// a record and its source has no idleness set (seed 002's trap).
	CauseNeverReceivedNoIdleness Cause = "partition_never_received_no_idleness"
	// CauseNoNewRecords: a source partition has no new record (and it is
	// not idle: no idleness, or not reached yet).
	CauseNoNewRecords Cause = "partition_no_new_records"
	// CauseUnread: the partition's log holds records its consumer cannot
	// read yet (a transaction open, a fetch not answered, paused or
	// stopped): it is never idle until they are read.
	CauseUnread Cause = "partition_holds_unread_records"
	// CauseNotIdle: the partition has had no record for its idleness
	// timeout and is not idle for another cause than unread records (its
	// leader cannot be fetched from, its consumer has not confirmed the
	// end of the log).
	CauseNotIdle Cause = "partition_not_idle"
	// CauseAlignment: the partition is paused by watermark alignment.
	CauseAlignment Cause = "paused_by_alignment"
	// CauseHold: the task's own state holds it (buffered windows, pending
	// timers, a splittable DoFn's watermark estimate) while its input is
	// ahead.
	CauseHold Cause = "state_hold"
	// CauseAllIdle: every task of the stage is idle.
	CauseAllIdle Cause = "all_idle"
)

// Explanation says why one stage's watermark is where it is.
type Explanation struct {
	Stage string `json:"stage"`
	// Stuck: the watermark has not moved for StuckAfter or more and the
	// stage is not done.
	Stuck bool `json:"stuck"`
	// UnmovedMs is Now - MovedAt in milliseconds (0 for an unknown stage).
	UnmovedMs int64 `json:"unmovedMs"`
	// Cause is the root cause, RootStage the stage it is in and Partition
	// the task (source partition) when one is to blame.
	Cause     Cause  `json:"cause"`
	RootStage string `json:"rootStage"`
	Partition *int32 `json:"partition"`
	// Chain are the sentences from the stage to the root cause.
	Chain []string `json:"chain"`
	// Text is Chain joined with "; ".
	Text string `json:"text"`
}

// Explain returns one Explanation per stage of in.Stages, in their order.
func Explain(in Input) []Explanation {
	e := explainer{in: in, byName: map[string]*Stage{}}
	for i := range in.Stages {
		e.byName[in.Stages[i].Name] = &in.Stages[i]
	}
	out := make([]Explanation, 0, len(in.Stages))
	for i := range in.Stages {
		out = append(out, e.explain(&in.Stages[i]))
	}
	return out
}

type explainer struct {
	in     Input
	byName map[string]*Stage
}

// chain collects the sentences and the root cause.
type chain struct {
	sentences []string
	cause     Cause
	root      string
	partition *int32
}

func (c *chain) say(format string, args ...any) {
	c.sentences = append(c.sentences, fmt.Sprintf(format, args...))
}

func (c *chain) end(cause Cause, stage string, p *int32) {
	c.cause, c.root, c.partition = cause, stage, p
}

func (e *explainer) explain(s *Stage) Explanation {
	x := Explanation{Stage: s.Name}
	var c chain
	switch {
	case !s.Reported:
		waited := e.in.Now.Sub(e.in.Since)
		if waited < e.in.StuckAfter {
			c.say("%s has not reported yet (watching for %s)", id(s.Name), dur(waited))
			c.end(CauseNoReport, s.Name, nil)
			break
		}
		x.Stuck = true
		e.why(s, &c, map[string]bool{})
	case !s.Held && s.Watermark >= mtime.MaxTimestamp:
		c.say("%s is done: its watermark is at the end of time", id(s.Name))
		c.end(CauseDone, s.Name, nil)
	default:
		unmoved := e.in.Now.Sub(s.MovedAt)
		x.UnmovedMs = unmoved.Milliseconds()
		if unmoved < e.in.StuckAfter && s.Held {
			c.say("%s is held until all %d of its tasks have reported: %s not yet (for %s)", id(s.Name), s.Total, taskList(s.Missing), dur(unmoved))
			c.end(CauseMoving, s.Name, nil)
			break
		}
		if unmoved < e.in.StuckAfter && s.Watermark <= mtime.MinTimestamp {
			c.say("%s has every task reported, none past the start of time yet (last change %s ago)", id(s.Name), dur(unmoved))
			c.end(CauseMoving, s.Name, nil)
			break
		}
		if unmoved < e.in.StuckAfter {
			c.say("%s is moving: its watermark changed %s ago, to %s", id(s.Name), dur(unmoved), when(s.Watermark))
			c.end(CauseMoving, s.Name, nil)
			break
		}
		x.Stuck = true
		c.say("%s has not moved for %s (its watermark is at %s)", id(s.Name), dur(unmoved), when(s.Watermark))
		e.why(s, &c, map[string]bool{})
	}
	x.Chain, x.Cause, x.RootStage, x.Partition = c.sentences, c.cause, c.root, c.partition
	x.Text = strings.Join(c.sentences, "; ")
	return x
}

// why appends why stage s is where it is, following its inputs down.
// seen guards against a cycle in a malformed graph.
func (e *explainer) why(s *Stage, c *chain, seen map[string]bool) {
	seen[s.Name] = true
	if !s.Reported {
		c.say("%s has not reported yet: none of its tasks has committed", id(s.Name))
		if u := e.lowestUpstream(s); u != nil && !seen[u.Name] && (!u.Reported || u.Held || !e.moving(u)) {
			c.say("%s waits on its input from %s", id(s.Name), id(u.Name))
			e.why(u, c, seen)
			return
		}
		if len(s.LocalTasks) > 0 {
			c.say("this instance (%s) is assigned its tasks %s but has committed none of their work yet", s.Instance, ints(s.LocalTasks))
		} else {
			c.say("is an instance running with %s's tasks assigned?", id(s.Name))
		}
		c.end(CauseNoReport, s.Name, nil)
		return
	}
	if u := e.lowestUpstream(s); u != nil && !seen[u.Name] && (!u.Reported || u.Held || u.Watermark <= s.Watermark) {
		switch {
		case !u.Reported:
			c.say("%s is held by its input from %s, which has not reported yet", id(s.Name), id(u.Name))
		case u.Held:
			c.say("%s is held by its input from %s, which is held", id(s.Name), id(u.Name))
		default:
			c.say("%s is held by its input from %s (at %s)", id(s.Name), id(u.Name), when(u.Watermark))
		}
		e.why(u, c, seen)
		return
	}
	if s.Held && len(s.Missing) > 0 {
		p := s.Missing[0]
		part := s.partition(p)
		if len(s.Missing) == 1 {
			c.say("%s is held until all %d of its tasks have reported: task %d has not", id(s.Name), s.Total, p)
		} else {
			c.say("%s is held until all %d of its tasks have reported: tasks %s have not", id(s.Name), s.Total, ints(s.Missing))
		}
		e.task(s, p, part, c, true)
		return
	}
	if s.AllIdle {
		c.say("every task of %s is idle: its watermark waits for a record", id(s.Name))
		c.end(CauseAllIdle, s.Name, nil)
		return
	}
	p := s.MinPartition
	if p < 0 {
		c.say("%s has no task defining its watermark", id(s.Name))
		c.end(CauseNoReport, s.Name, nil)
		return
	}
	e.task(s, p, s.partition(p), c, false)
}

// task appends why task p of s holds s; missing says it has not reported.
func (e *explainer) task(s *Stage, p int32, part *Partition, c *chain, missing bool) {
	pp := p
	if part == nil {
		part = &Partition{Partition: p}
	}
	if part.Source == nil && part.LastReport.IsZero() {
		// A source task reports at its first commit, which needs a record
		// (or its idleness): the other partitions' reports say the topic
		// and the idleness of the source. Only the tasks of a stage
		// reading a user's topic report a Source (step.Head.Source), so
		// anySource is nil for any other stage, whatever its head kind.
		if src := s.anySource(); src != nil {
			cp := *part
			cp.Source = &Source{Topic: src.Topic, Idleness: src.Idleness}
			part = &cp
		}
	}
	if src := part.Source; src != nil {
		switch {
		case src.AlignmentHeld || part.Local != nil && part.Local.Paused:
			c.say("%s task %d (partition %d of topic %s) is paused by watermark alignment group %s: it is %s ahead of the group's minimum and resumes when the group catches up", id(s.Name), p, p, src.Topic, src.AlignmentGroup, dur(src.DriftFromGroupMin))
			c.end(CauseAlignment, s.Name, &pp)
			return
		case src.UnreadBecause != "":
			c.say("partition %d of topic %s holds records it cannot read yet because %s: it holds the watermark, never idle, until they are read", p, src.Topic, src.UnreadBecause)
			c.end(CauseUnread, s.Name, &pp)
			return
		case src.NotIdleBecause != "":
			c.say("partition %d of topic %s is not idle though it has had no record for its idleness of %s, because %s: it holds the watermark until that passes", p, src.Topic, dur(src.Idleness), src.NotIdleBecause)
			c.end(CauseNotIdle, s.Name, &pp)
			return
		case !src.HasLastEventTime && src.Idleness == 0:
			c.say("partition %d of topic %s has never received a record and the source has no idleness set, so it holds the watermark (kafkaio.WithIdleness lets a quiet partition stop holding it)", p, src.Topic)
			c.end(CauseNeverReceivedNoIdleness, s.Name, &pp)
			return
		case !src.HasLastEventTime && !e.stale(part):
			c.say("partition %d of topic %s has never received a record; it counts as idle once its idleness of %s has passed", p, src.Topic, dur(src.Idleness))
			c.end(CauseNoNewRecords, s.Name, &pp)
			return
		case !e.stale(part) && !(part.Local != nil && part.Local.LagRecords > 0):
			if src.Idleness == 0 {
				c.say("partition %d of topic %s has had no newer record since event time %s, and the source has no idleness set", p, src.Topic, when(src.LastEventTime))
			} else {
				c.say("partition %d of topic %s has had no newer record since event time %s; it counts as idle once its idleness of %s has passed", p, src.Topic, when(src.LastEventTime), dur(src.Idleness))
			}
			c.end(CauseNoNewRecords, s.Name, &pp)
			return
		}
	}
	stale := e.stale(part)
	switch {
	case missing && part.LastReport.IsZero():
		c.say("%s task %d has never reported", id(s.Name), p)
	case missing:
		c.say("%s task %d has not reported since the stage's task count changed (last report %s)", id(s.Name), p, clock(part.LastReport))
	case stale && part.LastReport.IsZero():
		c.say("%s task %d has not reported since this process started", id(s.Name), p)
	case stale:
		c.say("%s task %d has not reported since %s", id(s.Name), p, clock(part.LastReport))
	case len(s.Upstreams) == 0:
		c.say("%s task %d is at %s, where its head puts it (a splittable DoFn's watermark estimate, a TestStream's watermark)", id(s.Name), p, when(part.Watermark))
		c.end(CauseHold, s.Name, &pp)
		return
	default:
		c.say("%s task %d holds it at %s with its own state (buffered windows, pending timers or a watermark estimate) while its input is ahead", id(s.Name), p, when(part.Watermark))
		c.end(CauseHold, s.Name, &pp)
		return
	}
	c.end(CauseTaskNotReported, s.Name, &pp)
	if l := part.Local; l != nil {
		switch {
		case !l.AttemptSince.IsZero() && e.in.Now.Sub(l.AttemptSince) >= e.in.StuckAfter:
			c.say("task %d is owned by this instance (%s), whose attempt (bundles and transaction) has been open for %s", p, l.Instance, dur(e.in.Now.Sub(l.AttemptSince)))
			c.end(CauseAttemptOpen, s.Name, &pp)
		case l.LagRecords > 0:
			c.say("task %d is owned by this instance (%s) and has %d records left to read", p, l.Instance, l.LagRecords)
		case l.LastCommit.IsZero():
			c.say("task %d is owned by this instance (%s), which has not committed for it yet", p, l.Instance)
		default:
			c.say("task %d is owned by this instance (%s), which last committed for it at %s", p, l.Instance, clock(l.LastCommit))
		}
		return
	}
	if part.Owner != "" {
		c.say("task %d was last reported by instance %s (the page of that instance says more)", p, part.Owner)
		return
	}
	c.say("no instance has reported for task %d: is an instance running and assigned it?", p)
}

// moving: s's watermark changed within StuckAfter.
func (e *explainer) moving(s *Stage) bool { return e.in.Now.Sub(s.MovedAt) < e.in.StuckAfter }

// stale: the partition has not reported for StuckAfter (or never).
func (e *explainer) stale(p *Partition) bool {
	return p.LastReport.IsZero() || e.in.Now.Sub(p.LastReport) >= e.in.StuckAfter
}

// lowestUpstream is the upstream that defines s's input watermark: one not
// reported yet, else one held, else the lowest watermark, leaving out the
// upstreams whose every task is idle and those at the end of time (the
// WatermarkManager's rule where upstreams meet, watermarkmgr.Aggregator);
// nil for a stage without upstreams, or when every upstream is idle or
// done. Ties go to the first in s.Upstreams.
func (e *explainer) lowestUpstream(s *Stage) *Stage {
	var best *Stage
	rank := func(u *Stage) (int, mtime.Time) {
		switch {
		case !u.Reported:
			return 0, mtime.MinTimestamp
		case u.Held:
			return 1, mtime.MinTimestamp
		}
		return 2, u.Watermark
	}
	for _, name := range s.Upstreams {
		u := e.byName[name]
		if u == nil {
			u = &Stage{Name: name}
		}
		if u.Reported && !u.Held && (u.AllIdle || u.Watermark >= mtime.MaxTimestamp) {
			continue // left out of the minimum
		}
		if best == nil {
			best = u
			continue
		}
		rb, wb := rank(best)
		ru, wu := rank(u)
		if ru < rb || ru == rb && wu < wb {
			best = u
		}
	}
	return best
}

// anySource is the Source of any partition of s that has one, or nil.
func (s *Stage) anySource() *Source {
	for i := range s.Partitions {
		if src := s.Partitions[i].Source; src != nil {
			return src
		}
	}
	return nil
}

func (s *Stage) partition(p int32) *Partition {
	for i := range s.Partitions {
		if s.Partitions[i].Partition == p {
			return &s.Partitions[i]
		}
	}
	return nil
}

// id is the short name of a stage in sentences: "s3" of "s3-Fixed30d_CoGBK"
// (the plan's index is unique); the whole name when it has no such prefix.
func id(name string) string {
	head, _, ok := strings.Cut(name, "-")
	if !ok || len(head) < 2 || head[0] != 's' {
		return name
	}
	for _, r := range head[1:] {
		if r < '0' || r > '9' {
			return name
		}
	}
	return head
}

// when formats a watermark: the ends of Beam's range in words, else ISO
// 8601 UTC to the millisecond.
func when(t mtime.Time) string {
	switch {
	case t <= mtime.MinTimestamp:
		return "the start of time"
	case t >= mtime.MaxTimestamp:
		return "the end of time"
	}
	return time.UnixMilli(int64(t)).UTC().Format("2006-01-02T15:04:05.000Z")
}

// clock formats a wall-clock time as HH:MM:SS UTC.
func clock(t time.Time) string { return t.UTC().Format("15:04:05") }

// dur formats a duration for people: "14 s", "3 min 5 s", "250 ms".
func dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// taskList says "task 3" or "tasks 1, 2".
func taskList(ps []int32) string {
	if len(ps) == 1 {
		return fmt.Sprintf("task %d", ps[0])
	}
	return "tasks " + ints(ps)
}

func ints(ps []int32) string {
	s := append([]int32(nil), ps...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	parts := make([]string, len(s))
	for i, p := range s {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, ", ")
}

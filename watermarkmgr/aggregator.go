package watermarkmgr

import (
	"fmt"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Aggregator computes the input watermark of a task whose stage reads
// several upstream stages (e.g. a Flatten of two stages): one Manager per
// upstream stage, keyed by stage name (DESIGN.md "Watermarks": "one per
// upstream stage; the task's input watermark is the min over them").
//
// Upstreams are either declared up front with NewAggregator(names...), so
// that an upstream that has not reported at all holds the result, or, if
// none is declared, created on their first report. Prefer declaring: an
// undeclared upstream that reports late cannot hold what has already been
// emitted (the watermark never decreases), so its records below it are late.
//
// Like Manager, an Aggregator is not safe for concurrent use; reports are
// recorded with Observe and the watermark is recomputed by Advance.
type Aggregator struct {
	declared bool
	names    []string // sorted
	mgrs     map[string]*Manager
	out      mtime.Time
}

// NewAggregator returns an Aggregator over the given upstream stage names
// (duplicates are ignored). With no name, upstreams are created on their
// first report and the Aggregator is held until one reports.
func NewAggregator(upstreams ...string) *Aggregator {
	a := &Aggregator{
		declared: len(upstreams) > 0,
		mgrs:     make(map[string]*Manager, len(upstreams)),
		out:      mtime.MinTimestamp,
	}
	for _, u := range upstreams {
		a.add(u)
	}
	return a
}

func (a *Aggregator) add(name string) *Manager {
	if m, ok := a.mgrs[name]; ok {
		return m
	}
	m := New()
	a.mgrs[name] = m
	i := sort.SearchStrings(a.names, name)
	a.names = append(a.names, "")
	copy(a.names[i+1:], a.names[i:])
	a.names[i] = name
	return m
}

// Observe records one report of upstream stage upstream; see Manager.Observe
// for the other arguments (committedWatermark is an mtime.Time, milliseconds
// since the Unix epoch) and their errors. It returns an error wrapping
// ErrUnknownUpstream if upstreams were declared and upstream is not one of
// them. State unchanged after any error. O(log P).
func (a *Aggregator) Observe(upstream string, sourcePartition int32, committedWatermark mtime.Time, totalSourcePartitions int32, idle bool) error {
	return a.ObserveReport(Report{Upstream: upstream, SourcePartition: sourcePartition, CommittedWatermark: committedWatermark, TotalSourcePartitions: totalSourcePartitions, Idle: idle})
}

// ObserveReport records report r of upstream stage r.Upstream: it is
// Observe with r's fields, with Observe's errors (ErrUnknownUpstream, and
// Manager.Observe's). State unchanged after any error. O(log P).
func (a *Aggregator) ObserveReport(r Report) error {
	upstream := r.Upstream
	m, ok := a.mgrs[upstream]
	if !ok {
		if a.declared {
			return fmt.Errorf("%w: %q (declared: %q)", ErrUnknownUpstream, upstream, a.names)
		}
		// Validate before creating the Manager so that a failed report
		// leaves no trace.
		if err := validate(r.SourcePartition, r.CommittedWatermark, r.TotalSourcePartitions); err != nil {
			return fmt.Errorf("upstream %q: %w", upstream, err)
		}
		m = a.add(upstream)
	}
	if err := m.ObserveReport(r); err != nil {
		return fmt.Errorf("upstream %q: %w", upstream, err)
	}
	return nil
}

// Advance advances every upstream's Manager and recomputes the aggregated
// watermark (mtime.Time, milliseconds since the Unix epoch). O(U) for U
// upstreams. This is the rule of idleness across stages (seed 002's "an
// idle partition never holds it back", applied where several upstreams
// meet: a Flatten's stage, a CoGroupByKey, several topics in one Read;
// DESIGN.md "Watermarks"). Per upstream u, with Out_u its Manager's
// emitted watermark:
//
//	done(u) ⇔ Out_u = MaxTimestamp               finished (its Out never goes back)
//	idle(u) ⇔ ¬done(u) ∧ AllIdle_u               every task of u idle (never while held)
//	live(u) ⇔ ¬done(u) ∧ ¬idle(u)                delivering, or held
//	L = { u : live(u) },  I = { u : idle(u) }
//
//	candidate = MIN{ Out_u : u ∈ L }   if L ≠ ∅
//	          = MAX{ Out_u : u ∈ I }   if L = ∅ and I ≠ ∅   (every input idle or done)
//	          = MaxTimestamp           if every upstream is done
//	Out'      = Out                    if no upstream is known
//	          = MAX(Out, candidate)    otherwise
//
// An upstream whose every task is idle is left out of the minimum, as an
// idle partition is within one upstream (Manager.Advance); a held upstream
// is live, so it holds the result through the min (a held Out_u has not
// moved past what it had when the hold (re-)opened). When no upstream is
// live the watermark holds: the MAX over the idle upstreams is the
// Manager's all-idle rule (order independent, and nothing at or below it
// can arrive from an upstream that stays idle), and it never jumps to the
// end of time while an upstream is idle, even beside upstreams that are
// done: an idle unbounded input may still deliver, and a stage at the end
// of time would end the job. The outer MAX keeps Out non-decreasing when an
// undeclared upstream appears late, and across an idle upstream waking up
// below Out (its records below Out are late, the accepted cost of idleness
// in Beam and Flink alike). AllIdle says when the caller forwards
// idle=true downstream.
func (a *Aggregator) Advance() mtime.Time {
	if len(a.names) == 0 {
		return a.out
	}
	if c := a.candidate(); c > a.out {
		a.out = c
	}
	return a.out
}

// candidate advances every upstream's Manager and returns the candidate of
// Advance's formula. Must not be called with no upstream known.
func (a *Aggregator) candidate() mtime.Time {
	live, idle := mtime.MaxTimestamp, mtime.MinTimestamp
	anyLive, anyIdle := false, false
	for _, n := range a.names {
		m := a.mgrs[n]
		w := m.Advance()
		switch kindOf(m) {
		case upIdle:
			anyIdle = true
			idle = max(idle, w)
		case upLive:
			anyLive = true
			live = min(live, w)
		}
	}
	switch {
	case anyLive:
		return live
	case anyIdle:
		return idle
	}
	return mtime.MaxTimestamp
}

// Watermark returns the aggregated watermark as of the last Advance
// (mtime.Time, milliseconds since the Unix epoch). It never decreases.
func (a *Aggregator) Watermark() mtime.Time { return a.out }

// Held reports whether no upstream is known yet or any upstream's Manager is
// held. O(U).
func (a *Aggregator) Held() bool {
	if len(a.names) == 0 {
		return true
	}
	for _, n := range a.names {
		if a.mgrs[n].Held() {
			return true
		}
	}
	return false
}

// AllIdle reports whether no upstream is live and at least one is idle, in
// Advance's terms: every upstream is known, and each is all idle
// (Manager.AllIdle, never while held) or done (its watermark at the end of
// time), one at least idle. The caller then forwards idle=true in its own report
// downstream (with nothing of its own held), so that idleness travels
// through every stage. An Aggregator whose upstreams are all done is not
// idle: it is at the end of time. O(U).
func (a *Aggregator) AllIdle() bool {
	if len(a.names) == 0 {
		return false
	}
	anyIdle := false
	for _, n := range a.names {
		switch kindOf(a.mgrs[n]) {
		case upIdle:
			anyIdle = true
		case upLive:
			return false
		}
	}
	return anyIdle
}

// upKind is an upstream's part in Advance's formula.
type upKind int

const (
	upLive upKind = iota // delivering, or held: in the minimum
	upIdle               // every task idle: left out of the minimum
	upDone               // at the end of time (held or not: it never goes back)
)

// kindOf classifies upstream Manager m as of its last Advance.
func kindOf(m *Manager) upKind {
	switch {
	case m.Watermark() >= mtime.MaxTimestamp:
		return upDone
	case m.AllIdle():
		return upIdle
	}
	return upLive
}

// Live returns the upstreams that are live in Advance's terms (not all
// idle, not done: they define the minimum), sorted; for explanations
// (which upstream holds a stage). O(U).
func (a *Aggregator) Live() []string {
	var out []string
	for _, n := range a.names {
		if kindOf(a.mgrs[n]) == upLive {
			out = append(out, n)
		}
	}
	return out
}

// Upstreams returns the upstream stage names, sorted.
func (a *Aggregator) Upstreams() []string { return append([]string(nil), a.names...) }

// UpstreamSnapshot is one upstream stage in an AggregatorSnapshot.
type UpstreamSnapshot struct {
	Name string
	Snapshot
}

// AggregatorSnapshot is a read-only copy of an Aggregator's state.
type AggregatorSnapshot struct {
	// Watermark is the aggregated watermark (mtime.Time, ms since the Unix
	// epoch) as of the last Advance.
	Watermark mtime.Time
	Held      bool
	AllIdle   bool
	// Upstreams, sorted by name.
	Upstreams []UpstreamSnapshot
}

// Snapshot returns a copy of the state. O(U·P).
func (a *Aggregator) Snapshot() AggregatorSnapshot {
	s := AggregatorSnapshot{Watermark: a.out, Held: a.Held(), AllIdle: a.AllIdle()}
	for _, n := range a.names {
		s.Upstreams = append(s.Upstreams, UpstreamSnapshot{Name: n, Snapshot: a.mgrs[n].Snapshot()})
	}
	return s
}

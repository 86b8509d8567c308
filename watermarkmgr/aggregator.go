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
	m, ok := a.mgrs[upstream]
	if !ok {
		if a.declared {
			return fmt.Errorf("%w: %q (declared: %q)", ErrUnknownUpstream, upstream, a.names)
		}
		// Validate before creating the Manager so that a failed report
		// leaves no trace.
		if err := validate(sourcePartition, committedWatermark, totalSourcePartitions); err != nil {
			return fmt.Errorf("upstream %q: %w", upstream, err)
		}
		m = a.add(upstream)
	}
	if err := m.Observe(sourcePartition, committedWatermark, totalSourcePartitions, idle); err != nil {
		return fmt.Errorf("upstream %q: %w", upstream, err)
	}
	return nil
}

// Advance advances every upstream's Manager and recomputes the aggregated
// watermark (mtime.Time, milliseconds since the Unix epoch). O(U) for U
// upstreams.
//
//	Out' = Out                                   if no upstream is known
//	     = MAX(Out, MIN{ Out_u : upstream u })   otherwise
//
// A held upstream's Out_u has not moved past what it had when the hold
// (re-)opened (mtime.MinTimestamp if it never left it), so a held upstream
// holds the result through the min. The outer MAX keeps Out non-decreasing
// when an undeclared upstream appears late.
func (a *Aggregator) Advance() mtime.Time {
	if len(a.names) == 0 {
		return a.out
	}
	lo := mtime.MaxTimestamp
	for _, n := range a.names {
		if w := a.mgrs[n].Advance(); w < lo {
			lo = w
		}
	}
	if lo > a.out {
		a.out = lo
	}
	return a.out
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

// AllIdle reports whether every upstream is known and all idle (see
// Manager.AllIdle). O(U).
func (a *Aggregator) AllIdle() bool {
	if len(a.names) == 0 {
		return false
	}
	for _, n := range a.names {
		if !a.mgrs[n].AllIdle() {
			return false
		}
	}
	return true
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

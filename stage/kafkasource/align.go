package kafkasource

import (
	"fmt"
	"slices"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Alignment is the result of Align for one alignment group at one
// wall-clock instant: the group's minimum and, per member, its drift from
// it and whether it is held. It is the alignment part of seed 002's
// GET /watermarks (alignmentGroupMins, alignmentHeld, driftFromGroupMinMs).
type Alignment struct {
	// Group is the members' AlignmentGroup; "" for an empty group.
	Group string
	// Min is the group minimum (mtime.Time, ms since the Unix epoch),
	// meaningful only when HasMin; mtime.MinTimestamp otherwise.
	Min mtime.Time
	// HasMin is false when no member counts (each is idle or has had no
	// record): then nothing is held.
	HasMin bool
	// Members holds one entry per partition passed to Align, by its key.
	Members map[string]Member
}

// Member is one partition in an Alignment.
type Member struct {
	// Watermark is the partition's watermark (mtime.Time, ms since the Unix
	// epoch).
	Watermark mtime.Time
	// Idle is Partition.Idle at Align's now.
	Idle bool
	// HasRecord is false until the partition's first record.
	HasRecord bool
	// Counts: the member is in the group minimum (HasRecord ∧ ¬Idle).
	Counts bool
	// DriftMillis is Watermark − Min in ms when HasMin and HasRecord, else
	// 0. Negative for an idle member behind the minimum.
	DriftMillis int64
	// Held: the caller must hold (pause) the partition until a later Align
	// releases it.
	Held bool
}

// Held returns the keys of the held members, sorted.
func (a Alignment) Held() []string {
	var out []string
	for k, m := range a.Members {
		if m.Held {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Align computes the alignment of one group at wall-clock now (seed 002,
// "Alignment"; FLIP-217). group maps a caller's key (e.g. "orders:0") to a
// partition; every partition must be non-nil and have the same non-empty
// AlignmentGroup, else Align returns an error wrapping ErrNotAligned or
// ErrMixedGroups and no Alignment. With wm(p) = p.Watermark():
//
//	counts(p) ⇔ hasRecord(p) ∧ ¬p.Idle(now)
//	Min       = MIN { wm(p) : counts(p) }          (HasMin ⇔ some p counts)
//	drift(p)  = wm(p) − Min                         (ms; 0 if ¬HasMin ∨ ¬hasRecord(p))
//	held(p)   ⇔ HasMin ∧ hasRecord(p) ∧ drift(p) > ⌊MaxDrift(p) / 1 ms⌋
//
// Idle members do not count in the minimum: an idle laggard releases the
// group (seed 002: "an empty one that stays silent idles out and releases
// the hold"), which is why Strategy.Validate refuses alignment without
// idleness. Members without a record yet do not count either (seed 002:
// the group minimum reads hasReceivedEvent): a partition with nothing to
// say about event time does not hold its group for a whole idleness
// timeout at start-up. Each member is held against its own MaxDrift
// (Flink's per-source maxAllowedWatermarkDrift); since ⌊·⌋ of a
// nanosecond bound against a whole-ms drift is exact, drift > MaxDrift.
//
// An idle member is held all the same when it is ahead. The caller pauses a
// held partition, so it receives no records and idles out; releasing it for
// that would let a batch through every Idleness period. It is released when
// the minimum comes within its MaxDrift or when no member counts. The
// member at the minimum is never held, so the group always progresses.
// O(len(group)); it reads the partitions and changes nothing.
func Align(group map[string]*Partition, now time.Time) (Alignment, error) {
	keys := make([]string, 0, len(group))
	for k := range group {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic errors
	a := Alignment{Min: mtime.MinTimestamp, Members: make(map[string]Member, len(group))}
	first := ""
	for _, k := range keys {
		p := group[k]
		switch {
		case p == nil:
			return Alignment{}, fmt.Errorf("%w: %q is nil", ErrNotAligned, k)
		case p.s.AlignmentGroup == "":
			return Alignment{}, fmt.Errorf("%w: %q", ErrNotAligned, k)
		case a.Group == "":
			a.Group, first = p.s.AlignmentGroup, k
		case p.s.AlignmentGroup != a.Group:
			return Alignment{}, fmt.Errorf("%w: %q in %q, %q in %q",
				ErrMixedGroups, first, a.Group, k, p.s.AlignmentGroup)
		}
		m := Member{Watermark: p.Watermark(), Idle: p.Idle(now), HasRecord: p.seen}
		m.Counts = m.HasRecord && !m.Idle
		if m.Counts && (!a.HasMin || m.Watermark < a.Min) {
			a.Min, a.HasMin = m.Watermark, true
		}
		a.Members[k] = m
	}
	if !a.HasMin {
		return a, nil
	}
	for _, k := range keys {
		m := a.Members[k]
		if !m.HasRecord {
			continue
		}
		// Both terms are within Beam's range, so the difference fits int64.
		m.DriftMillis = int64(m.Watermark - a.Min)
		m.Held = m.DriftMillis > int64(group[k].s.MaxDrift/time.Millisecond)
		a.Members[k] = m
	}
	return a, nil
}

package stage

import "github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

// TimerHead is a Head that keeps timers (the head of a stateful ParDo stage):
// besides elements, an attempt may have to deliver fired timers to the
// bundle, the bundle may set timers that hold the output watermark, and
// processing-time timers come due without any record arriving. The Loop
// then:
//
//   - calls Process when Pending says so, even with no elements;
//   - takes the hold of every task of the attempt again after Process
//     (Hold), so that a timer set by the bundle holds the watermark the
//     attempt reports: output = max(previous, min(input, Advance's hold,
//     Hold));
//   - runs an attempt for the tasks Due names when a poll returned no
//     records of theirs, as if a record had arrived (no offset moves).
type TimerHead interface {
	Head
	// Pending reports whether the tasks advanced in this attempt have timers
	// to deliver to the bundle (fired by Advance).
	Pending() bool
	// Hold is task p's hold after the attempt's bundles (mtime.Time, ms;
	// mtime.MaxTimestamp when it holds nothing).
	Hold(p int32) mtime.Time
	// Due returns the assigned tasks with processing-time timers due now
	// (by the head's clock), sorted.
	Due() []int32
}

// KeyPartition is the partition (task) of a record keyed by an encoded Beam
// key on a keyed topic (a GroupByKey's or a stateful ParDo's input): FNV-1a
// of the key bytes modulo the partition count. A stateful head finds the
// task of a state request or a timer by the key bytes the SDK sends.
func KeyPartition(key []byte, partitions int32) int32 { return keyPartition(key, partitions) }

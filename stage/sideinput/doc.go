// Package sideinput materialises the side inputs of one stage in one
// instance and answers, for the stage's loop, whether an element may enter a
// bundle, and, for the Fn API State service, what a side input window holds.
//
// What lives here:
//
//   - Mapping (store.go): the Go SDK's window mapping fns (global, fixed,
//     sliding) as formulas: which side input window a main window reads.
//   - Ready (store.go): a side input window is complete once the side
//     input's watermark has passed its max timestamp (Beam's rule).
//   - Store (store.go): one side input in memory, per encoded window, with
//     the producer stage's watermark aggregated from the reports in its
//     topic (watermarkmgr.Aggregator); it implements fnapi.SideInput.
//   - Set (set.go): the Stores of a stage, one consumer reading every side
//     topic whole, and Ready(element) for stage.Config.SideInputs.
//
// Exactly once: an element enters a bundle only when every side input
// window it reads is complete, and the State service refuses (error, so the
// bundle fails and is retried) a window that is not; so every attempt of a
// bundle, and every instance, sees the same side input for a window. The
// stage's task holds the element back by not consuming it (stage.Loop
// pauses the partition at it), never by dropping it.
//
// In memory: each instance keeps every side input of its stages and rebuilds
// them from the topics at start. Side inputs larger than memory are not
// supported yet. So a side input topic is never purged (the runner purges
// only stage input topics) and keeps its records for ever
// (kafkaclient.DataTopicConfig); a fetch out of range (records deleted
// under the reader by hand) fails the reader with
// kafkaclient.ErrOffsetOutOfRange, never jumps to the log end.
//
// Goroutines and locks: a Set owns one goroutine (Set.run) that owns the
// consumer and feeds the Stores; each Store guards its windows and watermark
// with its own mutex (the State service and the stage loop read them from
// other goroutines); Set.mu guards the Changed channel and the reader's
// error. No lock is held while calling into another Store or Kafka.
//
// Imports: the Beam SDK (coders, windows, graphx URNs), Kafka, and this
// module's stage/kafkaclient, stage/envelope (the one Envelope codec),
// stage/fnapi, watermarkmgr and proto packages; never package stage, and
// nothing of runner: the runner copies what it needs of the plan into
// Config (Input).
package sideinput

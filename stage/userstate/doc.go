// Package userstate is the head of a stateful ParDo stage: the runner side
// of Beam's user state and timers for one stateful transform, kept per task
// (input partition) in the task's Pebble store with its transactional
// changelog (package state).
//
// The stage's input topic is keyed (plan.HeadStateful): every element of a
// key is on one partition, the one stage.KeyPartition names for the key's
// bytes. State requests and timers carry the same key bytes (BuildStage
// gives the SDK the wire-safe key coder for both), so the head finds the
// task of a request by its key.
//
// User state (Head.Get, Append, Clear; fnapi.UserState) is keyed by
// (window, state id, key) — the transform is the stage's one stateful ParDo.
// Writes of a bundle go to the task's pending writes: later requests of the
// same attempt see them, Prepare sends them to the changelog inside the
// attempt's transaction, Committed applies them, Aborted drops them. Beam:
// state is per key and window, and is garbage once the input watermark
// passes the window's max timestamp + allowed lateness (Prepare deletes it;
// the global window's state lives until the application is deleted).
//
// Timers (Advance, Run, Hold, Due; stage.TimerHead) are kept per (family,
// key, window, tag) — setting a timer replaces the one with the same name,
// as in Beam. An event-time timer fires when the task's input watermark is
// past its fire time (fire < input watermark, as Beam Java's timer
// internals); a processing-time timer when the head's clock reaches its
// fire time. A pending timer holds the task's output watermark at its hold
// (output) timestamp. Timers fire in fire-time order within a family; one
// that a bundle sets and that is already due fires in the same attempt (Run
// loops until none is due), so the attempt's outputs and report already
// include it.
//
// It may import stage, state, fnapi and the Beam Go SDK. Every method is
// called from the goroutine running the stage's Loop, except the
// fnapi.UserState methods, which the State stream calls while a bundle runs;
// Head.mu serialises them.
package userstate

// Package userstate is the head of a stateful ParDo stage: the runner side
// of Beam's user state and timers for one stateful transform, kept per task
// (input partition) in the task's Pebble store with its transactional
// changelog (package state).
//
// The stage's input topic is keyed (plan.HeadStateful): every element of a
// key is on one partition, the one step.KeyPartition names for the key's
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
// Timers (Advance, Results, Hold, Wake; step.Head) are kept per (family,
// key, window, tag). A timer write of a bundle (Results) sets, re-sets
// (the later write replaces the timer with the same name, as in Beam) or
// clears; the writes of each bundle are applied in the harness's order
// before anything else runs, so set, re-set, clear and set-after-clear of
// a timer ahead of the watermark have the same effect whether they come in
// one bundle or in several, and a restore rebuilds the same timers from
// the store (Load). (A timer set behind the watermark fires right after the
// bundle that set it: a clear by a later element of the same bundle wins,
// one in a later bundle comes too late. Beam fires timers between bundles
// and leaves the bundles to the runner.) An event-time
// timer fires when the task's input watermark is past its fire time (fire
// < input watermark, as Beam Java's timer internals); a processing-time
// timer when the head's clock reaches its fire time (Wake asks the loop
// for an attempt). A pending timer holds the task's output watermark at its
// hold (output) timestamp. Timers fire in fire-time order within a family.
// Pending timers are indexed by deadline and by hold (timerindex.go: heaps
// rebuilt by Load; SetTimer O(log n), PopDue O(k log n) for k due). When
// the stateful transform reads side inputs (Config.SideInputs), a timer of
// a window its side inputs are not ready for waits, pending, until they
// are (after a restore the side topics are read again from the start),
// and fires before the task's next element once they are.
//
// The ordering rule, and where it is kept. Beam (and Prism) fire an
// event-time timer when the watermark passes it, before elements that come
// after that watermark; a timer cleared before it is due never fires. Here:
//
//   - Element returns Barrier work when the transform has event-time
//     timers, so the step (step.Step) runs the bundle of the elements
//     before a report, and hands its timer writes to Results, before it
//     calls Advance for that report;
//   - Advance pops the timers due at the report's watermark and returns
//     them as work with Timers, which the step runs in a bundle of its own
//     before the task's next record (never in a bundle with elements: a
//     timer delivered beside an element that clears it would reach the Go
//     SDK as both, and the SDK fires an in-bundle clear as a timer at 0);
//   - Results pops the timers a bundle set behind the watermark (a looping
//     timer) and returns them, fired at once, at the same point; the step
//     bounds the rounds (step.ErrTimerLoop).
//
// The head keeps each task's input watermark as of its last Advance (wm)
// across attempts, and the value of the last committed attempt, which
// Aborted returns to; a task restored on assignment learns it at its first
// record (the step advances a task whose watermark it has not seen).
// TestTimerCallbacksFollowReports checks the order of the callbacks against
// the reports; integration/timers_test.go the whole pipeline on a broker.
//
// It may import stage/step, stage/state, stage/fnapi and the Beam Go SDK;
// not the loop shell (stage), a Kafka client nor runner
// (stage/archtest). Every method is
// called from the goroutine running the stage's Loop, except the
// fnapi.UserState methods, which the State stream calls while a bundle runs;
// Head.mu serialises them.
package userstate

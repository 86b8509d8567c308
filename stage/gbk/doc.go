// Package gbk is the runner-side GroupByKey of a stage's head.
//
// Files:
//
//   - core.go, window.go, strategy.go: the pure core. Core groups one task's
//     values per (key, window) in a Store and fires panes under Beam's
//     default trigger as the input watermark advances; sessions merge as
//     values arrive; allowed lateness, accumulation, timestamp combiners,
//     empty on-time and final panes (OnTimeBehavior, ClosingBehavior) and
//     garbage collection follow the Beam model (each rule is a formula on
//     the function implementing it). No I/O but through Store, no
//     goroutines, no clock. Scenario tests: testdata/core/*.txt. merge.go
//     is the merging of a key's windows (sessions), layout.go the Store's
//     keys and the meta record's encoding (and unit entries: a combine's
//     one pending accumulator, stored without a meta record),
//     memstore.go MemStore.
//   - trigger.go, triggered.go: non-default triggers (Never, Always,
//     AfterCount, AfterProcessingTime, AfterSynchronizedProcessingTime,
//     AfterEndOfWindow with early and late firings, AfterAll, AfterAny,
//     AfterEach, Repeat, OrFinally) as Beam's trigger state machines,
//     evaluated per element (AddFire) and per Advance, their state per
//     (key, window) in the meta record; a finished trigger closes the
//     window. Processing time arrives as SetProcessingTime. Scenarios:
//     testdata/core/trigger_*.txt.
//   - trigger_merge.go: triggers on merging (session) windows: the merged
//     window's trigger state is the merge of its parts' (Beam's
//     TriggerStateMachine.onMerge). Scenarios: trigger_sessions.txt.
//   - trigger_index.go: the candidates an Advance evaluates under a
//     non-default trigger (windows whose end or expiry passes, deadlines
//     passed, entries still ready to fire), from heaps: an Advance costs
//     O((w + d) log n + c log c), not a visit of every open window.
//   - compact.go: compaction: the (key, window)s (sessions included) that
//     got values in an attempt, their values replaced by one merged value
//     (HeadConfig.Compact: a lifted combine's MergeAccumulators, run by
//     the SDK; Beam's combining state).
//   - wire.go: Codec, the wire encoding of the GroupByKey's input and output
//     elements (key and value bytes are copied, never re-encoded).
//   - head.go: Head, the step.Head shell: per task a Core over a
//     state.Task, whose writes reach the changelog in the attempt's
//     transaction.
//
// Invariants:
//
//   - Core's in-memory index is a function of the store (Load rebuilds it),
//     so an abort (pending writes dropped) or a restore on another instance
//     gives the same panes.
//   - A pane's timestamp is never before the output watermark the task
//     reported before it fired (see Core.Hold), except LATE panes, whose
//     values were late already.
//   - A merge of sessions costs the values of the smaller sessions only:
//     the largest keeps its values under its storage window (meta.SW, its
//     window when created), which never changes while the session grows
//     (TestSessionAppendMovesNoValues, BenchmarkSessionAppend).
//   - Values of an expired window (max timestamp + allowed lateness before
//     the input watermark) are dropped and counted (Head.Dropped, and a log
//     line naming the stage), never silently.
//
// It may import stage/step, stage/state, stage/fnapi and the Beam Go SDK;
// not the loop shell (stage), a Kafka client nor runner
// (stage/archtest).
package gbk

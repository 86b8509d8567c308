// Package stage runs one ExecutableStage at run time: the runner side of the Fn
// API (control, data, state, logging) towards the Go SDK harness started in this
// process, and the task loop per input partition that consumes records, runs
// bundles, and commits outputs, watermark reports and consumed offsets in one
// Kafka transaction.
//
// Subpackage fnapi holds the Fn API part: the loopback services, the
// in-process Go SDK harness, ProcessBundleDescriptors for fused stages and
// running one bundle.
//
// Subpackage sideinput materialises a stage's side inputs from their topics;
// the loop asks it (Config.SideInputs, a step.SideInputGate) before an element
// enters a bundle and holds a task back at the first element whose side
// input windows are not complete (sidegate.go: pause, seek back, resume on a
// side watermark change), so no element is processed early or dropped.
//
// Subpackage kafkaclient is the runner's one leaf Kafka package: every
// client configuration (the loop's consumer and transactional producer
// included), the internal topic names and transactional ids, the producer
// helpers, the log-end queries (the ListOffsets round trips of logends.go:
// kafkaclient.HighAndStable) and where a reader that reads a partition
// from its beginning (a state restore, the plan, a test) has read
// everything committed before it began: not at the first read_committed
// EOF (kafkaclient.ReadToEnd). Its subpackage javapartition is the Java
// client's partitioner the step uses for Kafka sinks.
//
// Subpackage kafkasource is the pure per-partition watermark generator of a
// Kafka source stage (a user's topic read directly: one task per
// partition; seed 002), and its subpackage sourcehead the stage's head. A source partition is idle
// only when the broker holds nothing past its consumer's position that will
// become readable (issue 21, section 2): librdkafka's partition EOF is not
// enough (under read_committed it comes at the last stable offset while a
// transaction is open; a fetch not answered yet, paused or stopped leaves an
// old EOF standing). The loop (logends.go) asks the broker for the log end
// of the partitions the head names (step.LogEnds: ListOffsets latest,
// read_uncommitted for the high watermark and read_committed for the last
// stable offset, at most every LogEndInterval) and hands the answers to the
// head; the rule itself is kafkasource.Reading.Quiet, a pure core.
//
// Subpackage userstate is the head of a stateful ParDo stage: user state
// and timers per task in the task's store, fired at their point in the
// stream.
//
// The other heads are subpackages too: gbk (the runner-side GroupByKey),
// splittable (a splittable DoFn that may checkpoint) and teststream (a
// TestStream replayed); subpackage state is the tasks' state store (one
// Pebble database per task, backed by a changelog topic) that gbk,
// userstate and splittable keep their state in; subpackage envelope is
// the codec of the internal topics' records.
//
// Subpackage step is the pure core the loop drives (etcd raft's RawNode,
// Ready and Advance): the Head interface every head implements
// (step.Passthrough for Impulse, Reshuffle, Flatten and side-input
// stages) and its optional interfaces, the commit decision (Step.Decide:
// a batch's records and the tasks' watermark state in, a Ready out:
// records in produce order, the head's state to commit, offsets with
// checkpoints, blocked tasks; Step.Advance acknowledges it after the
// commit), and a task's watermark state and its checkpoint. It imports no
// Kafka client; the heads (gbk, userstate, splittable, teststream,
// kafkasource/sourcehead) import it, never this package.
//
// This package is the Kafka shell around the step, one file per concern:
// loop.go the Loop, its Config and Run (one life of the clients after
// another); clients.go the clients' lifecycle and the librdkafka
// workarounds (a consumer whose Close never returns, a static member
// leaving its group, transaction calls that ignore their timeout);
// assign.go assignment and restore (the rebalance callback, start
// offsets, the rewind after an abort, a growing input topic); flow.go
// flow control (the poll, watermark alignment, woken tasks, drain);
// crossing.go a source stage's early commit of the record that carries its
// watermark past a window's end downstream (Config.NextWindowEnd);
// commit.go the transaction (Loop.commit carries out a Ready); prefetch.go
// the poll of the next attempt's records while an attempt commits on a
// goroutine of its own (Config.PollDuringCommit turns it on); sidegate.go
// pausing tasks held back by side inputs; logends.go the ListOffsets round
// trips of step.LogEnds; purge.go the purge of what the commits consumed
// (DeleteRecords, Config.PurgeInterval) and ErrOffsetOutOfRange, a
// committed offset below an internal input topic's log start; producer.go the transactional producer started
// ahead; spillfile.go an attempt's records beyond memory; status.go what
// other goroutines read (Loop.Tasks); envelope.go what the loop reads of
// an input record's reports (a task done at the end of time); size.go a
// record too large for its topic, and poison.go an input record whose
// bundle fails every time (Config.ErrorPolicy: the stage fails naming
// it, or writes it to the dead-letter topic with its offset), both found
// by taking the failed attempt's records in smaller attempts (Loop.isolate);
// topicwatch.go a topic deleted while the stage runs.
//
// Idleness travels with the watermark (DESIGN.md "Watermarks", seed 002): a
// task's input watermark is its watermarkmgr.Aggregator's over its upstream
// stages, which leaves out an upstream whose every task is idle and holds
// when every upstream is idle; a task reports idle when every upstream is
// idle and its head holds nothing (step.Head.Hold at the end of time), or when
// its head's own input is quiet (step.Head.Idle: a Kafka source partition), so a
// stage whose every input is idle is idle downstream. A side input whose
// producer is idle is left out of the main input's readiness (sideinput).
//
// The ordering rule (step.Step's doc comment has it in full): a watermark
// report read between two records of a task is a point in the stream. At a
// point the step runs the pending bundle if its work is a Barrier (it may
// set timers), then the head's Advance and the work it returns (GroupByKey
// panes, due timers, in a bundle of their own), and every bundle's results
// go back to the head (step.Head.Results) before the task's next record; the
// task's report follows the outputs of its records before the point. On
// the output topics the reports made at one place (no output record
// between them: at the end of an attempt, every task's) go as one
// Envelope per partition holding them all (Envelope.reports), so P tasks
// reporting into Q partitions cost Q records there, and one each on the
// report topic; a reader takes such a batch as one point. So
// results do not depend on how records were batched into bundles and
// transactions, with one exception Beam itself leaves to the runner: a
// timer a bundle sets behind the input watermark fires right after that
// bundle, so a later element of the same bundle that clears it (or whose
// output would come first) sees it unfired.
//
// The loop never asks what kind of head it runs: a stage's Spec says
// whether its input is raw (a source stage), which output topics are
// keyed, and its upstreams; beyond the Head interface the loop asks only
// whether its head implements one of step's optional interfaces
// (step.Drainer, step.Owing, step.Due, step.EndsInput, step.Reachability,
// step.LogEnds, step.WatermarkAhead), and the step whether it implements step.JobClockSource
// or step.JobClockReader.
//
// It imports its subpackages step, kafkaclient and envelope (the codec of
// the internal topics' records), the Beam Go SDK and confluent-kafka-go;
// it may import watermarkmgr and proto. It must not import
// runner (nor runner/plan: the runner hands it a step.Spec), and no
// package below stage imports it; stage/archtest
// checks both.
package stage

// Package step is the pure core of a stage's transaction, in the sense of
// etcd's raft (RawNode, Ready, Advance): the Head interface every head
// implements, the Step that decides one attempt, the records and reports
// it makes, and a task's watermark state with its checkpoint. The stage
// loop (package stage) is the I/O shell that drives it: it polls, hands
// the step a batch, and carries out the Ready the step returns in one
// Kafka transaction.
//
// What lives here:
//
//   - head.go: Head, the runner-side transform at the head of a stage
//     (GroupByKey, stateful ParDo, splittable DoFn, TestStream, Kafka
//     source, Passthrough), and the optional interfaces the loop and the
//     step look for (Drainer, Owing, Due, WatermarkAhead, Reachability, LogEnds, EndsInput,
//     Unskippable, JobClockSource, JobClockReader): a loop never asks which kind of
//     head it runs, only whether it implements one of them;
//   - spec.go: the vocabulary (Spec and its outputs and sinks, In, Record,
//     Bundle, ProcessFunc, Emit, SideInputGate);
//   - step.go and output.go: Step.Decide, its rules in Step's doc comment,
//     and how records are routed to topics and reports fanned out;
//   - ready.go: Ready, the attempt's decision, with the head's state to
//     commit in it (Ready.State), and Step.Advance, the one
//     acknowledgement once the transaction committed (Step.Abort drops
//     the attempt instead, after a failed Decide or an aborted
//     transaction);
//   - task.go: Task, one input partition's watermark state, and its
//     checkpoint (TaskCheckpoint, the committed offset's metadata);
//   - windows.go: ExplodeWindows, an element in N windows as N elements.
//
// Invariants: nothing here does Kafka I/O, starts a goroutine or reads a
// clock (a head's processing-time clock is the head's); every call comes
// from the goroutine running the stage's loop, so nothing takes a lock.
// Its scenarios are testdata/step/*.txt (go test ./stage/step -run Step;
// -rewrite regenerates the expected output).
//
// It may import watermarkmgr, proto, stage/fnapi (timer types),
// stage/envelope (the internal topics' record codec),
// stage/kafkaclient/javapartition (the Java client's partitioner, pure)
// and the Beam Go SDK. It must not import a Kafka client (neither
// confluent-kafka-go nor stage/kafkaclient) nor the loop shell (stage):
// stage/archtest checks it, and that the heads
// below stage import this package, not stage.
package step

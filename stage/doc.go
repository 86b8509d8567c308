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
// the loop asks it (Config.SideInputs, a SideInputGate) before an element
// enters a bundle and holds a task back at the first element whose side
// input windows are not complete (sidegate.go: pause, seek back, resume on a
// side watermark change), so no element is processed early or dropped.
//
// Subpackage logend says where a reader that reads a partition from its
// beginning (a state restore, the plan, a test) has read everything
// committed before it began: not at the first read_committed EOF.
//
// Subpackage userstate is the head of a stateful ParDo stage: user state
// and timers per task in the task's store. Such a head is a TimerHead
// (timerhead.go): the loop runs a bundle for fired timers even without
// elements, takes the head's hold again after the bundle (timers it set
// hold the output watermark), and wakes tasks whose processing-time timers
// are due though no record arrived.
//
// It may import watermarkmgr, proto, the Beam Go SDK and confluent-kafka-go. It
// must not import runner.
package stage

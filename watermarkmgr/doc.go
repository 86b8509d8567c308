// Package watermarkmgr holds the WatermarkManager: the rule that turns the
// watermark reports of an upstream stage's tasks into the input watermark of
// a downstream task (DESIGN.md, "Watermarks"; seed 000).
//
// # What lives here
//
//   - Manager (manager.go): the pure in-memory core for ONE upstream stage. It
//     takes reports (sourcePartition, committedWatermark, totalSourcePartitions,
//     idle) through Observe, or as a Report through ObserveReport, and
//     recomputes the emitted watermark only when
//     asked, through Advance, so that the result of a batch of reports does not
//     depend on their order.
//   - Aggregator (aggregator.go): one Manager per upstream stage, for a stage
//     with several upstreams (a Flatten of two stages); its watermark is the
//     min over its managers.
//   - Report (report.go): one report in the core's units. The proto
//     WatermarkReport's Core method (proto/kafkastreams/v1/report.go) is the
//     one translation of a report record into it; the readers of reports
//     (the step's task, the side input store, the service) all use it.
//   - partHeap (heap.go): the indexed binary heap that makes a report cost
//     O(log P) for P source partitions.
//
// The service that consumes the report topic and serves GET /watermarks and
// the gRPC watch API lives in the subpackage watermarkmgr/service, not here;
// it reads the core through Manager.Snapshot and Aggregator.Snapshot.
//
// Tests: testdata/*.txt are datadriven scenarios (datadriven_test.go;
// go test -rewrite regenerates them); reference_test.go holds refManager, a
// dumb O(P) model, and the property test against it; fuzz_test.go holds
// FuzzManager; bench_test.go the O(log P) benchmarks with the reference as
// baseline.
//
// # What it may import
//
// The core (manager.go, heap.go, aggregator.go, report.go) imports only the standard
// library and Beam's mtime package
// (github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime). It does no
// I/O, starts no goroutine and reads no clock; it is not safe for concurrent
// use: the service owns each Manager from one goroutine. Nothing of Kafka,
// gRPC, HTTP or the generated protos may be imported by the core.
//
// # Units
//
// Every watermark is a Beam mtime.Time: milliseconds since the Unix epoch,
// within [mtime.MinTimestamp, mtime.MaxTimestamp]. mtime.MinTimestamp is
// "nothing is known yet" (the hold), mtime.MaxTimestamp is the end of time
// (a bounded upstream has finished).
//
// # Invariants
//
// Each is tested directly; the doc comment of the function that keeps it
// states it as a formula.
//
//  1. Hold: the emitted watermark does not advance until every one of the
//     totalSourcePartitions partitions (the largest a report has carried:
//     the total only grows, a smaller one is a stale report) has reported
//     (seed 000: "holds at TIMESTAMP_MIN_VALUE until every source partition
//     has reported"). Before any report it is mtime.MinTimestamp.
//  2. Min: once nothing is held, the candidate is the min over the non-idle
//     partitions' watermarks; if every partition is idle, the max over them.
//  3. Per-partition monotonicity: a partition's watermark is the max of its
//     reports; a lower report is ignored for the watermark (its idle flag
//     still applies).
//  4. Emitted monotonicity: Out' = MAX(Out, candidate); the emitted watermark
//     never decreases, also across a rise of totalSourcePartitions (which
//     re-opens the hold) and across an idle partition waking up.
//  5. Order independence: the emitted watermark after Advance depends only on
//     the set of reports observed since the previous Advance, not on their
//     order, as long as the reports of one batch carry the same total and
//     name distinct partitions.
//  6. Idleness across stages (Aggregator.Advance): an upstream stage whose
//     every task is idle is left out of the min over upstreams, as an idle
//     partition is within one (2.); when no upstream is live the candidate is
//     the max over the idle ones and the Aggregator is AllIdle, so the
//     task's report says idle and idleness travels downstream; the end of
//     time only when every upstream is there (testdata/idle_upstream.txt).
//  7. Errors: an invalid report returns an error wrapping one of the Err*
//     sentinels and leaves the state unchanged; nothing panics on input from
//     outside the process.
package watermarkmgr

// Package teststream is the runner side of Beam's TestStream
// (beam:transform:teststream:v1): a source stage that replays a scripted
// sequence of elements and watermark advances, exactly once.
//
// Files:
//
//   - stream.go: the pure core. Parse cuts a TestStreamPayload's events into
//     Segments, each a run of elements followed by the watermark the stream
//     declares after them; Record and ParseRecord are the input records
//     naming them. No I/O, no clock, no goroutines.
//   - encode.go: Encoder, the element bytes of the payload (encoded with the
//     PCollection's coder) re-encoded as wire elements (windowed values in
//     the global window at the event's timestamp), through the Go SDK's
//     coders, as the harness itself decodes them.
//   - head.go: Head, the step.Head shell: a segment record in, the
//     segment's elements out, the segment's watermark as the task's hold.
//
// Exactly once. The TestStream stage's input topic has one partition; the
// plan transaction (runner.recordPlan) writes one record per segment into
// it, "segment i of n", in order, together with the plan: so the records
// exist once or not at all. The stage's loop reads them in batches like any
// stage's; a transaction holds the segments' elements, the reports of their
// watermarks and the consumed offset. A crash aborts the open transaction;
// the next owner resumes at the committed offset: every element is written
// once. Reports interleave with data because every segment is a watermark
// point (step.Work.Point): the step runs the segment's elements as a
// bundle and writes the segment's watermark report right after its outputs,
// before the next segment's elements, in the same transaction. So a
// downstream task reads the elements of segment i, then the watermark of
// segment i, then the elements of segment i+1, which are late exactly when
// the stream says so, however the records were batched. The event index
// lives in the record (and so in the committed offset), never in separate
// state.
//
// Watermarks. Segment i's watermark is the last AdvanceWatermark at or
// before its end (mtime.MinTimestamp before any); the last segment ends at
// the end of time (mtime.MaxTimestamp) whatever the script says, like
// Prism's final event: a bounded job finishes. The stage's output watermark
// is exactly the segment's watermark (its input watermark is the end of
// time, as for Impulse).
//
// Processing time. AdvanceProcessingTime ends a segment (the elements after
// it commit in a later transaction) and moves the job clock, as Prism's one
// synthetic processing-time clock for the whole job: a job with a
// TestStream runs its stages with step.Config.JobClock, the head is a
// step.JobClockSource (the clock after segment i is the sum of the
// advances up to its end, from 0), every report carries the clock after
// the data it covers, and downstream heads that read processing time
// (AfterProcessingTime triggers, processing-time timers) take the minimum
// over their input partitions' reports instead of their wall clock. So a
// trigger set at the clock of its element fires at the report that moves
// the clock past its deadline, before the next segment's elements arrive,
// however the records were batched; each stage still runs on its own
// process.
//
// It may import stage/step, stage/fnapi and the Beam Go SDK; not the loop
// shell (stage), a Kafka client nor runner (stage/archtest).
package teststream

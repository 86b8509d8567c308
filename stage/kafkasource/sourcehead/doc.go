// Package sourcehead is the shell of a Kafka source stage: Head, the
// step.Head (and step.LogEnds, step.Drainer, step.Reachability,
// step.WatermarkAhead) of a
// stage that reads a user's topic directly, one task per partition, on the
// pure core of stage/kafkasource (each partition's watermark generator,
// Reading, alignment).
//
// Head turns each record into an element KV<key, value> at its event time
// (the Kafka timestamp, or kafkaio.WithTimestampFn's), feeds the
// partition's generator, and gives the step Hold = the partition's
// watermark, Idle, a Wake when a partition goes idle or a bounded read
// reaches its end, and the per-partition details of the reports (Source).
// Its clock is injected (HeadConfig.Clock). The rules it keeps (when a
// partition is idle, alignment) are written in stage/kafkasource's doc.
//
// Files:
//
//   - head.go: HeadConfig, Head and the step.Head methods (Assign, Revoke,
//     Element, Hold, Prepare, Committed, Aborted), Drain, and
//     WatermarkWith (step.WatermarkAhead: a partition's watermark with a
//     polled record's timestamp, before the step takes it).
//   - idleness.go: what the clock and the broker's answers make of a
//     quiet partition: Idle, the log ends asked and answered
//     (step.LogEnds), reachability (step.Reachability), a bounded read's
//     end (ReachedEnd), Wake and the reports' Source.
//   - align.go: watermark alignment (Pause).
//
// It may import stage/step, stage/kafkasource, proto and the Beam SDK's
// mtime, never package stage nor a Kafka client (stage/archtest).
// It lives apart from the core so that runner/kafkaio, which uses the
// core's Strategy and Partition, does not link stage/step.
package sourcehead

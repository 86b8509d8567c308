// Package sourcehead is the shell of a Kafka source stage: Head, the
// step.Head (and step.LogEnds, step.Drainer, step.Reachability) of a
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
// It may import stage, stage/kafkasource, proto and the Beam SDK's mtime.
// It lives apart from the core so that runner/kafkaio, which uses the
// core's Strategy and Partition, does not link package stage.
package sourcehead

// Package runner is the kafkastreams Beam runner: it registers
// --runner=kafkastreams, parses the runner's flags, turns a pipeline proto into a
// plan (fusion into ExecutableStages and one Kafka topic per edge between stages),
// runs this instance's share of the plan, and returns a beam.PipelineResult.
//
// It may import stage, watermarkmgr, proto and the Beam Go SDK; nothing in the
// project imports runner except cmd and integration.
package runner

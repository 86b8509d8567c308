// Package runner is the kafkastreams Beam runner: it registers
// --runner=kafkastreams, parses the runner's flags, turns a pipeline proto into a
// plan (fusion into ExecutableStages and one Kafka topic per edge between stages),
// runs this instance's share of the plan, and returns a beam.PipelineResult.
//
// Where things are: execute (runner.go) plans and checks the pipeline
// (prepare.go), creates the topics and records the plan; run (run.go) is
// the lifecycle (the WatermarkManager, the loops, the page, drains, the
// wait and the Result); assemble.go builds each stage's loop config whole.
// Each head kind (plan.HeadKind) has one file, kind_<name>.go, registering
// a headKind (kinds.go): what it checks before any topic exists, what it
// needs (a changelog, users' topics, records the plan transaction writes,
// the job clock) and how it builds its head, consumer settings and
// metrics. Nothing outside its kind file asks which kind a stage has; a
// kind is supported iff it is registered (Supported).
//
// It may import stage and its subpackages, watermarkmgr, proto, the Beam
// Go SDK, confluent-kafka-go and the Prometheus client; nothing in the
// project imports runner except cmd and integration.
package runner

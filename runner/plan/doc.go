// Package plan turns a Beam pipeline proto into the plan every instance of a
// kafkastreams application runs: the fused ExecutableStages, the runner-side
// transform at the head of each, and one Kafka topic per stage input. It is a
// pure function of the pipeline and the options (no Kafka, no clock, no
// goroutines): every instance derives the same plan, and Diff says how two
// plans differ so an instance with a different plan can refuse to start.
//
// Fusion rule (../shared/DESIGN.md, "Execution model"): a stage boundary is
// wherever data must be re-partitioned or the runner itself acts. A stage is a
// head (Impulse, GroupByKey, Reshuffle, Flatten, TestStream, and the
// ParDos below: HeadKind) reading the stage's input
// topic, followed by every SDK transform (ParDo, WindowInto, …) reachable from
// the head's output through SDK transforms only. Every edge from a stage to a
// boundary transform becomes a write to that consumer stage's input topic; so
// a Flatten's inputs all write to the Flatten stage's one topic, and a
// PCollection consumed by two boundaries is written to both topics.
//
// Stateful ParDos (HeadStateful): a ParDo with user state or timers starts
// a stage of its own whose input topic is keyed like a GroupByKey's, so
// that every element of a key reaches the one task that keeps the key's
// state and timers.
//
// Splittable DoFns that may checkpoint (splittable.go, HeadSplittable): Build
// first rewrites each splittable ParDo with an unbounded output (the Go SDK's
// mark of a DoFn returning a ProcessContinuation) into its pair, split and
// process steps; pair and split fuse upstream, and the process step heads a
// stage of its own, so that the harness can hand checkpoints back as
// residuals, which the stage keeps in its state.
//
// Side inputs (SideInput): a PCollection read as a side input is an edge from
// its producer's stage to a one-partition topic of the reading stage. A ParDo
// with side inputs is fused like any SDK transform unless that would make its
// stage wait on itself or hold back records it cannot (fuseSideInputs); then
// it starts a HeadSideInputs stage, a passthrough topic hop. The stage graph,
// side edges included, is acyclic.
//
// Kafka sources and sinks (native.go): a ParDo whose DoFn is a NativeSource
// (runner/kafkaio.Read) heads a HeadKafkaSource stage whose input topic is
// the user's topic, read directly (Partitions 0 in the plan: the broker's
// count, which may grow); the Impulse feeding it is dropped. A ParDo whose
// DoFn is a NativeSink (kafkaio.Write) is not executed: the stage producing
// its input writes the elements to the user's topic (Stage.KafkaSinks).
// Users' topics are not internal topics (Topics).
//
// Combiner lifting (combine.go): Build first rewrites each liftable
// combine_per_key composite of the pipeline in place into a precombine
// (fused after its input's producer), a GroupByKey of KV<K, accumulator>
// (a stage head) and merge-accumulators and extract-outputs fused after it,
// so the combine's topic carries one accumulator per key, window and
// bundle, not every value. Its ids and names derive from the composite's,
// so every instance derives the same plan; a combine that may not lift
// (element-count triggers, a timestamp combiner other than the end of the
// window, taken ids) runs its unlifted expansion.
//
// Files: plan.go the Plan and its Stages, Options, the URNs and errors;
// kind.go HeadKind, the head kinds and what each is on the plan side (its
// predicates: Keyed, Source, OnePartition, UserTopic, Passthrough; the
// URNs that are heads); build.go Build, the fusion walk and its side-input
// rule; transforms.go reading the pipeline's transforms (leaves, order,
// inputs, what is supported); combine.go, splittable.go and native.go as
// above; diff.go the recorded form (Encode, Decode) and Diff.
//
// It may import the Beam model protos, and the Go SDK's graphx to decode Go
// DoFns (NativeDoFn).
package plan

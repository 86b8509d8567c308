package plan

// HeadKind is what the runner does at the head of a stage, before the fused
// SDK transforms.
type HeadKind string

// Head kinds.
const (
	// HeadImpulse: the stage's input topic has one partition holding one
	// record, written when the plan is first recorded; the head turns it into
	// the impulse element (empty bytes, global window, mtime.MinTimestamp) and
	// then reports the end of time.
	HeadImpulse HeadKind = "impulse"
	// HeadGroupByKey: runner-side GroupByKey over keyed records.
	HeadGroupByKey HeadKind = "group_by_key"
	// HeadReshuffle: the topic hop is the reshuffle; elements pass unchanged.
	HeadReshuffle HeadKind = "reshuffle"
	// HeadFlatten: every input of the Flatten writes to the stage's topic;
	// elements pass unchanged.
	HeadFlatten HeadKind = "flatten"
	// HeadSideInputs: a fusion break before a ParDo with side inputs that
	// cannot run in its main input's stage (see Build); the ParDo's main
	// input crosses the stage's topic unchanged and the ParDo is the first
	// fused transform (HeadTransform is the ParDo; HeadOutput its main input).
	HeadSideInputs HeadKind = "side_inputs"
	// HeadStateful: a ParDo with user state or timers (state specs or
	// timer family specs in its ParDoPayload) starts a stage whose input
	// topic is keyed like a GroupByKey's (the ParDo's main input is KV;
	// equal keys meet on one task): Beam's state and timers are per key and
	// window, so one task must own every element of a key. The ParDo's
	// main input crosses the topic unchanged; the ParDo is the first fused
	// transform (HeadTransform is the ParDo; HeadOutput its main input), and
	// the stage's head keeps the state and timers (stage/userstate).
	HeadStateful HeadKind = "stateful"
	// HeadTestStream: like HeadImpulse, a one-partition input topic written
	// with the plan, here one record per segment of the TestStream's events
	// (stage/teststream); the head replays each segment's elements and
	// reports the watermark the stream declares right after them (a
	// watermark point, step.Work.Point), and the end of time after the
	// last.
	HeadTestStream HeadKind = "teststream"
	// HeadKafkaSource: a ParDo whose DoFn is a NativeSource (a
	// runner/kafkaio.Read) heads a stage whose input topic is the user's
	// topic, read directly: one task per partition of it, offsets
	// committed in the stage's transactions (KIP-447), the records turned
	// into elements with the source's watermark strategy
	// (stage/kafkasource). Partitions is 0 in the plan: the topic's count,
	// which may grow while the job runs, is the broker's.
	HeadKafkaSource HeadKind = "kafka_source"
	// HeadSplittable: the process step of a splittable ParDo that may
	// checkpoint (an unbounded one: periodic.Impulse, a self-checkpointing
	// read) heads a stage; its pair-with-restriction and split steps fuse
	// upstream (splitUnboundedSDFs) and the stage's input topic carries the
	// sized restrictions, so the process step is fed by the data source and
	// the harness hands checkpoints back as residuals. The head
	// (stage/splittable) keeps each task's residuals in its state store,
	// committed with the transaction, resumes them when their delay has
	// passed, and holds the output watermark at their watermark estimates.
	// HeadTransform is the process step; HeadOutput its input.
	HeadSplittable HeadKind = "splittable"
)

// Keyed reports whether a stage with this head reads a keyed topic: its
// upstreams write each element with its encoded Beam key as the record key,
// on the partition step.KeyPartition names, so equal keys meet on one task
// (GroupByKey, stateful ParDo).
func (k HeadKind) Keyed() bool { return k == HeadGroupByKey || k == HeadStateful }

// Source reports whether a stage with this head has no upstream stage
// and reads raw records, not Envelopes from upstream stages: records the
// plan transaction wrote (OnePartition: Impulse, TestStream) or a user's
// topic (UserTopic: a Kafka source).
func (k HeadKind) Source() bool { return k.OnePartition() || k.UserTopic() }

// OnePartition reports whether a stage with this head reads a
// one-partition input topic that the plan transaction writes when it
// records the plan (Impulse, TestStream): one task, whatever
// Options.Partitions, and its input is complete once read.
func (k HeadKind) OnePartition() bool { return k == HeadImpulse || k == HeadTestStream }

// UserTopic reports whether a stage with this head reads a user's topic
// directly (Kafka source): its input topic is not an internal topic
// (Plan.Topics), no stage of the plan writes to it, and its partition
// count is the broker's (Stage.Partitions is 0).
func (k HeadKind) UserTopic() bool { return k == HeadKafkaSource }

// Passthrough reports whether a stage with this head hands the records of
// a task to the bundle one element per record, with no runner-side state:
// a task can stop at any record and read it again later. Only these heads
// can precede a ParDo with side inputs in a stage, because the task holds
// back main-input records whose side input is not ready (see SideInput,
// fuseSideInputs).
func (k HeadKind) Passthrough() bool {
	switch k {
	case HeadImpulse, HeadReshuffle, HeadFlatten, HeadSideInputs:
		return true
	}
	return false
}

// headKind returns the kind of the stage a transform of this URN heads,
// if the URN alone makes it a head; the kinds a ParDo heads are decided
// by Build from its payload (HeadKafkaSource, HeadStateful,
// HeadSplittable, HeadSideInputs).
func headKind(urn string) (HeadKind, bool) {
	switch urn {
	case URNImpulse:
		return HeadImpulse, true
	case URNGroupByKey:
		return HeadGroupByKey, true
	case URNReshuffle, URNRedistributeArbitrary, URNRedistributeByKey:
		return HeadReshuffle, true
	case URNFlatten:
		return HeadFlatten, true
	case URNTestStream:
		return HeadTestStream, true
	}
	return "", false
}

package step

import (
	"context"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
)

// Spec is what a Loop runs: one ExecutableStage of the plan, narrowed to
// what the stage package needs (the runner builds it from runner/plan).
type Spec struct {
	// ApplicationID prefixes the consumer group and the transactional id,
	// and is the value of envelope.WriterHeader on every record of reports
	// the stage writes and reads (Untrusted).
	ApplicationID string
	// Name is the stage's name: the consumer group is
	// "<ApplicationID>.<Name>", reports carry it.
	Name string
	// InputTopic is read by the stage's tasks, one task per partition;
	// Partitions is its partition count (totalSourcePartitions of the
	// stage's reports).
	InputTopic string
	Partitions int32
	// GrowingInput says InputTopic is a user's topic whose partition count
	// may grow while the job runs (Kafka partitions are only ever added):
	// the Loop asks for the count every PartitionCheck (500 ms) and on an
	// assignment of a partition beyond it, and every task's next report
	// carries the new total, which re-opens the downstream hold until the
	// new partitions have reported (seed 000).
	GrowingInput bool
	// RawInput says the input records are not Envelopes: every record is an
	// element record for the head as it is (a source stage: Impulse,
	// TestStream, whose records the plan transaction wrote). Such a stage
	// has no Upstreams.
	RawInput bool
	// Upstreams are the stages whose reports arrive on InputTopic, sorted.
	// A task's input watermark is the minimum over them; with none it is
	// the end of time (the input is complete once read).
	Upstreams []string
	// HeadOutput is the PCollection the head produces.
	HeadOutput string
	// CheckElement, if non-nil, returns nil if an element record's element
	// (the Envelope's, as read from InputTopic; never a RawInput record)
	// is exactly one element of the PCollection written to InputTopic in
	// its wire coding (fnapi.WireElements.Check). Decide checks every
	// element record with it before the head sees it: an element that is
	// not fails as ErrUndecodable naming the record (issue 23: a
	// well-formed Envelope with garbage element bytes, which the SDK
	// harness could read together with its neighbours or drop unseen).
	CheckElement func(element []byte) error
	// Outputs are the PCollections the stage writes, and where.
	Outputs []Output
	// Sinks are users' topics the stage writes plain records to
	// (runner/kafkaio.Write); no report goes there.
	Sinks []Sink
}

// Sink is a user's topic a stage writes the elements of a PCollection to,
// as plain records, in its transactions.
type Sink struct {
	PCollection string
	Topic       string
	// Partitions of Topic: a record with a key goes to
	// javapartition.ForKey(key, Partitions), as the Java client's default
	// partitioner would put it; a record without a key to AnyPartition.
	Partitions int32
	// Decode turns an element (encoded with the PCollection's wire coder)
	// into the record to write (Key nil: a null key; Value nil: a
	// tombstone) and its event time (the record's timestamp). Required.
	Decode func(element []byte) (SinkRecord, error)
	// TimestampAfterMax is how far ahead of the wall clock Topic takes a
	// record's timestamp (its message.timestamp.after.max.ms;
	// recordtime.NoTimestampLimit for none): a record whose event time is
	// further ahead is written with the time of writing
	// (recordtime.For; Ready.TimestampsAhead). Zero refuses
	// every timestamp ahead of now; runner's sinkSpecs sets it from the
	// topic's configuration.
	TimestampAfterMax time.Duration
}

// SinkRecord is what a Sink writes of one element: Key (nil: Kafka's
// null, which the producer's partitioner places; otherwise the Java
// client's partition for it, empty too), Value (nil: a tombstone), Headers
// in order, and EventTime, the record's timestamp when Kafka takes it
// (recordtime.For).
type SinkRecord struct {
	Key, Value []byte
	Headers    []Header
	EventTime  mtime.Time
}

// Output is one PCollection a stage writes, to one or more topics.
type Output struct {
	PCollection string
	Topics      []OutputTopic
	// IntervalWindows: the PCollection's window coder is Beam's interval
	// window coder (beam:coder:interval_window:v1), so an element may be
	// in several windows (sliding windows). Each such element is written
	// as one record per window (ExplodeWindows), as the Beam model counts
	// it (a value in N windows is N elements) and as Prism stores a
	// stage's outputs; otherwise a downstream WindowInto, which the Go SDK
	// (exec.WindowInto) assigns from the timestamp alone, would make N
	// elements one.
	IntervalWindows bool
}

// OutputTopic is one topic an Output goes to.
type OutputTopic struct {
	Name       string
	Partitions int32
	// Keyed: the topic is a keyed stage's input (GroupByKey, stateful
	// ParDo): a record's Kafka key is the element's encoded Beam key and
	// its partition KeyPartition(key, Partitions), so equal keys meet on
	// one task. Otherwise records go round-robin, without a key.
	Keyed bool
	// Copies is how many times each element is written (2 when a Flatten
	// takes the same PCollection twice). At least 1.
	Copies int
}

// In is one input record of a batch, as polled: its task (input
// partition), offset, Kafka key and value, timestamp and headers. Head.Element
// gets it with Value replaced by the element for an Envelope record.
type In struct {
	Task   int32
	Offset int64
	Key    []byte
	Value  []byte
	// Timestamp is the record's Kafka timestamp (ms since the Unix epoch;
	// -1 if it has none: Kafka's NO_TIMESTAMP, a record of the message
	// format before timestamps, which a Kafka 4 broker no longer writes;
	// 0 is a timestamp, the epoch); LogAppendTime says the broker set it
	// (the topic's message.timestamp.type=LogAppendTime), else the
	// producer did (CreateTime).
	Timestamp     int64
	LogAppendTime bool
	// Headers are the record's headers, in order.
	Headers []Header
	// Skip sets the record aside: the step gives it to no head and no
	// bundle, and only moves its task's offset past it (the task is
	// touched: advanced and reported at the end of the attempt like any
	// other). The loop sets it on an input record whose bundle failed
	// alone in its attempt every time, which it writes to the dead-letter
	// topic in the same transaction (stage.Config.ErrorPolicy). Only an
	// element record can be skipped: Decide refuses a skipped record that
	// holds watermark reports (they are the stream's order, not data).
	Skip bool
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Offset is the offset a task commits with the attempt (the next record
// to read) and its checkpoint (TaskCheckpoint, base64), the consumed
// offset's metadata.
type Offset struct {
	Task     int32
	Next     int64
	Metadata string
}

// Bundle is what Process returns for one bundle.
type Bundle struct {
	// Outputs holds the encoded elements the bundle produced, by PCollection
	// id, each encoded with the PCollection's windowed-value wire coder.
	Outputs map[string][][]byte
	// Extra are records the bundle adds to its transaction besides its
	// outputs (the runner's: the bundle's metrics, for the application's
	// metrics topic), produced after the outputs, in order.
	Extra []Record
	// Committed, if set, is called once the transaction carrying the bundle's
	// outputs has committed (e.g. to add its metrics to the job's committed
	// metrics); never for an aborted bundle.
	Committed func()
	// Timers are the timers the bundle set or cleared, by family, in the
	// harness's order (the last of a (key, window, tag) wins); the step
	// hands them to the head (Head.Results).
	Timers map[fnapi.TimerFamilyID][]fnapi.Timer
	// Residuals are the splittable DoFn checkpoints the bundle returned
	// (the rest of a restriction to resume later); the step hands them to
	// the head with the rest of the bundle (Head.Results), and only a
	// splittable stage's head (plan.HeadSplittable) keeps them. A
	// ProcessFunc of another stage fails a bundle that returns any: they
	// must not be dropped.
	Residuals []fnapi.Residual
}

// Record is one Kafka record for a transaction: its topic, partition (>= 0;
// AnyPartition lets the producer's partitioner choose), key and value (nil
// is Kafka's null, kept apart from empty), timestamp (zero: the
// producer's clock, Kafka's CreateTime now) and headers (a sink's, in
// order).
type Record struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
	Timestamp time.Time
	Headers   []Header
}

// ProcessFunc runs one bundle of the stage's fused SDK transforms over the
// work's elements (encoded with the head output's wire coder) and timers.
// It must not keep them after it returns. Outputs go to emit as the bundle
// makes them, or in the returned Bundle.Outputs (after everything emitted),
// or both. An error aborts the transaction; the records are read again and
// retried.
type ProcessFunc func(ctx context.Context, w Work, emit Emit) (*Bundle, error)

// Emit takes elements of one of a stage's PCollections while its bundle
// runs: each encoded with the PCollection's windowed-value wire coder, in
// the order made. The elements' memory must stay untouched afterwards (the
// step's records may point into it until the transaction takes them). An
// error must fail the bundle.
type Emit func(pcollection string, elements [][]byte) error

// SideInputGate says whether an element of a stage's head output may enter a
// bundle: every side input window it reads is complete (see package
// stage/sideinput, whose Set implements it). Safe for concurrent use.
type SideInputGate interface {
	// Ready reports whether element (encoded with the head output's wire
	// coder) may be processed now. An error is the stage's error.
	Ready(element []byte) (bool, error)
	// Changed returns a channel closed the next time readiness may have
	// changed (a side watermark moved), after the change is visible to
	// Ready. A waiter fetches it before it calls Ready and waits on the
	// channel it fetched: one fetched after the check may be the next
	// one already, and the change between them is lost (issue 24: the
	// stage loop arms it before Step.Decide).
	Changed() <-chan struct{}
	// Waiting describes what the side inputs wait for, for logs.
	Waiting() string
}

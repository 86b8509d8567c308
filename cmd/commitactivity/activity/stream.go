package activity

import (
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// The streaming job's event-time settings (StreamOptions' defaults).
const (
	// StreamOutOfOrderness is the source's bounded out-of-orderness: each
	// partition's watermark trails the largest event time it has read by
	// 30 days, so a row more than 30 days behind the newest row of its
	// partition (and of every other partition: the watermark is their
	// minimum) may find its window fired.
	StreamOutOfOrderness = 30 * 24 * time.Hour
	// StreamIdleness: a source partition without a record for this long
	// is left out of the watermark's minimum until its next record.
	StreamIdleness = 3 * time.Second
	// StreamAllowedLateness: a row up to 365 days behind the watermark
	// (past its window's end) still fires a late pane; a row further
	// behind is dropped, and counted by the runner (Result.LateDropped).
	StreamAllowedLateness = 365 * 24 * time.Hour
	// StreamPartitions is the input topic's partition count.
	StreamPartitions = 4
)

// StreamCSVHeader names the columns of the streaming job's output rows:
// CSVHeader's and PaneColumns.
const StreamCSVHeader = CSVHeader + "," + PaneColumns

// StreamOptions say what the streaming job reads and writes.
type StreamOptions struct {
	// InputTopic holds git-commits.csv as Load writes it: a row per
	// record, in the record's value, at its event time (CreateTime).
	InputTopic string
	// OutputTopic receives a plain record per output row of every pane:
	// the row (StreamCSVHeader) as value, no key, the pane's timestamp.
	// It must exist (TopicSpec).
	OutputTopic string
	// OutOfOrderness, Idleness: the source's watermark strategy
	// (kafkaio.WithBoundedOutOfOrderness, kafkaio.WithIdleness).
	OutOfOrderness, Idleness time.Duration
	// AllowedLateness of every window (Windowing.AllowedLateness).
	AllowedLateness time.Duration
}

// DefaultStreamOptions are the options of `make run-stream`: the
// Stream* constants.
func DefaultStreamOptions(in, out string) StreamOptions {
	return StreamOptions{InputTopic: in, OutputTopic: out, OutOfOrderness: StreamOutOfOrderness, Idleness: StreamIdleness, AllowedLateness: StreamAllowedLateness}
}

// StreamWindowing is the streaming job's Windowing: accumulating panes, so
// that the last pane of a window is its whole total (a reader keeps the
// latest pane of each window and key), and pane columns on every row.
func StreamWindowing(allowedLateness time.Duration) Windowing {
	return Windowing{AllowedLateness: allowedLateness, Accumulate: true, Panes: true}
}

// BuildStream adds the streaming job to s and returns its output rows
// (StreamCSVHeader): a bounded kafkaio.Read of InputTopic (each record at
// its Kafka timestamp, the row's event time; the watermark from the
// options) -> the record's value -> Parse -> Windows(StreamWindowing) ->
// kafkaio.Write to OutputTopic, in the transactions of the stage that
// makes the rows.
func BuildStream(s beam.Scope, o StreamOptions) beam.PCollection {
	recs := kafkaio.Read(s, o.InputTopic, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(o.OutOfOrderness), kafkaio.WithIdleness(o.Idleness))
	lines := beam.ParDo(s.Scope("Value"), recordValueFn, recs)
	rows := Windows(s, Parse(s, lines), StreamWindowing(o.AllowedLateness))
	kafkaio.Write(s, o.OutputTopic, beam.ParDo(s.Scope("Bytes"), rowBytesFn, rows))
	return rows
}

// StreamPipeline is BuildStream in a new pipeline.
func StreamPipeline(o StreamOptions) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	BuildStream(s, o)
	return p
}

// recordValueFn is a record's value as a line of git-commits.csv.
func recordValueFn(_, value []byte) string { return string(value) }

// rowBytesFn is an output row as a record's value.
func rowBytesFn(row string) []byte { return []byte(row) }

func init() {
	register.Function2x1(recordValueFn)
	register.Function1x1(rowBytesFn)
}

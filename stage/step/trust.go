package step

import (
	"errors"
	"fmt"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// Untrusted is an input record of an internal topic that an attempt
// skipped because the application's runner did not write it as it stands
// (the rules are stage/envelope's trust.go): a value that is not an
// Envelope, a record of reports without the application's
// envelope.WriterHeader, or a report the task's WatermarkManager refuses
// (a stage that is not an upstream of this one in the plan, a partition
// out of range, a bad total). A skipped record is consumed like any
// other: the attempt commits the offset past it (exactly once is kept:
// it is never read again, and nothing was made from it), so it fails no
// owner of the task, now or after a restart. The Loop logs and counts it
// (kafkastreams_untrusted_records_total) once the attempt committed.
type Untrusted struct {
	// Task is the input partition, Offset the record's offset.
	Task   int32
	Offset int64
	// Reports is how many of the record's reports were refused (0 for a
	// record skipped whole); the others were applied.
	Reports int
	// Reason says what was wrong.
	Reason string
}

// writerHeaders are the headers of every record of reports a step writes:
// envelope.WriterHeader with the application id.
func writerHeaders(app string) []Header {
	return []Header{{Key: envelope.WriterHeader, Value: []byte(app)}}
}

// decode reads input record m of an internal topic (not Spec.RawInput):
// its element, or its reports when m carries the application's
// envelope.WriterHeader; a non-empty reason (and neither) says why the
// record is to be skipped (Untrusted).
func (s *Step) decode(m In) (element []byte, reports []*pb.WatermarkReport, reason string) {
	e, r, err := envelope.Decode(m.Value)
	switch {
	case errors.Is(err, envelope.ErrEmpty):
		return nil, nil, "an empty Envelope"
	case err != nil:
		return nil, nil, fmt.Sprintf("not an Envelope (%v)", err)
	case e == nil && !envelope.FromApplication(m.Headers, s.spec.ApplicationID):
		return nil, nil, fmt.Sprintf("watermark reports without the header %s=%q: not written by this application's runner", envelope.WriterHeader, s.spec.ApplicationID)
	}
	return e, r, ""
}

// skip records input record m as skipped for reason (Ready.Untrusted);
// reports is how many of its reports were refused, 0 for all of it.
func (a *attempt) skip(m In, reports int, reason string) {
	a.ready.Untrusted = append(a.ready.Untrusted, Untrusted{Task: m.Task, Offset: m.Offset, Reports: reports, Reason: reason})
}

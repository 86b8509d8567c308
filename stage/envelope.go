package stage

import (
	"errors"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

// envelopeElementField is Envelope.element's field number (proto/
// kafkastreams/v1: `bytes element = 1`, in the payload oneof).
const envelopeElementField protowire.Number = 1

// errEmptyEnvelope: an Envelope record with neither an element nor a
// report (a batch of reports with none in it counts as none).
var errEmptyEnvelope = errors.New("stage: empty Envelope")

// encodeElement returns the Envelope record value of element e: the bytes
// proto.Marshal gives for Envelope{Payload: Element{e}} (the tag of field
// 1, wire type bytes, then e with its length; TestEnvelopeCodec), in one
// allocation and without reflection: every element a stage writes passes
// here.
func encodeElement(e []byte) []byte {
	b := make([]byte, 0, 1+protowire.SizeVarint(uint64(len(e)))+len(e))
	b = protowire.AppendTag(b, envelopeElementField, protowire.BytesType)
	return protowire.AppendBytes(b, e)
}

// envelopeChunk is the size of the chunks appendElement cuts envelopes
// from: one allocation for a few hundred small elements instead of one
// each.
const envelopeChunk = 64 << 10

// appendElement returns encodeElement(e), cut from the free end of *arena
// (a chunk of envelopeChunk bytes, a new one when the envelope does not
// fit; an envelope over a quarter chunk gets its own allocation). Values
// already returned stay valid: a chunk is never written twice.
func appendElement(arena *[]byte, e []byte) []byte {
	n := 1 + protowire.SizeVarint(uint64(len(e))) + len(e)
	if n > envelopeChunk/4 {
		return encodeElement(e)
	}
	if cap(*arena)-len(*arena) < n {
		*arena = make([]byte, 0, envelopeChunk)
	}
	b := *arena
	start := len(b)
	b = protowire.AppendTag(b, envelopeElementField, protowire.BytesType)
	b = protowire.AppendBytes(b, e)
	*arena = b
	return b[start:len(b):len(b)]
}

// decodeEnvelope decodes an Envelope record value: its element (a slice of
// v, not a copy: ok for the attempt, which ends before the record's
// memory is reused) or its reports, in order (one for a `report`, the
// batch's for `reports`); exactly one of the two is set, or err says what
// is wrong (errEmptyEnvelope for neither, or a batch of no report). A
// value that is exactly one element field, what every writer of this
// runner sends (encodeElement), is read without proto.Unmarshal; anything
// else (reports, or an element encoded some other valid way) goes
// through it, with the same result.
func decodeEnvelope(v []byte) (element []byte, reports []*pb.WatermarkReport, err error) {
	if num, typ, n := protowire.ConsumeTag(v); n > 0 && num == envelopeElementField && typ == protowire.BytesType {
		if e, m := protowire.ConsumeBytes(v[n:]); m > 0 && n+m == len(v) {
			if e == nil {
				e = []byte{}
			}
			return e, nil, nil
		}
	}
	env := &pb.Envelope{}
	if err := proto.Unmarshal(v, env); err != nil {
		return nil, nil, err
	}
	switch p := env.Payload.(type) {
	case *pb.Envelope_Element:
		if p.Element == nil {
			return []byte{}, nil, nil
		}
		return p.Element, nil, nil
	case *pb.Envelope_Report:
		if p.Report == nil {
			// proto.Unmarshal leaves an empty message, never nil; a
			// value built by hand could.
			return nil, nil, errEmptyEnvelope
		}
		return nil, []*pb.WatermarkReport{p.Report}, nil
	case *pb.Envelope_Reports:
		rs := p.Reports.GetReports()
		if len(rs) == 0 {
			return nil, nil, errEmptyEnvelope
		}
		return nil, rs, nil
	}
	return nil, nil, errEmptyEnvelope
}

// reportsEndOfTime reports whether v, an Envelope record value, carries a
// watermark report at the end of time (committed_watermark_millis at
// mtime.MaxTimestamp: the reporting task is done). An element record (the
// fast path of decodeEnvelope, without proto.Unmarshal) or a value that
// does not decode is false.
func reportsEndOfTime(v []byte) bool {
	e, rs, err := decodeEnvelope(v)
	if err != nil || e != nil {
		return false
	}
	for _, r := range rs {
		if mtime.Time(r.GetCommittedWatermarkMillis()) >= mtime.MaxTimestamp {
			return true
		}
	}
	return false
}

// encodeReports returns the Envelope record value of a batch of reports
// (Envelope.reports), in the order given.
func encodeReports(rs []*pb.WatermarkReport) []byte {
	v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Reports{Reports: &pb.WatermarkReports{Reports: rs}}})
	return v
}

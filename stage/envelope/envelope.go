// Package envelope is the codec of the Envelope records of the runner's
// internal topics (proto/kafkastreams/v1 Envelope: an element, a watermark
// report, or a batch of reports): the stage loop's writer and reader and
// the side inputs' reader use it, so both read a record the same way.
//
// It imports protobuf, the generated proto package and the standard library
// only: no Kafka client, nothing of stage.
package envelope

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

// elementField is Envelope.element's field number (proto/
// kafkastreams/v1: `bytes element = 1`, in the payload oneof).
const elementField protowire.Number = 1

// ErrEmpty: an Envelope record with neither an element nor a
// report (a batch of reports with none in it counts as none).
var ErrEmpty = errors.New("envelope: empty Envelope")

// EncodeElement returns the Envelope record value of element e: the bytes
// proto.Marshal gives for Envelope{Payload: Element{e}} (the tag of field
// 1, wire type bytes, then e with its length; TestEnvelopeCodec), in one
// allocation and without reflection: every element a stage writes passes
// here.
func EncodeElement(e []byte) []byte {
	b := make([]byte, 0, 1+protowire.SizeVarint(uint64(len(e)))+len(e))
	b = protowire.AppendTag(b, elementField, protowire.BytesType)
	return protowire.AppendBytes(b, e)
}

// chunk is the size of the chunks AppendElement cuts envelopes
// from: one allocation for a few hundred small elements instead of one
// each.
const chunk = 64 << 10

// AppendElement returns EncodeElement(e), cut from the free end of *arena
// (a chunk of chunk bytes, a new one when the envelope does not
// fit; an envelope over a quarter chunk gets its own allocation). Values
// already returned stay valid: a chunk is never written twice.
func AppendElement(arena *[]byte, e []byte) []byte {
	n := 1 + protowire.SizeVarint(uint64(len(e))) + len(e)
	if n > chunk/4 {
		return EncodeElement(e)
	}
	if cap(*arena)-len(*arena) < n {
		*arena = make([]byte, 0, chunk)
	}
	b := *arena
	start := len(b)
	b = protowire.AppendTag(b, elementField, protowire.BytesType)
	b = protowire.AppendBytes(b, e)
	*arena = b
	return b[start:len(b):len(b)]
}

// Decode decodes an Envelope record value: its element (a slice of
// v, not a copy: ok for the attempt, which ends before the record's
// memory is reused) or its reports, in order (one for a `report`, the
// batch's for `reports`); exactly one of the two is set, or err says what
// is wrong (ErrEmpty for neither, or a batch of no report). A
// value that is exactly one element field, what every writer of this
// runner sends (EncodeElement), is read without proto.Unmarshal; anything
// else (reports, or an element encoded some other valid way) goes
// through it, with the same result.
func Decode(v []byte) (element []byte, reports []*pb.WatermarkReport, err error) {
	if num, typ, n := protowire.ConsumeTag(v); n > 0 && num == elementField && typ == protowire.BytesType {
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
			return nil, nil, ErrEmpty
		}
		return nil, []*pb.WatermarkReport{p.Report}, nil
	case *pb.Envelope_Reports:
		rs := p.Reports.GetReports()
		if len(rs) == 0 {
			return nil, nil, ErrEmpty
		}
		return nil, rs, nil
	}
	return nil, nil, ErrEmpty
}

// EncodeReports returns the Envelope record value of a batch of reports
// (Envelope.reports), in the order given.
func EncodeReports(rs []*pb.WatermarkReport) []byte {
	v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Reports{Reports: &pb.WatermarkReports{Reports: rs}}})
	return v
}

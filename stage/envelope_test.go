package stage

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

// TestEnvelopeCodec: encodeElement gives proto.Marshal's bytes, and
// decodeEnvelope reads them back, at lengths around the varint steps.
func TestEnvelopeCodec(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 100000} {
		e := []byte(strings.Repeat("e", n))
		want, err := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Element{Element: e}})
		if err != nil {
			t.Fatal(err)
		}
		got := encodeElement(e)
		if !bytes.Equal(got, want) {
			t.Fatalf("encodeElement of %d bytes: %x..., proto.Marshal: %x...", n, got[:min(8, len(got))], want[:min(8, len(want))])
		}
		el, rep, err := decodeEnvelope(got)
		if err != nil || rep != nil || el == nil || !bytes.Equal(el, e) {
			t.Fatalf("decodeEnvelope of an element of %d bytes: %d bytes, report %v, err %v", n, len(el), rep, err)
		}
	}
	r := &pb.WatermarkReport{Stage: "s0", SourcePartition: 2, CommittedWatermarkMillis: 77, TotalSourcePartitions: 4}
	v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: r}})
	if el, reps, err := decodeEnvelope(v); err != nil || el != nil || len(reps) != 1 || !proto.Equal(reps[0], r) {
		t.Fatalf("decodeEnvelope of a report: element %v, reports %v, err %v", el, reps, err)
	}
	r2 := &pb.WatermarkReport{Stage: "s0", SourcePartition: 0, CommittedWatermarkMillis: 70, TotalSourcePartitions: 4, Idle: true}
	batch := encodeReports([]*pb.WatermarkReport{r, r2})
	if el, reps, err := decodeEnvelope(batch); err != nil || el != nil || len(reps) != 2 || !proto.Equal(reps[0], r) || !proto.Equal(reps[1], r2) {
		t.Fatalf("decodeEnvelope of a batch of two reports: element %v, reports %v, err %v", el, reps, err)
	}
	if _, _, err := decodeEnvelope(encodeReports(nil)); !errors.Is(err, errEmptyEnvelope) {
		t.Fatalf("decodeEnvelope of a batch of no report: err %v, want errEmptyEnvelope", err)
	}
	if _, _, err := decodeEnvelope(nil); !errors.Is(err, errEmptyEnvelope) {
		t.Fatalf("decodeEnvelope of an empty record: err %v, want errEmptyEnvelope", err)
	}
	if _, _, err := decodeEnvelope([]byte{0x0a, 5, 'a'}); err == nil {
		t.Fatal("decodeEnvelope of a truncated element: no error")
	}
}

// FuzzDecodeEnvelope checks decodeEnvelope against proto.Unmarshal, the
// reference, on any bytes: the same element or reports, or both an error.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(encodeElement([]byte("value")))
	f.Add(encodeElement(nil))
	rv, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{Stage: "s", TotalSourcePartitions: 1}}})
	f.Add(rv)
	f.Add(append(encodeElement([]byte("a")), encodeElement([]byte("b"))...)) // the last field wins
	f.Add(append(rv, encodeElement([]byte("x"))...))
	f.Add(encodeReports([]*pb.WatermarkReport{{Stage: "s", TotalSourcePartitions: 2}, {Stage: "s", SourcePartition: 1, TotalSourcePartitions: 2}}))
	f.Add(encodeReports(nil))
	f.Fuzz(func(t *testing.T, v []byte) {
		el, rep, err := decodeEnvelope(v)
		env := &pb.Envelope{}
		rerr := proto.Unmarshal(v, env)
		if rerr != nil {
			if err == nil {
				t.Fatalf("%x: decodeEnvelope accepted what proto.Unmarshal refuses (%v)", v, rerr)
			}
			return
		}
		switch p := env.Payload.(type) {
		case *pb.Envelope_Element:
			if err != nil || rep != nil || el == nil || !bytes.Equal(el, p.Element) {
				t.Fatalf("%x: element %x, report %v, err %v; want element %x", v, el, rep, err, p.Element)
			}
		case *pb.Envelope_Report:
			if err != nil || el != nil || len(rep) != 1 || !proto.Equal(rep[0], p.Report) {
				t.Fatalf("%x: element %x, reports %v, err %v; want report %v", v, el, rep, err, p.Report)
			}
		case *pb.Envelope_Reports:
			want := p.Reports.GetReports()
			if len(want) == 0 {
				if !errors.Is(err, errEmptyEnvelope) {
					t.Fatalf("%x: err %v, want errEmptyEnvelope for a batch of no report", v, err)
				}
				return
			}
			if err != nil || el != nil || len(rep) != len(want) {
				t.Fatalf("%x: element %x, reports %v, err %v; want reports %v", v, el, rep, err, want)
			}
			for i := range want {
				if !proto.Equal(rep[i], want[i]) {
					t.Fatalf("%x: report %d is %v, want %v", v, i, rep[i], want[i])
				}
			}
		default:
			if !errors.Is(err, errEmptyEnvelope) {
				t.Fatalf("%x: err %v, want errEmptyEnvelope", v, err)
			}
		}
	})
}

// TestAppendElement: envelopes cut from the arena equal encodeElement's,
// stay intact as later ones are cut (across a chunk change), and a large
// element gets its own allocation.
func TestAppendElement(t *testing.T) {
	var arena []byte
	var got, want [][]byte
	for i := range 2000 {
		e := bytes.Repeat([]byte{byte(i)}, i%300)
		got = append(got, appendElement(&arena, e))
		want = append(want, encodeElement(e))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("envelope %d: %x, want %x", i, got[i], want[i])
		}
		if cap(got[i]) != len(got[i]) {
			t.Fatalf("envelope %d: capacity %d past its length %d: an append would write into the next", i, cap(got[i]), len(got[i]))
		}
	}
	big := make([]byte, envelopeChunk)
	before := len(arena)
	if v := appendElement(&arena, big); !bytes.Equal(v, encodeElement(big)) || len(arena) != before {
		t.Errorf("a large element: arena grew from %d to %d, want it untouched", before, len(arena))
	}
}

// TestReportsEndOfTime: a batch of reports one of which is at the end of
// time ends an input (Loop.poll then commits without waiting out the
// commit interval); an element, a batch below the end, or a value that is
// not an Envelope does not.
func TestReportsEndOfTime(t *testing.T) {
	end := &pb.WatermarkReport{Stage: "s0", SourcePartition: 1, CommittedWatermarkMillis: int64(mtime.MaxTimestamp), TotalSourcePartitions: 4}
	below := &pb.WatermarkReport{Stage: "s0", SourcePartition: 0, CommittedWatermarkMillis: int64(mtime.MaxTimestamp) - 1, TotalSourcePartitions: 4}
	single, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: end}})
	for _, c := range []struct {
		name string
		v    []byte
		want bool
	}{
		{"batch with one at the end", encodeReports([]*pb.WatermarkReport{below, end}), true},
		{"single report at the end", single, true},
		{"batch below the end", encodeReports([]*pb.WatermarkReport{below}), false},
		{"element", encodeElement([]byte("x")), false},
		{"not an Envelope", []byte{0xff, 0xff, 0xff}, false},
	} {
		if got := reportsEndOfTime(c.v); got != c.want {
			t.Errorf("%s: reportsEndOfTime = %v, want %v", c.name, got, c.want)
		}
	}
}

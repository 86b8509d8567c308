package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

// TestEnvelopeCodec: EncodeElement gives proto.Marshal's bytes, and
// Decode reads them back, at lengths around the varint steps.
func TestEnvelopeCodec(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 100000} {
		e := []byte(strings.Repeat("e", n))
		want, err := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Element{Element: e}})
		if err != nil {
			t.Fatal(err)
		}
		got := EncodeElement(e)
		if !bytes.Equal(got, want) {
			t.Fatalf("EncodeElement of %d bytes: %x..., proto.Marshal: %x...", n, got[:min(8, len(got))], want[:min(8, len(want))])
		}
		el, rep, err := Decode(got)
		if err != nil || rep != nil || el == nil || !bytes.Equal(el, e) {
			t.Fatalf("Decode of an element of %d bytes: %d bytes, report %v, err %v", n, len(el), rep, err)
		}
	}
	r := &pb.WatermarkReport{Stage: "s0", SourcePartition: 2, CommittedWatermarkMillis: 77, TotalSourcePartitions: 4}
	v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: r}})
	if el, reps, err := Decode(v); err != nil || el != nil || len(reps) != 1 || !proto.Equal(reps[0], r) {
		t.Fatalf("Decode of a report: element %v, reports %v, err %v", el, reps, err)
	}
	r2 := &pb.WatermarkReport{Stage: "s0", SourcePartition: 0, CommittedWatermarkMillis: 70, TotalSourcePartitions: 4, Idle: true}
	batch := EncodeReports([]*pb.WatermarkReport{r, r2})
	if el, reps, err := Decode(batch); err != nil || el != nil || len(reps) != 2 || !proto.Equal(reps[0], r) || !proto.Equal(reps[1], r2) {
		t.Fatalf("Decode of a batch of two reports: element %v, reports %v, err %v", el, reps, err)
	}
	if _, _, err := Decode(EncodeReports(nil)); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Decode of a batch of no report: err %v, want ErrEmpty", err)
	}
	if _, _, err := Decode(nil); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Decode of an empty record: err %v, want ErrEmpty", err)
	}
	if _, _, err := Decode([]byte{0x0a, 5, 'a'}); err == nil {
		t.Fatal("Decode of a truncated element: no error")
	}
}

// FuzzDecodeEnvelope checks Decode against proto.Unmarshal, the
// reference, on any bytes: the same element or reports, or both an error.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(EncodeElement([]byte("value")))
	f.Add(EncodeElement(nil))
	rv, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{Stage: "s", TotalSourcePartitions: 1}}})
	f.Add(rv)
	f.Add(append(EncodeElement([]byte("a")), EncodeElement([]byte("b"))...)) // the last field wins
	f.Add(append(rv, EncodeElement([]byte("x"))...))
	f.Add(EncodeReports([]*pb.WatermarkReport{{Stage: "s", TotalSourcePartitions: 2}, {Stage: "s", SourcePartition: 1, TotalSourcePartitions: 2}}))
	f.Add(EncodeReports(nil))
	f.Fuzz(func(t *testing.T, v []byte) {
		el, rep, err := Decode(v)
		env := &pb.Envelope{}
		rerr := proto.Unmarshal(v, env)
		if rerr != nil {
			if err == nil {
				t.Fatalf("%x: Decode accepted what proto.Unmarshal refuses (%v)", v, rerr)
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
				if !errors.Is(err, ErrEmpty) {
					t.Fatalf("%x: err %v, want ErrEmpty for a batch of no report", v, err)
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
			if !errors.Is(err, ErrEmpty) {
				t.Fatalf("%x: err %v, want ErrEmpty", v, err)
			}
		}
	})
}

// TestAppendElement: envelopes cut from the arena equal EncodeElement's,
// stay intact as later ones are cut (across a chunk change), and a large
// element gets its own allocation.
func TestAppendElement(t *testing.T) {
	var arena []byte
	var got, want [][]byte
	for i := range 2000 {
		e := bytes.Repeat([]byte{byte(i)}, i%300)
		got = append(got, AppendElement(&arena, e))
		want = append(want, EncodeElement(e))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("envelope %d: %x, want %x", i, got[i], want[i])
		}
		if cap(got[i]) != len(got[i]) {
			t.Fatalf("envelope %d: capacity %d past its length %d: an append would write into the next", i, cap(got[i]), len(got[i]))
		}
	}
	big := make([]byte, chunk)
	before := len(arena)
	if v := AppendElement(&arena, big); !bytes.Equal(v, EncodeElement(big)) || len(arena) != before {
		t.Errorf("a large element: arena grew from %d to %d, want it untouched", before, len(arena))
	}
}

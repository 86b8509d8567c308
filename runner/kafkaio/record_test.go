package kafkaio

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestKafkaRecordCoderKeepsNull (issue 23, "null keys and tombstones are
// lost"): the KafkaRecord coder gives back a null key, value and header
// value as nil and an empty one as empty, the headers in order, and the
// timestamp to the millisecond, or none.
func TestKafkaRecordCoderKeepsNull(t *testing.T) {
	cases := []KafkaRecord{
		{},
		{Topic: "t", Partition: 3, Offset: 42, Key: nil, Value: []byte("a")},
		{Topic: "t", Key: []byte{}, Value: []byte{}},
		{Topic: "t", Key: []byte("k"), Value: nil},
		{Topic: "orders", Partition: -1, Offset: 1 << 40, Timestamp: time.UnixMilli(1_700_000_000_123), LogAppendTime: true,
			Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "a", Value: nil}, {Key: "", Value: []byte{}}, {Key: "a", Value: []byte("x")}}},
		{Timestamp: time.UnixMilli(0)},
		{Timestamp: time.UnixMilli(-5)},
	}
	for _, want := range cases {
		b, err := encodeKafkaRecord(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeKafkaRecord(b)
		if err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		if !got.Timestamp.Equal(want.Timestamp) || got.Timestamp.IsZero() != want.Timestamp.IsZero() {
			t.Fatalf("%v: timestamp %v, want %v", want, got.Timestamp, want.Timestamp)
		}
		got.Timestamp, want.Timestamp = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(encode(%#v)) = %#v", want, got)
		}
		if (got.Key == nil) != (want.Key == nil) || (got.Value == nil) != (want.Value == nil) {
			t.Fatalf("%v: null and empty not kept apart: got key nil %v value nil %v", want, got.Key == nil, got.Value == nil)
		}
		for i := range want.Headers {
			if (got.Headers[i].Value == nil) != (want.Headers[i].Value == nil) {
				t.Fatalf("%v: header %d: null and empty not kept apart", want, i)
			}
		}
	}
}

// FuzzDecodeKafkaRecord: any bytes decode to a record that encodes back to
// the same bytes, or to an error wrapping errKafkaRecord; never a panic.
func FuzzDecodeKafkaRecord(f *testing.F) {
	b, _ := encodeKafkaRecord(KafkaRecord{Topic: "t", Key: []byte("k"), Headers: []Header{{Key: "h"}}})
	f.Add(b)
	f.Add([]byte{1})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := decodeKafkaRecord(p)
		if err != nil {
			if !errors.Is(err, errKafkaRecord) {
				t.Fatalf("error %v does not wrap errKafkaRecord", err)
			}
			return
		}
		back, _ := encodeKafkaRecord(r)
		if !bytes.Equal(back, p) {
			// Varints have one shortest form, flags only bits 0 and 1, and
			// a timestamp without flag bit 0 encodes as 0: other bytes
			// decode but are not canonical.
			r2, err := decodeKafkaRecord(back)
			if err != nil || !reflect.DeepEqual(r2, r) {
				t.Fatalf("re-encoding %x gives %x, which decodes to %v (%v), not %v", p, back, r2, err, r)
			}
		}
	})
}

package kafkaio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// celsius is a user's type with its own Kafka encoding: the decimal text.
type celsius int64

// decodeCelsius reads a celsius from its decimal text; a null value is
// -273 (what a user may decide null means), an empty one an error.
func decodeCelsius(b []byte) (celsius, error) {
	if b == nil {
		return -273, nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return celsius(n), err
}

// encodeCelsius writes c as decimal text; -273 is null.
func encodeCelsius(c celsius) ([]byte, error) {
	if c == -273 {
		return nil, nil
	}
	if c < -273 {
		return nil, fmt.Errorf("%d °C is below absolute zero", c)
	}
	return []byte(strconv.FormatInt(int64(c), 10)), nil
}

func init() {
	register.Function1x2(decodeCelsius)
	register.Function1x2(encodeCelsius)
}

// roundTrip gives fn back as the harness would build it: through its
// JSON (the pipeline carries a DoFn's exported fields so).
func roundTrip[T any](t *testing.T, fn T) T {
	t.Helper()
	b, err := json.Marshal(fn)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out
}

// configOf applies opts.
func configOf(opts ...Option) Config { return newConfig([]string{"t"}, opts) }

// TestDecodeKeepsNullApartFromEmpty (issue 23): a Read's deserializers
// after the pipeline's round trip: StringDeserializer gives "" for an
// empty key or value and refuses null (an undecodable record, its error
// naming topic, partition and offset), never "" for it; a user's decoder
// gets nil for null and an empty slice for empty, and its error or panic
// is the record's error; ByteArrayDeserializer passes the bytes.
func TestDecodeKeepsNullApartFromEmpty(t *testing.T) {
	c := configOf(WithKeyDeserializer(StringDeserializer), WithValueDecoder(decodeCelsius))
	f := roundTrip(t, &decodeFn{Topic: "t", Key: c.Key, Value: c.Value})
	f.Setup()
	type kv struct {
		k any
		v any
	}
	for _, tc := range []struct {
		name string
		r    KafkaRecord
		want kv
		err  string
	}{
		{"strings and numbers", KafkaRecord{Key: []byte("k"), Value: []byte("21")}, kv{"k", celsius(21)}, ""},
		{"empty key", KafkaRecord{Key: []byte{}, Value: []byte("-4")}, kv{"", celsius(-4)}, ""},
		{"null value: the decoder says", KafkaRecord{Key: []byte("k"), Value: nil}, kv{"k", celsius(-273)}, ""},
		{"null key", KafkaRecord{Topic: "t", Partition: 2, Offset: 7, Key: nil, Value: []byte("1")}, kv{}, "kafkaio.Read(t): undecodable record at partition 2, offset 7: key: null, which a Go string cannot hold"},
		{"empty value: the decoder's error", KafkaRecord{Topic: "t", Partition: 0, Offset: 9, Key: []byte("k"), Value: []byte{}}, kv{}, `partition 0, offset 9: value: strconv.ParseInt: parsing "": invalid syntax`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []kv
			err := f.ProcessElement(context.Background(), tc.r, func(k beam.X, v beam.Y) { got = append(got, kv{k, v}) })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || len(got) != 0 {
					t.Fatalf("error %v, emitted %v; want an error naming %q and nothing emitted", err, got, tc.err)
				}
				return
			}
			if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Fatalf("emitted %#v, error %v; want %#v", got, err, tc.want)
			}
		})
	}

	bytesFn := roundTrip(t, &decodeFn{Topic: "t"})
	bytesFn.Setup()
	var keys [][]byte
	for _, k := range [][]byte{nil, {}, []byte("k")} {
		if err := bytesFn.ProcessElement(context.Background(), KafkaRecord{Key: k}, func(k beam.X, _ beam.Y) { keys = append(keys, k.([]byte)) }); err != nil {
			t.Fatal(err)
		}
	}
	if keys[0] != nil || keys[1] == nil || string(keys[2]) != "k" {
		t.Errorf("ByteArrayDeserializer gave %#v, want the bytes as they are", keys)
	}

	dec := decoder(configOf(WithValueDecoder(func(b []byte) (int, error) { panic("boom") })).Value)
	if _, err := dec([]byte("x")); err == nil || !strings.Contains(err.Error(), "the decoder panicked: boom") {
		t.Errorf("a panicking decoder gave %v, want its panic as the error", err)
	}
}

// TestUserCoderRoundTrip: what a Write's encoder writes, the Read's
// decoder gives back, null included (encodeCelsius' nil, decodeCelsius'
// nil); a string is written as its bytes, "" as an empty value, not
// null; an encoder's error names the topic.
func TestUserCoderRoundTrip(t *testing.T) {
	w := configOf(WithValueEncoder(encodeCelsius))
	enc := roundTrip(t, &encodeKVFn{encodeFn: encodeFn{Topic: "out", Value: w.Value}})
	enc.Setup()
	r := configOf(WithKeyDeserializer(StringDeserializer), WithValueDecoder(decodeCelsius))
	dec := roundTrip(t, &decodeFn{Topic: "out", Key: r.Key, Value: r.Value})
	dec.Setup()
	for _, tc := range []struct {
		k string
		v celsius
	}{{"a", 0}, {"", 21}, {"b", -273}, {"c", 1 << 40}} {
		rec, err := enc.ProcessElement(tc.k, tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Key == nil {
			t.Errorf("key %q written as null, want its bytes", tc.k)
		}
		if (rec.Value == nil) != (tc.v == -273) {
			t.Errorf("value %d written as %q (nil %v): the encoder's nil is null, nothing else", tc.v, rec.Value, rec.Value == nil)
		}
		var gk beam.X
		var gv beam.Y
		if err := dec.ProcessElement(context.Background(), rec, func(k beam.X, v beam.Y) { gk, gv = k, v }); err != nil {
			t.Fatal(err)
		}
		if gk != tc.k || gv != tc.v {
			t.Errorf("(%q, %d) came back as (%q, %v)", tc.k, tc.v, gk, gv)
		}
	}
	if _, err := enc.ProcessElement("k", celsius(-300)); err == nil || !strings.Contains(err.Error(), "kafkaio.Write(out): the value cannot be encoded: -300 °C is below absolute zero") {
		t.Errorf("an encoder's error gave %v", err)
	}
	vals := roundTrip(t, &encodeValueFn{encodeFn: encodeFn{Topic: "out"}})
	vals.Setup()
	rec, err := vals.ProcessElement("")
	if err != nil || rec.Key != nil || rec.Value == nil || len(rec.Value) != 0 {
		t.Errorf("the value \"\" alone gave %v, %v: want a null key and an empty (not null) value", rec, err)
	}
}

// TestTypedReadAndWriteTypes: the PCollection a Read gives is typed by its
// deserializers, and the Read and Write stay the native DoFns (ReadRecords'
// and WriteRecords', whose Config carries no deserializer or encoder) with
// a decode or encode DoFn beside them; bad settings panic at construction
// with ErrConfig.
func TestTypedReadAndWriteTypes(t *testing.T) {
	var got []string
	if err := build(func(s beam.Scope) {
		for _, opts := range [][]Option{
			{Bounded(), WithKeyDeserializer(StringDeserializer), WithValueDeserializer(StringDeserializer)},
			{WithValueDecoder(decodeCelsius)},
			{Bounded(), WithKeyDeserializer(ByteArrayDeserializer)},
		} {
			got = append(got, fmt.Sprint(Read(s, "in", opts...).Type()))
		}
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"KV<string,string>", "KV<[]uint8,kafkaio.celsius>", "KV<[]uint8,[]uint8>"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Read types %v, want %v", got, want)
	}

	p, s := beam.NewPipelineWithRoot()
	kvs := Read(s, "in", Bounded(), WithKeyDeserializer(StringDeserializer), WithValueDecoder(decodeCelsius))
	Write(s, "out", kvs, WithValueEncoder(encodeCelsius))
	Write(s, "out2", beam.DropKey(s, kvs), WithValueEncoder(encodeCelsius))
	Write(s, "out3", beam.DropValue(s, kvs))
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	var fns []string
	for _, e := range edges {
		if e.DoFn == nil {
			continue
		}
		fn := e.DoFn.Recv
		if fn == nil {
			continue // a function DoFn (DropKey's)
		}
		if c, ok := SourceConfig(fn); ok && (c.Key != nil || c.Value != nil) {
			t.Errorf("the native source %T carries a deserializer: %+v", fn, c)
		}
		if c, ok := SinkConfig(fn); ok && (c.Key != nil || c.Value != nil) {
			t.Errorf("the native sink %T carries an encoder: %+v", fn, c)
		}
		fns = append(fns, strings.TrimPrefix(reflect.TypeOf(fn).String(), "*kafkaio."))
	}
	if w := "readRecordsFn decodeFn encodeKVFn writeRecordsFn"; !strings.HasPrefix(strings.Join(fns, " "), w) {
		t.Errorf("DoFns %v, want %s first", fns, w)
	}
	if w := "encodeValueFn writeRecordsFn encodeValueFn writeRecordsFn"; !strings.HasSuffix(strings.Join(fns, " "), w) {
		t.Errorf("DoFns %v, want %s last (values alone: celsius encoded, then strings by type)", fns, w)
	}

	for _, tc := range []struct {
		name string
		f    func(s beam.Scope)
		want string
	}{
		{"unknown deserializer", func(s beam.Scope) { Read(s, "a", WithKeyDeserializer("com.example.Avro")) }, `WithKeyDeserializer("com.example.Avro")`},
		{"an encoder on a read", func(s beam.Scope) { Read(s, "a", WithValueEncoder(encodeCelsius)) }, "an encoder (WithKeyEncoder, WithValueEncoder) is a Write's setting"},
		{"a decoder on a write", func(s beam.Scope) {
			Write(s, "a", Read(s, "in", WithValueDecoder(decodeCelsius)), WithValueDecoder(decodeCelsius))
		}, "the value decoder is a Read's setting"},
		{"an encoder of another type", func(s beam.Scope) {
			Write(s, "out", Read(s, "in", WithValueDeserializer(StringDeserializer)), WithValueEncoder(encodeCelsius))
		}, "the value encoder takes kafkaio.celsius, but the values are string"},
		{"a type without an encoder", func(s beam.Scope) { Write(s, "a", Read(s, "in", WithValueDecoder(decodeCelsius))) }, "values of type kafkaio.celsius: give an encoder (kafkaio.WithValueEncoder)"},
		{"a deserializer on ReadRecords", func(s beam.Scope) { ReadRecords(s, "a", WithKeyDeserializer(StringDeserializer)) }, "ReadRecords(a): a key or value deserializer"},
		{"a key encoder without keys", func(s beam.Scope) {
			Write(s, "a", beam.DropKey(s, Read(s, "in")), WithKeyEncoder(encodeCelsius))
		}, "a key encoder for a PCollection of []uint8, which has no keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := build(tc.f)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrConfig naming %q", err, tc.want)
			}
		})
	}
}

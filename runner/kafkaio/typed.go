package kafkaio

import (
	"context"
	"fmt"
	"reflect"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// Typed keys and values (issue 23, "Kafka's data model"): a Read gives
// KV<K, V> of the types its deserializers make, and a Write takes KV<K, V>
// (or V alone) of the types it can serialize, as Beam Java's KafkaIO
// does with withKeyDeserializer and withKeySerializer:
//
//	kvs := kafkaio.Read(s, "orders",
//		kafkaio.WithKeyDeserializer(kafkaio.StringDeserializer),
//		kafkaio.WithValueDecoder(decodeOrder)) // KV<string, Order>
//	kafkaio.Write(s, "totals", totals,        // KV<string, Total>
//		kafkaio.WithValueEncoder(encodeTotal))
//
// Both are composites of the whole-record transforms, so each runner runs
// them with what it already has for ReadRecords and WriteRecords:
//
//	Read:  ReadRecords' DoFn ─▶ decodeFn: KafkaRecord → KV<K, V>
//	Write: encodeFn: KV<K, V> → KafkaRecord ─▶ WriteRecords' DoFn
//
// On the kafkastreams runner the whole-record DoFns are the native source
// and sink (plan.NativeSource, plan.NativeSink; their Config carries no
// key or value setting), and decodeFn and encodeFn are ordinary DoFns
// fused into the source's stage and the stage producing the Write's input.
// A record that cannot be decoded (or an element that cannot be encoded)
// is an error of that DoFn, naming the topic, partition and offset, so it
// goes through the runner's error policy as any failing DoFn does
// (--error_policy: fail stops the job naming the record's input topic,
// partition and offset; dead_letter writes the record as it was read to
// the dead-letter topic with its origin, and goes on). On other runners
// (Prism) the error fails the bundle, and with it the job.
//
// What crosses the Fn API is a KafkaRecord (this package's coder) between
// the source and decodeFn, and the user's types with the SDK's coders
// (KV<string, string> is Beam's standard StringUtf8 coder) after it.

// The (de)serializers a Read and Write name, with the class names of
// Kafka's Java clients (Beam Java's KafkaIO.withKeyDeserializer and the Go
// SDK's cross-language kafkaio take the same).
const (
	// ByteArrayDeserializer gives the bytes as they are: []byte, the
	// default. A null key or value becomes an empty []byte (Beam's bytes
	// coder cannot tell them apart): ReadRecords keeps null.
	ByteArrayDeserializer = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
	// StringDeserializer gives the bytes as a Go string, unchecked (as
	// Java's StringDeserializer, which never fails on bytes, but with no
	// replacement of invalid UTF-8). A Go string cannot be null: a null
	// key or value is an undecodable record (see the package's Typed
	// section), never "". Read a topic with null keys with the key as
	// ByteArrayDeserializer, or with WithKeyDecoder saying what null
	// becomes, or with ReadRecords.
	StringDeserializer = "org.apache.kafka.common.serialization.StringDeserializer"
)

// Serde is how a Read turns a record's key or value bytes into an element
// (a deserializer), or how a Write turns one into bytes (a serializer): a
// named one, or a user's function. The zero Serde is a Read's
// ByteArrayDeserializer and a Write's choice by the element's type.
type Serde struct {
	// Name is ByteArrayDeserializer or StringDeserializer (a Read only).
	Name string `json:"name,omitempty"`
	// Fn is a user's function, registered (register.Function1x2) so the
	// pipeline can carry it: a Read's func([]byte) (T, error), called with
	// nil for Kafka's null and a non-nil empty slice for an empty key or
	// value (so T says what null becomes, or the error refuses it); a
	// Write's func(T) ([]byte, error), whose nil result is written as
	// null (a null key, placed by the producer's partitioner; a tombstone
	// value).
	Fn *beam.EncodedFunc `json:"fn,omitempty"`
	// Encoder says Fn is a Write's encoder (WithKeyEncoder,
	// WithValueEncoder), else a Read's decoder: each is refused where the
	// other is wanted.
	Encoder bool `json:"encoder,omitempty"`
}

// WithKeyDeserializer makes a Read's keys of type name's:
// ByteArrayDeserializer ([]byte, the default) or StringDeserializer
// (string).
func WithKeyDeserializer(name string) Option {
	return func(c *Config) { c.Key = &Serde{Name: name} }
}

// WithValueDeserializer makes a Read's values of type name's (as
// WithKeyDeserializer).
func WithValueDeserializer(name string) Option {
	return func(c *Config) { c.Value = &Serde{Name: name} }
}

// WithKeyDecoder makes a Read's keys of type T, decoded by decode
// (registered with register.Function1x2; the decode function given to
// beam.RegisterCoder fits). decode gets nil for a null key and an empty
// non-nil slice for an empty one. A key it returns an error for (or
// panics on) makes the record undecodable: the runner's error policy
// takes it.
func WithKeyDecoder[T any](decode func([]byte) (T, error)) Option {
	return func(c *Config) { c.Key = &Serde{Fn: &beam.EncodedFunc{Fn: reflectx.MakeFunc(decode)}} }
}

// WithValueDecoder makes a Read's values of type T, decoded by decode (as
// WithKeyDecoder).
func WithValueDecoder[T any](decode func([]byte) (T, error)) Option {
	return func(c *Config) { c.Value = &Serde{Fn: &beam.EncodedFunc{Fn: reflectx.MakeFunc(decode)}} }
}

// WithKeyEncoder makes a Write take keys of type T, encoded by encode
// (registered with register.Function1x2; the encode function given to
// beam.RegisterCoder fits): a nil result is a null key. An element it
// returns an error for (or panics on) fails its DoFn: the runner's error
// policy takes the input record behind it. Keys of type []byte and
// string need none (string: its UTF-8 bytes, as Java's StringSerializer;
// "" is an empty key, not null).
func WithKeyEncoder[T any](encode func(T) ([]byte, error)) Option {
	return func(c *Config) { c.Key = &Serde{Fn: &beam.EncodedFunc{Fn: reflectx.MakeFunc(encode)}, Encoder: true} }
}

// WithValueEncoder makes a Write take values of type T, encoded by
// encode (as WithKeyEncoder; a nil result is a tombstone).
func WithValueEncoder[T any](encode func(T) ([]byte, error)) Option {
	return func(c *Config) { c.Value = &Serde{Fn: &beam.EncodedFunc{Fn: reflectx.MakeFunc(encode)}, Encoder: true} }
}

var (
	bytesType = reflect.TypeOf([]byte(nil))
	errorType = reflect.TypeOf((*error)(nil)).Elem()
)

// fnType is s's function's type, or nil.
func (s *Serde) fnType() reflect.Type {
	if s == nil || s.Fn == nil || s.Fn.Fn == nil {
		return nil
	}
	return s.Fn.Fn.Type()
}

// decodeType is the element type deserializer s makes (nil s: []byte),
// or an error naming what is wrong; what names the setting
// ("WithKeyDeserializer").
func (s *Serde) decodeType(what string) (reflect.Type, error) {
	if s == nil {
		return bytesType, nil
	}
	if s.Encoder {
		return nil, fmt.Errorf("%w: %s: an encoder (WithKeyEncoder, WithValueEncoder) is a Write's setting: a Read takes a decoder (WithKeyDecoder, WithValueDecoder)", ErrConfig, what)
	}
	if t := s.fnType(); t != nil {
		if s.Name != "" {
			return nil, fmt.Errorf("%w: %s: both %q and a function", ErrConfig, what, s.Name)
		}
		if t.NumIn() != 1 || t.In(0) != bytesType || t.NumOut() != 2 || t.Out(1) != errorType {
			return nil, fmt.Errorf("%w: %s: the function is a %v, want func([]byte) (T, error)", ErrConfig, what, t)
		}
		return t.Out(0), nil
	}
	switch s.Name {
	case "", ByteArrayDeserializer:
		return bytesType, nil
	case StringDeserializer:
		return reflectx.String, nil
	}
	return nil, fmt.Errorf("%w: %s(%q): want kafkaio.ByteArrayDeserializer or kafkaio.StringDeserializer (or a decoder: WithKeyDecoder, WithValueDecoder)", ErrConfig, what, s.Name)
}

// plain says whether s is a Read's default: the bytes as they are.
func (s *Serde) plain() bool {
	return s == nil || s.fnType() == nil && (s.Name == "" || s.Name == ByteArrayDeserializer)
}

// checkEncoder checks that s, a Write's key or value setting, can
// serialize elements of type t, naming what is wrong; what names the
// setting ("key", "value").
func (s *Serde) checkEncoder(topic, what string, t reflect.Type) error {
	if s != nil && s.Name != "" {
		return fmt.Errorf("%w: Write(%s): the %s deserializer %q is a Read's setting: a Write serializes by the element's type (string, []byte) or with an encoder (WithKeyEncoder, WithValueEncoder)", ErrConfig, topic, what, s.Name)
	}
	ft := s.fnType()
	if ft != nil && !s.Encoder {
		return fmt.Errorf("%w: Write(%s): the %s decoder is a Read's setting: a Write takes an encoder (kafkaio.With%sEncoder)", ErrConfig, topic, what, capital(what))
	}
	if ft == nil {
		if t == bytesType || t == reflectx.String {
			return nil
		}
		return fmt.Errorf("%w: Write(%s): %ss of type %v: give an encoder (kafkaio.With%sEncoder) or make them []byte or string", ErrConfig, topic, what, t, capital(what))
	}
	if ft.NumIn() != 1 || ft.NumOut() != 2 || ft.Out(0) != bytesType || ft.Out(1) != errorType {
		return fmt.Errorf("%w: Write(%s): the %s encoder is a %v, want func(T) ([]byte, error)", ErrConfig, topic, what, ft)
	}
	if ft.In(0) != t {
		return fmt.Errorf("%w: Write(%s): the %s encoder takes %v, but the %ss are %v", ErrConfig, topic, what, ft.In(0), what, t)
	}
	return nil
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// readTyped is readOne for a Read whose key or value is not plain bytes:
// the whole records (the native source on kafkastreams) decoded by
// decodeFn into KV<K, V>.
func readTyped(s beam.Scope, c Config) beam.PCollection {
	kt, err := c.Key.decodeType("WithKeyDeserializer")
	if err != nil {
		panic(err)
	}
	vt, err := c.Value.decodeType("WithValueDeserializer")
	if err != nil {
		panic(err)
	}
	src := c
	src.Key, src.Value = nil, nil
	var recs beam.PCollection
	if c.Bounded {
		recs = beam.ParDo(s, &readRecordsFn{readFn: readFn{Config: src}}, beam.Impulse(s))
	} else {
		recs = beam.ParDo(s, &unboundedReadRecordsFn{unboundedReadFn: unboundedReadFn{Config: src}}, beam.Impulse(s))
	}
	return beam.ParDo(s.Scope("decode"), &decodeFn{Topic: c.Topics[0], Key: c.Key, Value: c.Value}, recs,
		beam.TypeDefinition{Var: beam.XType, T: kt}, beam.TypeDefinition{Var: beam.YType, T: vt})
}

// decodeFn turns a Read's records into KV<K, V> with its deserializers; a
// record one of them fails on is the DoFn's error, naming the topic,
// partition and offset (the runner's error policy takes it).
type decodeFn struct {
	// Topic is the Read's topic (for errors only: a record names its own).
	Topic      string `json:"topic"`
	Key, Value *Serde

	key, value func([]byte) (any, error)
}

// Setup makes the decoding functions.
func (f *decodeFn) Setup() {
	f.key, f.value = decoder(f.Key), decoder(f.Value)
}

// decoder is s's decoding function (s already checked by decodeType).
func decoder(s *Serde) func([]byte) (any, error) {
	if s.fnType() != nil {
		fn := reflectx.ToFunc1x2(s.Fn.Fn)
		return func(b []byte) (v any, err error) {
			defer func() {
				if x := recover(); x != nil {
					err = fmt.Errorf("the decoder panicked: %v", x)
				}
			}()
			out, e := fn.Call1x2(b)
			if e != nil {
				return nil, e.(error)
			}
			return out, nil
		}
	}
	if s != nil && s.Name == StringDeserializer {
		return func(b []byte) (any, error) {
			if b == nil {
				return nil, fmt.Errorf("null, which a Go string cannot hold (kafkaio.StringDeserializer; read null keys as []byte, with a decoder, or with ReadRecords)")
			}
			return string(b), nil
		}
	}
	return func(b []byte) (any, error) { return b, nil }
}

// ProcessElement emits r's key and value decoded, or returns the error of
// the first that cannot be.
func (f *decodeFn) ProcessElement(_ context.Context, r KafkaRecord, emit func(beam.X, beam.Y)) error {
	k, err := f.key(r.Key)
	if err != nil {
		return fmt.Errorf("kafkaio.Read(%s): undecodable record at partition %d, offset %d: key: %w", r.Topic, r.Partition, r.Offset, err)
	}
	v, err := f.value(r.Value)
	if err != nil {
		return fmt.Errorf("kafkaio.Read(%s): undecodable record at partition %d, offset %d: value: %w", r.Topic, r.Partition, r.Offset, err)
	}
	emit(k, v)
	return nil
}

// writeTyped is Write for elements whose key or value is not plain
// []byte: encodeFn turns them into KafkaRecords, which WriteRecords' DoFn
// (the native sink on kafkastreams) writes. key is false for a
// PCollection of values alone.
func writeTyped(s beam.Scope, c Config, col beam.PCollection, key bool) {
	t := col.Type()
	topic := c.Topics[0]
	var recs beam.PCollection
	enc := encodeFn{Topic: topic, Key: c.Key, Value: c.Value}
	if key {
		if err := c.Key.checkEncoder(topic, "key", t.Components()[0].Type()); err != nil {
			panic(err)
		}
		if err := c.Value.checkEncoder(topic, "value", t.Components()[1].Type()); err != nil {
			panic(err)
		}
		recs = beam.ParDo(s.Scope("encode"), &encodeKVFn{encodeFn: enc}, col)
	} else {
		if c.Key != nil {
			panic(fmt.Errorf("%w: Write(%s): a key encoder for a PCollection of %v, which has no keys", ErrConfig, topic, t))
		}
		if err := c.Value.checkEncoder(topic, "value", t.Type()); err != nil {
			panic(err)
		}
		recs = beam.ParDo(s.Scope("encode"), &encodeValueFn{encodeFn: enc}, col)
	}
	w := c
	w.Key, w.Value = nil, nil
	beam.ParDo0(s, &writeRecordsFn{Config: w}, recs)
}

// encodeFn turns a Write's elements into KafkaRecords with its encoders
// (or by type: []byte as it is, string its UTF-8 bytes).
type encodeFn struct {
	// Topic is the Write's topic (for errors).
	Topic      string `json:"topic"`
	Key, Value *Serde

	key, value func(any) ([]byte, error)
}

// setup makes the encoding functions.
func (f *encodeFn) setup() {
	f.key, f.value = encoder(f.Key), encoder(f.Value)
}

// encoder is s's encoding function (s already checked by checkEncoder).
func encoder(s *Serde) func(any) ([]byte, error) {
	if s.fnType() != nil {
		fn := reflectx.ToFunc1x2(s.Fn.Fn)
		return func(v any) (b []byte, err error) {
			defer func() {
				if x := recover(); x != nil {
					err = fmt.Errorf("the encoder panicked: %v", x)
				}
			}()
			out, e := fn.Call1x2(v)
			if e != nil {
				return nil, e.(error)
			}
			b, _ = out.([]byte)
			return b, nil
		}
	}
	return func(v any) ([]byte, error) {
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			return append([]byte{}, x...), nil // "" is an empty key or value, not null
		}
		return nil, fmt.Errorf("a %T, with no encoder", v)
	}
}

// record is the KafkaRecord of key k (hasKey false: none, a null key) and
// value v, or the error naming which could not be encoded.
func (f *encodeFn) record(k any, hasKey bool, v any) (KafkaRecord, error) {
	var r KafkaRecord
	var err error
	if hasKey {
		if r.Key, err = f.key(k); err != nil {
			return r, fmt.Errorf("kafkaio.Write(%s): the key cannot be encoded: %w", f.Topic, err)
		}
	}
	if r.Value, err = f.value(v); err != nil {
		return r, fmt.Errorf("kafkaio.Write(%s): the value cannot be encoded: %w", f.Topic, err)
	}
	return r, nil
}

// encodeKVFn is encodeFn for KV<K, V>.
type encodeKVFn struct{ encodeFn }

// Setup makes the encoding functions.
func (f *encodeKVFn) Setup() { f.setup() }

// ProcessElement emits (k, v) as a record.
func (f *encodeKVFn) ProcessElement(k beam.X, v beam.Y) (KafkaRecord, error) {
	return f.record(k, true, v)
}

// encodeValueFn is encodeFn for values without keys.
type encodeValueFn struct{ encodeFn }

// Setup makes the encoding functions.
func (f *encodeValueFn) Setup() { f.setup() }

// ProcessElement emits v as a record with a null key.
func (f *encodeValueFn) ProcessElement(v beam.X) (KafkaRecord, error) {
	return f.record(nil, false, v)
}

func init() {
	register.DoFn3x1[context.Context, KafkaRecord, func(beam.X, beam.Y), error](&decodeFn{})
	register.Emitter2[beam.X, beam.Y]()
	register.DoFn2x2[beam.X, beam.Y, KafkaRecord, error](&encodeKVFn{})
	register.DoFn1x2[beam.X, KafkaRecord, error](&encodeValueFn{})
}

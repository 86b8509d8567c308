package kafkaio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// KafkaRecord is a Kafka record with everything Kafka keeps of it, as
// ReadRecords gives it and WriteRecords writes it (Beam Java KafkaIO's
// KafkaRecord and ProducerRecord). Unlike the KV<[]byte, []byte> of Read
// and Write, whose bytes coder cannot tell nil from empty, it keeps a null
// key or value (nil) apart from an empty one ([]byte{}): a null-keyed
// record stays null-keyed (and is partitioned as a Java producer would,
// by the producer's partitioner, not by the hash of an empty key), a
// tombstone (null value) stays a tombstone, and its headers, in order,
// with a null header value kept null, cross every stage.
//
// Its coder is this package's (RegisterCoder; encodeKafkaRecord gives the
// layout), so it is the same on every runner.
type KafkaRecord struct {
	// Topic, Partition and Offset say where ReadRecords read the record.
	// WriteRecords ignores them: it writes to its topic, to the partition
	// Write would choose for the key.
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the record's Kafka timestamp (millisecond precision;
	// the zero Time if it has none). LogAppendTime says the broker set it
	// (the topic's message.timestamp.type=LogAppendTime), else the
	// producer did (CreateTime). WriteRecords writes the element's event
	// time as the timestamp, as Write does, not this field: ReadRecords
	// emits each record at this time (or TimestampFn's), and a DoFn that
	// changes the event time says so with its output's timestamp.
	Timestamp     time.Time
	LogAppendTime bool
	// Key and Value are the record's key and value: nil is Kafka's null
	// (no key; a tombstone value), []byte{} an empty one.
	Key, Value []byte
	// Headers are the record's headers in order (a nil Value is a null
	// header value).
	Headers []Header
}

// String describes r for logs and test failures: null and empty are
// told apart.
func (r KafkaRecord) String() string {
	q := func(b []byte) string {
		if b == nil {
			return "null"
		}
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%s/%d@%d key=%s value=%s headers=%d", r.Topic, r.Partition, r.Offset, q(r.Key), q(r.Value), len(r.Headers))
}

// kafkaRecordVersion is the first byte of an encoded KafkaRecord: a later
// layout takes another value, and a decoder refuses one it does not know.
const kafkaRecordVersion = 1

// encodeKafkaRecord is KafkaRecord's coder:
//
//	version (1) | uvarint len(topic) | topic | varint partition |
//	varint offset | varint timestamp (ms since the epoch; flags bit 0
//	says there is one) | flags (bit 0: timestamp, bit 1: LogAppendTime) |
//	nullable key | nullable value | uvarint header count |
//	per header: uvarint len(key) | key | nullable value
//
// where a nullable byte string is uvarint 0 for null, else uvarint
// len+1 and the bytes.
func encodeKafkaRecord(r KafkaRecord) ([]byte, error) {
	b := make([]byte, 0, 32+len(r.Topic)+len(r.Key)+len(r.Value))
	b = append(b, kafkaRecordVersion)
	b = binary.AppendUvarint(b, uint64(len(r.Topic)))
	b = append(b, r.Topic...)
	b = binary.AppendVarint(b, int64(r.Partition))
	b = binary.AppendVarint(b, r.Offset)
	var flags byte
	var ms int64
	if !r.Timestamp.IsZero() {
		flags |= 1
		ms = r.Timestamp.UnixMilli()
	}
	if r.LogAppendTime {
		flags |= 2
	}
	b = binary.AppendVarint(b, ms)
	b = append(b, flags)
	b = appendNullable(b, r.Key)
	b = appendNullable(b, r.Value)
	b = binary.AppendUvarint(b, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = appendNullable(b, h.Value)
	}
	return b, nil
}

func appendNullable(b, v []byte) []byte {
	if v == nil {
		return binary.AppendUvarint(b, 0)
	}
	return append(binary.AppendUvarint(b, uint64(len(v))+1), v...)
}

// errKafkaRecord is wrapped by every error decoding a KafkaRecord.
var errKafkaRecord = errors.New("kafkaio: malformed KafkaRecord encoding")

// decodeKafkaRecord is encodeKafkaRecord's inverse. Its byte strings are
// copies (the SDK may reuse p).
func decodeKafkaRecord(p []byte) (KafkaRecord, error) {
	var r KafkaRecord
	rd := bytes.NewReader(p)
	v, err := rd.ReadByte()
	if err != nil {
		return r, fmt.Errorf("%w: empty", errKafkaRecord)
	}
	if v != kafkaRecordVersion {
		return r, fmt.Errorf("%w: version %d, want %d (written by a newer kafkaio?)", errKafkaRecord, v, kafkaRecordVersion)
	}
	fail := func(what string, err error) (KafkaRecord, error) {
		return KafkaRecord{}, fmt.Errorf("%w: %s at byte %d of %d: %v", errKafkaRecord, what, len(p)-rd.Len(), len(p), err)
	}
	topic, err := readString(rd)
	if err != nil {
		return fail("topic", err)
	}
	r.Topic = topic
	part, err := binary.ReadVarint(rd)
	if err != nil {
		return fail("partition", err)
	}
	r.Partition = int32(part)
	if r.Offset, err = binary.ReadVarint(rd); err != nil {
		return fail("offset", err)
	}
	ms, err := binary.ReadVarint(rd)
	if err != nil {
		return fail("timestamp", err)
	}
	flags, err := rd.ReadByte()
	if err != nil {
		return fail("flags", err)
	}
	if flags > 3 {
		return fail("flags", fmt.Errorf("unknown bits in %#x", flags))
	}
	if flags&1 != 0 {
		r.Timestamp = time.UnixMilli(ms)
	}
	r.LogAppendTime = flags&2 != 0
	if r.Key, err = readNullable(rd); err != nil {
		return fail("key", err)
	}
	if r.Value, err = readNullable(rd); err != nil {
		return fail("value", err)
	}
	n, err := binary.ReadUvarint(rd)
	if err != nil {
		return fail("header count", err)
	}
	if n > uint64(rd.Len()) { // each header takes at least a byte
		return fail("header count", fmt.Errorf("%d headers in %d bytes", n, rd.Len()))
	}
	for i := uint64(0); i < n; i++ {
		k, err := readString(rd)
		if err != nil {
			return fail("header key", err)
		}
		hv, err := readNullable(rd)
		if err != nil {
			return fail("header value", err)
		}
		r.Headers = append(r.Headers, Header{Key: k, Value: hv})
	}
	if rd.Len() != 0 {
		return fail("end", fmt.Errorf("%d bytes left over", rd.Len()))
	}
	return r, nil
}

func readString(rd *bytes.Reader) (string, error) {
	n, err := binary.ReadUvarint(rd)
	if err != nil {
		return "", err
	}
	if n > uint64(rd.Len()) {
		return "", fmt.Errorf("length %d past the end", n)
	}
	b := make([]byte, n)
	_, _ = rd.Read(b)
	return string(b), nil
}

func readNullable(rd *bytes.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(rd)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	n--
	if n > uint64(rd.Len()) {
		return nil, fmt.Errorf("length %d past the end", n)
	}
	b := make([]byte, n)
	_, _ = rd.Read(b)
	return b, nil
}

// kafkaRecordOfMessage is the KafkaRecord of message m (confluent-kafka-go
// gives a null key, value or header value as nil, an empty one as a
// non-nil empty slice: both kept).
func kafkaRecordOfMessage(m *kafka.Message) KafkaRecord {
	var topic string
	if m.TopicPartition.Topic != nil {
		topic = *m.TopicPartition.Topic
	}
	var ts time.Time
	if m.TimestampType != kafka.TimestampNotAvailable {
		ts = m.Timestamp
	}
	var hs []Header
	for _, h := range m.Headers {
		hs = append(hs, Header{Key: h.Key, Value: h.Value})
	}
	return KafkaRecord{Topic: topic, Partition: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset), Timestamp: ts,
		LogAppendTime: m.TimestampType == kafka.TimestampLogAppendTime, Key: m.Key, Value: m.Value, Headers: hs}
}

// ReadRecords reads topic as ReadTopics reads one topic, into a
// PCollection<KafkaRecord>: every record with its topic, partition,
// offset, timestamp, null or empty key and value, and headers, each at
// its event time (its Kafka timestamp, or WithTimestampFn's). The same
// options as Read; the same stage on the kafkastreams runner.
func ReadRecords(s beam.Scope, topic string, opts ...Option) beam.PCollection {
	s = s.Scope("kafkaio.ReadRecords(" + topic + ")")
	c := newConfig([]string{topic}, opts)
	if err := c.Validate(); err != nil {
		panic(err)
	}
	if c.Key != nil || c.Value != nil {
		panic(fmt.Errorf("%w: ReadRecords(%s): a key or value deserializer: a KafkaRecord holds the bytes as they are (use Read for typed keys and values)", ErrConfig, topic))
	}
	if c.Bounded {
		return beam.ParDo(s, &readRecordsFn{readFn: readFn{Config: c}}, beam.Impulse(s))
	}
	return beam.ParDo(s, &unboundedReadRecordsFn{unboundedReadFn: unboundedReadFn{Config: c}}, beam.Impulse(s))
}

// WriteRecords writes col, a PCollection<KafkaRecord>, to topic: each
// element's key (nil: a null key, which the producer's partitioner places
// as a Java producer places a null-keyed record; otherwise the Java
// client's partition for the key, as Write), value (nil: a tombstone) and
// headers, at the element's event time. The record's Topic, Partition,
// Offset and Timestamp fields are not used.
func WriteRecords(s beam.Scope, topic string, col beam.PCollection, opts ...Option) {
	c := newConfig([]string{topic}, opts)
	if err := c.Validate(); err != nil {
		panic(err)
	}
	if c.Key != nil || c.Value != nil {
		panic(fmt.Errorf("%w: WriteRecords(%s): a key or value encoder: a KafkaRecord holds the bytes to write (use Write for typed keys and values)", ErrConfig, topic))
	}
	s = s.Scope("kafkaio.WriteRecords(" + topic + ")")
	if t := col.Type().Type(); t != kafkaRecordType {
		panic(fmt.Errorf("%w: WriteRecords(%s) of a PCollection of %v: want kafkaio.KafkaRecord (Write takes KV<[]byte, []byte>)", ErrConfig, topic, t))
	}
	beam.ParDo0(s, &writeRecordsFn{Config: c}, col)
}

// kafkaRecordType is KafkaRecord's reflect type.
var kafkaRecordType = reflect.TypeOf((*KafkaRecord)(nil)).Elem()

func init() {
	beam.RegisterType(kafkaRecordType)
	beam.RegisterCoder(kafkaRecordType, encodeKafkaRecord, decodeKafkaRecord)
}

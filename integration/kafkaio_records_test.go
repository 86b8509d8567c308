package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
)

// nullable shows b with null and empty told apart.
func nullable(b []byte) string {
	if b == nil {
		return "null"
	}
	return fmt.Sprintf("%q", b)
}

// headerString shows headers in order, a null value as null.
func headerString(keys []string, values [][]byte) string {
	var hs []string
	for i := range keys {
		hs = append(hs, fmt.Sprintf("%q:%s", keys[i], nullable(values[i])))
	}
	return "[" + strings.Join(hs, ",") + "]"
}

// describeKafkaRecord is a ReadRecords element as a line: where it was
// read, its timestamp, its null or empty key and value, its headers.
func describeKafkaRecord(r kafkaio.KafkaRecord) []byte {
	var ks []string
	var vs [][]byte
	for _, h := range r.Headers {
		ks, vs = append(ks, h.Key), append(vs, h.Value)
	}
	return []byte(fmt.Sprintf("%s/%d@%d ts=%d logappend=%v key=%s value=%s headers=%s",
		r.Topic, r.Partition, r.Offset, r.Timestamp.UnixMilli(), r.LogAppendTime, nullable(r.Key), nullable(r.Value), headerString(ks, vs)))
}

func init() {
	register.Function1x1(describeKafkaRecord)
}

// kafkaRecordsPipeline reads topic in whole (ReadRecords, bounded),
// sends the records through a Reshuffle (an internal topic on this
// runner), writes them to out (WriteRecords) and their descriptions to
// desc.
func kafkaRecordsPipeline(in, out, desc string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	recs := beam.Reshuffle(s, kafkaio.ReadRecords(s, in, kafkaio.Bounded()))
	kafkaio.WriteRecords(s, out, recs)
	kafkaio.Write(s, desc, beam.ParDo(s, describeKafkaRecord, recs))
	return p
}

// TestKafkaRecordsKeepNullsAndHeaders (issue 23, "null keys and tombstones
// are lost"): ReadRecords → Reshuffle → WriteRecords keeps what Kafka
// keeps of a record, on this runner and on Prism alike: a null key stays
// null (not ""), placed by the producer's partitioner, an empty key stays
// empty (on the Java client's partition for it), a tombstone (null value)
// stays a tombstone, headers cross in order with a null header value kept
// null, the timestamp is the record's; and each ReadRecords element says
// the topic, partition and offset it was read at. Read → Write of
// KV<[]byte, []byte> wrote ("", "a") for (null, "a") and ("k", "") for a
// tombstone: Beam's bytes coder cannot tell them apart.
func TestKafkaRecordsKeepNullsAndHeaders(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in := uniqueName(t, "in")
	outK, descK, outP, descP := uniqueName(t, "out-ks"), uniqueName(t, "desc-ks"), uniqueName(t, "out-prism"), uniqueName(t, "desc-prism")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(outK, 3), userTopic(descK, 1), userTopic(outP, 3), userTopic(descP, 1)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_000_000
	h := func(kv ...string) []kafka.Header {
		var hs []kafka.Header
		for i := 0; i < len(kv); i += 2 {
			var v []byte
			if kv[i+1] != "<null>" {
				v = []byte(kv[i+1])
			}
			hs = append(hs, kafka.Header{Key: kv[i], Value: v})
		}
		return hs
	}
	p0 := []kafkaenv.Record{
		{Key: nil, Value: []byte("a")},
		{Key: nil, Value: []byte("b"), Headers: h("trace", "t1")},
		{Key: []byte("k"), Value: nil},
		{Key: []byte{}, Value: []byte("e")},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("h"), Value: []byte("v"), Headers: h("trace", "1", "nullh", "<null>", "", "")},
	}
	var p1 []kafkaenv.Record
	for i := 0; i < 20; i++ {
		p1 = append(p1, kafkaenv.Record{Partition: 1, Value: []byte(fmt.Sprint("n", i)), Headers: h("i", fmt.Sprint(i))})
	}
	var wantDesc, wantOut []string
	for part, recs := range [][]kafkaenv.Record{p0, p1} {
		for i := range recs {
			r := &recs[i]
			r.Partition = int32(part)
			r.Timestamp = time.UnixMilli(base + int64(100*part+i))
			var ks []string
			var vs [][]byte
			for _, hd := range r.Headers {
				ks, vs = append(ks, hd.Key), append(vs, hd.Value)
			}
			hs := headerString(ks, vs)
			wantDesc = append(wantDesc, fmt.Sprintf("%s/%d@%d ts=%d logappend=false key=%s value=%s headers=%s",
				in, part, i, r.Timestamp.UnixMilli(), nullable(r.Key), nullable(r.Value), hs))
			wantOut = append(wantOut, fmt.Sprintf("ts=%d key=%s value=%s headers=%s", r.Timestamp.UnixMilli(), nullable(r.Key), nullable(r.Value), hs))
		}
		if err := kafkaenv.Produce(ctx, bs, in, recs...); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(wantDesc)
	slices.Sort(wantOut)

	// check reads out and desc and compares them with what was written.
	check := func(runner, out, desc string) {
		t.Helper()
		got := readValues(t, bs, desc, len(wantDesc), 30*time.Second)
		if strings.Join(got, "\n") != strings.Join(wantDesc, "\n") {
			t.Errorf("%s: ReadRecords elements:\n  %s\nwant\n  %s", runner, strings.Join(got, "\n  "), strings.Join(wantDesc, "\n  "))
		}
		recs, err := kafkaenv.Consume(ctx, bs, out, len(wantOut), kafkaenv.ReadCommitted, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", runner, err)
		}
		var lines []string
		for _, r := range recs {
			var ks []string
			var vs [][]byte
			for _, hd := range r.Headers {
				ks, vs = append(ks, hd.Key), append(vs, hd.Value)
			}
			lines = append(lines, fmt.Sprintf("ts=%d key=%s value=%s headers=%s", r.Timestamp.UnixMilli(), nullable(r.Key), nullable(r.Value), headerString(ks, vs)))
			if r.Key != nil {
				if want := javapartition.ForKey(r.Key, 3); r.Partition != want {
					t.Errorf("%s: key %s on partition %d, want %d (the Java client's partition for it)", runner, nullable(r.Key), r.Partition, want)
				}
			}
		}
		slices.Sort(lines)
		if strings.Join(lines, "\n") != strings.Join(wantOut, "\n") {
			t.Errorf("%s: WriteRecords wrote:\n  %s\nwant\n  %s", runner, strings.Join(lines, "\n  "), strings.Join(wantOut, "\n  "))
		}
	}

	r := runApp(t, ctx, bs, uniqueName(t, "app"), kafkaRecordsPipeline(in, outK, descK))
	check("kafkastreams", outK, descK)
	t.Logf("kafkastreams: %d records, stats %+v", len(wantOut), r.Stats)

	t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs) // kafkaio's DoFns on Prism
	if !beam.Initialized() {
		beam.Init()
	}
	if _, err := prism.Execute(ctx, kafkaRecordsPipeline(in, outP, descP)); err != nil {
		t.Fatalf("prism: %v", err)
	}
	check("prism", outP, descP)
}

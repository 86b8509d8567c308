package integration

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
)

// Issue 23, "Kafka's data model": typed keys and values (string, a user's
// coder) read and written without a hand-written conversion, and a record
// the user's decoder refuses taken by the runner's error policy.

// reading is a user's type with its own Kafka encoding, decimal text;
// nullReading stands for Kafka's null.
type reading int64

const nullReading reading = -1 << 62

// decodeReading is a user's deserializer: decimal text, null as
// nullReading.
func decodeReading(b []byte) (reading, error) {
	if b == nil {
		return nullReading, nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return reading(n), err
}

// encodeReading is decodeReading's inverse: nullReading is written null.
func encodeReading(r reading) ([]byte, error) {
	if r == nullReading {
		return nil, nil
	}
	return []byte(strconv.FormatInt(int64(r), 10)), nil
}

// warmer adds one to a reading (null stays null).
func warmer(k string, r reading) (string, reading) {
	if r != nullReading {
		r++
	}
	return k, r
}

// decodeNotPoison is a user's string deserializer refusing poisonValue.
func decodeNotPoison(b []byte) (string, error) {
	if string(b) == poisonValue {
		return "", errors.New("the decoder refuses the poison value")
	}
	return string(b), nil
}

func init() {
	beam.RegisterType(reflect.TypeOf(reading(0)))
	register.Function1x2(decodeReading)
	register.Function1x2(encodeReading)
	register.Function2x2(warmer)
	register.Function1x2(decodeNotPoison)
}

// typedPipeline reads strs as KV<string, string> and writes it to outS;
// reads nums as KV<string, reading> (decodeReading), adds one and writes
// it to outN (encodeReading).
func typedPipeline(strs, nums, outS, outN string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, outS, kafkaio.Read(s, strs, kafkaio.Bounded(),
		kafkaio.WithKeyDeserializer(kafkaio.StringDeserializer), kafkaio.WithValueDeserializer(kafkaio.StringDeserializer)))
	rs := kafkaio.Read(s, nums, kafkaio.Bounded(), kafkaio.WithKeyDeserializer(kafkaio.StringDeserializer), kafkaio.WithValueDecoder(decodeReading))
	kafkaio.Write(s, outN, beam.ParDo(s, warmer, rs), kafkaio.WithValueEncoder(encodeReading))
	return p
}

// TestKafkaioTypedKeysAndValues: Read with StringDeserializer keys and
// values → Write of KV<string, string> keeps every key and value, an
// empty key or value empty (not null), each key on the Java client's
// partition for it; Read with a user's decoder → a DoFn on the user's
// type → Write with the user's encoder gives every value plus one, and a
// tombstone stays a tombstone (the decoder's null and the encoder's nil);
// on this runner and on Prism alike.
func TestKafkaioTypedKeysAndValues(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	strs, nums := uniqueName(t, "strs"), uniqueName(t, "nums")
	outs := map[string][2]string{}
	specs := []kafkaenv.TopicSpec{userTopic(strs, 2), userTopic(nums, 2)}
	for _, r := range []string{"kafkastreams", "prism"} {
		o := [2]string{uniqueName(t, "out-s-"+r), uniqueName(t, "out-n-"+r)}
		outs[r] = o
		specs = append(specs, userTopic(o[0], 3), userTopic(o[1], 3))
	}
	if err := kafkaenv.CreateTopics(ctx, bs, specs...); err != nil {
		t.Fatal(err)
	}
	var sRecs, nRecs []kafkaenv.Record
	var wantS, wantN []string
	for i := 0; i < 20; i++ {
		k, v := fmt.Sprintf("käse-%d", i), fmt.Sprintf("wert %d ✓", i)
		switch i {
		case 3:
			k = ""
		case 4:
			v = ""
		}
		sRecs = append(sRecs, kafkaenv.Record{Partition: int32(i % 2), Key: []byte(k), Value: []byte(v)})
		wantS = append(wantS, fmt.Sprintf("key=%q value=%q", k, v))
		var nv []byte
		want := "null"
		if i != 5 {
			nv = []byte(strconv.Itoa(10*i - 50))
			want = fmt.Sprintf("%q", strconv.Itoa(10*i-49))
		}
		nRecs = append(nRecs, kafkaenv.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprint("sensor-", i)), Value: nv})
		wantN = append(wantN, fmt.Sprintf("key=%q value=%s", fmt.Sprint("sensor-", i), want))
	}
	if err := kafkaenv.Produce(ctx, bs, strs, sRecs...); err != nil {
		t.Fatal(err)
	}
	if err := kafkaenv.Produce(ctx, bs, nums, nRecs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(wantS)
	slices.Sort(wantN)

	check := func(r string) {
		t.Helper()
		for i, want := range [][]string{wantS, wantN} {
			out := outs[r][i]
			recs, err := kafkaenv.Consume(ctx, bs, out, len(want), kafkaenv.ReadCommitted, 30*time.Second)
			if err != nil {
				t.Fatalf("%s: %s: %v", r, out, err)
			}
			var lines []string
			for _, rec := range recs {
				if rec.Key == nil {
					t.Errorf("%s: %s: a null key, want every key written as its bytes", r, out)
				}
				lines = append(lines, fmt.Sprintf("key=%q value=%s", rec.Key, nullable(rec.Value)))
				if w := javapartition.ForKey(rec.Key, 3); rec.Partition != w {
					t.Errorf("%s: key %q on partition %d, want %d (the Java client's partition for it)", r, rec.Key, rec.Partition, w)
				}
			}
			slices.Sort(lines)
			if strings.Join(lines, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s: %s holds\n  %s\nwant\n  %s", r, out, strings.Join(lines, "\n  "), strings.Join(want, "\n  "))
			}
		}
	}

	res := runApp(t, ctx, bs, uniqueName(t, "app"), typedPipeline(strs, nums, outs["kafkastreams"][0], outs["kafkastreams"][1]))
	check("kafkastreams")
	t.Logf("kafkastreams: stats %+v", res.Stats)

	t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs) // kafkaio's DoFns on Prism
	if !beam.Initialized() {
		beam.Init()
	}
	if _, err := prism.Execute(ctx, typedPipeline(strs, nums, outs["prism"][0], outs["prism"][1])); err != nil {
		t.Fatalf("prism: %v", err)
	}
	check("prism")
}

// undecodablePipeline reads in with string keys and decodeNotPoison's
// values and writes them to out.
func undecodablePipeline(in, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1),
		kafkaio.WithKeyDeserializer(kafkaio.StringDeserializer), kafkaio.WithValueDecoder(decodeNotPoison)))
	return p
}

// TestKafkaioUndecodableRecord: a record the Read's value decoder refuses
// (offset 17 of 40) is neither dropped silently nor a stage failing for
// ever: under --error_policy=fail the job fails naming its topic,
// partition and offset, with the records before it written once; under
// dead_letter it goes to the dead-letter topic as it was read, with its
// origin and the decoder's error, and the 39 others are written once; on
// Prism the job fails naming its partition and offset.
func TestKafkaioUndecodableRecord(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const decodeErr = "undecodable record at partition 0, offset 17: value: the decoder refuses the poison value"

	t.Run("fail", func(t *testing.T) {
		in, out, app := poisonTopics(t, ctx, bs, 40, 17)
		_, took, err := runPoisonJob(t, ctx, bs, app, undecodablePipeline(in, out))
		t.Logf("the job ended after %v: %v", took, err)
		if err == nil {
			t.Fatal("the job ended without an error, want the undecodable record's")
		}
		for _, w := range []string{
			fmt.Sprintf("the record at input topic %s, partition 0, offset 17 fails its bundle alone in its attempt", in),
			"--error_policy=fail",
			fmt.Sprintf("kafkaio.Read(%s): %s", in, decodeErr),
		} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the job's error does not say %q", w)
			}
		}
		if got, w := strings.Join(readValues(t, bs, out, -1, 30*time.Second), "|"), valuesBut(17); got != w {
			t.Errorf("%s holds %q, want the records before the undecodable one, each once: %q", out, got, w)
		}
	})

	t.Run("dead_letter", func(t *testing.T) {
		in, out, app := poisonTopics(t, ctx, bs, 40, 17)
		before := time.Now().UTC()
		res, took, err := runPoisonJob(t, ctx, bs, app, undecodablePipeline(in, out), func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
		t.Logf("the job ended after %v: %v", took, err)
		if err != nil {
			t.Fatalf("the job failed: %v", err)
		}
		if got, w := strings.Join(readValues(t, bs, out, -1, 30*time.Second), "|"), valuesBut(40, 17); got != w {
			t.Errorf("%s holds %q, want every record but the undecodable one, each once: %q", out, got, w)
		}
		dl := checkDeadLetterSaying(t, bs, app+".dead-letters", "k17", poisonValue, "record", in, 17, before, decodeErr)
		if v := header(dl, "trace"); v != "t17" {
			t.Errorf("the dead letter's header trace = %q, want the input record's t17", v)
		}
		checkDeadLetterCount(t, res, header(dl, stage.DeadLetterHeaderStage))
	})

	t.Run("prism", func(t *testing.T) {
		in, out, _ := poisonTopics(t, ctx, bs, 40, 17)
		t.Setenv("KAFKA_BOOTSTRAP_SERVERS", bs)
		if !beam.Initialized() {
			beam.Init()
		}
		_, err := prism.Execute(ctx, undecodablePipeline(in, out))
		t.Logf("prism: %v", err)
		if err == nil || !strings.Contains(err.Error(), decodeErr) {
			t.Errorf("prism's job ended with %v, want an error saying %q", err, decodeErr)
		}
	})
}

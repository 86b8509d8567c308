package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// Issue 23, records in internal topics the runner did not write: a
// well-formed Envelope whose element bytes the reading stage cannot
// decode (garbageElement). Before, its stage failed with "stage: bundle
// failed … after 4 attempts" naming no offset, on every owner, and it
// never reached the dead-letter topic. Now its decode error goes through
// --error_policy: under fail the job ends naming the stage, topic,
// partition and offset and the decode error; under dead_letter the record
// goes to the dead-letter topic with its origin and the job goes on; a
// GroupByKey's record is never set aside, so there it fails naming the
// record under both policies. Each test runs an unbounded job so that the
// record can be written into the internal topic mid-stream.

// garbageElement is the element bytes of the garbage Envelope: too short
// for a windowed value's timestamp (8 bytes), so no coder decodes them.
var garbageElement = []byte{0xde, 0xad}

// garbagePassKV passes (k, v) on: an SDK transform in the stage after a
// Reshuffle, so that the SDK harness decodes the stage's input elements.
func garbagePassKV(k, v []byte, emit func([]byte, []byte)) { emit(k, v) }

func init() {
	register.Function3x0(garbagePassKV)
}

// garbageJob starts p as application app (with set applied) serving its
// pages, after creating in and out (2 partitions each), and returns the
// job's end and the serving address.
func garbageJob(t *testing.T, ctx context.Context, bs, app, in, out string, p *beam.Pipeline, set ...func(*runner.Options)) (<-chan error, string) {
	t.Helper()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 2)); err != nil {
		t.Fatal(err)
	}
	sctx, addrOf := serving(t, ctx)
	done := startJob(sctx, bs, app, p, set...)
	return done, servingAddr(t, addrOf)
}

// writeGarbage writes a well-formed Envelope holding garbageElement, key
// "kx", to partition 0 of application app's one internal data topic, with
// a plain producer as any client with write access could (an element
// record needs no writer header: stage/envelope's trust rule), and returns
// the topic and the record's offset.
func writeGarbage(t *testing.T, bs, app string) (string, int64) {
	t.Helper()
	topics := stageTopics(t, bs, app)
	if len(topics) != 1 {
		t.Fatalf("application %s has internal data topics %v, want one", app, topics)
	}
	topic := topics[0]
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ch := make(chan kafka.Event, 1)
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte("kx"), Value: envelope.EncodeElement(garbageElement)}
	if err := pr.Produce(msg, ch); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-ch:
		m := e.(*kafka.Message)
		if m.TopicPartition.Error != nil {
			t.Fatalf("produce to %s[0]: %v", topic, m.TopicPartition.Error)
		}
		t.Logf("the garbage Envelope is at %s[0]@%d", topic, m.TopicPartition.Offset)
		return topic, int64(m.TopicPartition.Offset)
	case <-time.After(30 * time.Second):
		t.Fatalf("produce to %s[0]: no delivery report in 30 s", topic)
	}
	return "", 0
}

// waitGarbageFails waits up to 90 s for the job to end and checks its
// error is stage.ErrBundleFailed naming the record (topic, partition 0,
// offset) and a decode error, once: not after restarts of the stage's
// clients.
func waitGarbageFails(t *testing.T, done <-chan error, topic string, offset int64, more ...string) {
	t.Helper()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("the job did not end within 90 s of a garbage element at %s[0]@%d", topic, offset)
	}
	t.Logf("the job ended: %v", err)
	if err == nil {
		t.Fatal("the job ended without an error, want the garbage record's")
	}
	for _, w := range append([]string{fmt.Sprintf("input topic %s, partition 0, offset %d", topic, offset), "decode"}, more...) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the job's error does not say %q", w)
		}
	}
	if !errors.Is(err, stage.ErrBundleFailed) {
		t.Errorf("the job's error is not stage.ErrBundleFailed")
	}
	if strings.Contains(err.Error(), "restarted its Kafka clients") {
		t.Errorf("the job's error came after restarts of the stage's clients")
	}
}

// TestGarbageElementAfterReshuffleFails: Read → Reshuffle → ParDo →
// Write under --error_policy=fail; a garbage Envelope in the Reshuffle's
// topic (decoded by the SDK harness in the stage after it) ends the job
// naming the record.
func TestGarbageElementAfterReshuffleFails(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app, in, out := uniqueName(t, "app"), uniqueName(t, "in"), uniqueName(t, "out")
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.ParDo(s, garbagePassKV, beam.Reshuffle(s, kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second)))))
	done, _ := garbageJob(t, ctx, bs, app, in, out, p)
	produceAt(t, bs, in, 0, trustRecords(0, 10)...)
	waitOutput(t, bs, out, 10, done)
	topic, offset := writeGarbage(t, bs, app)
	waitGarbageFails(t, done, topic, offset, "--error_policy=fail")
}

// TestGarbageElementAfterReshuffleDeadLetter: the same under
// --error_policy=dead_letter: the record is in the dead-letter topic with
// its origin (the internal topic, partition 0, its offset; its value the
// element), the job goes on and its output is exact.
func TestGarbageElementAfterReshuffleDeadLetter(t *testing.T) {
	garbageDeadLetter(t, func(s beam.Scope, in beam.PCollection) beam.PCollection {
		return beam.ParDo(s, garbagePassKV, beam.Reshuffle(s, in))
	})
}

// TestGarbageElementAtSinkDeadLetter: Read → Reshuffle → Write, whose
// stage after the Reshuffle has no transform of the user's but the sink
// (its elements are decoded as KafkaRecords for the sink topic), under
// --error_policy=dead_letter: as TestGarbageElementAfterReshuffleDeadLetter.
func TestGarbageElementAtSinkDeadLetter(t *testing.T) {
	garbageDeadLetter(t, func(s beam.Scope, in beam.PCollection) beam.PCollection {
		return beam.Reshuffle(s, in)
	})
}

// garbageDeadLetter runs Read → mid → Write under dead_letter with a
// garbage Envelope written into mid's internal topic after 10 records,
// then 10 more records, and checks the output (v0..v19 once each), the
// dead-letter topic (the one record) and that the job runs on.
func garbageDeadLetter(t *testing.T, mid func(beam.Scope, beam.PCollection) beam.PCollection) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app, in, out := uniqueName(t, "app"), uniqueName(t, "in"), uniqueName(t, "out")
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, mid(s, kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second))))
	done, _ := garbageJob(t, ctx, bs, app, in, out, p, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
	produceAt(t, bs, in, 0, trustRecords(0, 10)...)
	waitOutput(t, bs, out, 10, done)
	topic, offset := writeGarbage(t, bs, app)
	produceAt(t, bs, in, 0, trustRecords(10, 10)...)
	waitOutput(t, bs, out, 20, done)
	recs, err := kafkaenv.Consume(context.Background(), bs, app+".dead-letters", -1, kafkaenv.ReadCommitted, 30*time.Second)
	if err != nil && !errors.Is(err, kafkaenv.ErrTimeout) {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("the dead-letter topic holds %d records, want the garbage one", len(recs))
	}
	dl := recs[0]
	for k, w := range map[string]string{
		stage.DeadLetterHeaderTopic:     topic,
		stage.DeadLetterHeaderPartition: "0",
		stage.DeadLetterHeaderOffset:    strconv.FormatInt(offset, 10),
		stage.DeadLetterHeaderValue:     "element",
	} {
		if v := header(dl, k); v != w {
			t.Errorf("the dead letter's header %s = %q, want %q", k, v, w)
		}
	}
	if string(dl.Value) != string(garbageElement) || string(dl.Key) != "kx" {
		t.Errorf("the dead letter is (%q, %q), want (\"kx\", %q)", dl.Key, dl.Value, garbageElement)
	}
	if m := header(dl, stage.DeadLetterHeaderMessage); !strings.Contains(m, "decode") {
		t.Errorf("the dead letter's message %q names no decode error", m)
	}
	select {
	case err := <-done:
		t.Fatalf("the job ended: %v", err)
	default:
	}
}

// TestGarbageElementGroupByKeyFails: Read → WindowInto → GroupByKey →
// ParDo → Write: a garbage Envelope in the GroupByKey's topic (decoded by
// the runner's GroupByKey head) ends the job naming the record under
// either policy (a GroupByKey's record is never set aside:
// step.Unskippable).
func TestGarbageElementGroupByKeyFails(t *testing.T) {
	for _, policy := range []stage.ErrorPolicy{stage.ErrorPolicyFail, stage.ErrorPolicyDeadLetter} {
		t.Run(string(policy), func(t *testing.T) {
			b := needBroker(t)
			bs := b.BootstrapServers()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			app, in, out := uniqueName(t, "app"), uniqueName(t, "in"), uniqueName(t, "out")
			p, s := beam.NewPipelineWithRoot()
			read := kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second), kafkaio.WithBoundedOutOfOrderness(0))
			windowed := beam.WindowInto(s, window.NewFixedWindows(time.Second), read)
			kafkaio.Write(s, out, beam.ParDo(s, poisonGroup, beam.GroupByKey(s, windowed)))
			done, _ := garbageJob(t, ctx, bs, app, in, out, p, func(o *runner.Options) { o.ErrorPolicy = policy })
			produceAt(t, bs, in, 0, trustRecords(0, 10)...)
			topic, offset := writeGarbage(t, bs, app)
			waitGarbageFails(t, done, topic, offset, "--error_policy="+string(policy))
		})
	}
}

// garbageSideValue is a side input record's value as a string.
func garbageSideValue(_, v []byte) string { return string(v) }

// garbageWithSideCount emits (k, "<v>/<number of side values>").
func garbageWithSideCount(k, v []byte, side func(*string) bool, emit func([]byte, []byte)) {
	n := 0
	var s string
	for side(&s) {
		n++
	}
	emit(k, []byte(fmt.Sprintf("%s/%d", v, n)))
}

func init() {
	register.Function2x1(garbageSideValue)
	register.Function4x0(garbageWithSideCount)
}

// TestGarbageElementInSideInputSkipped: a garbage Envelope in a side
// input's topic is skipped and counted as a record the runner did not
// write (kafkastreams_untrusted_records_total{topic}), as a record that is
// no Envelope is (stage/sideinput: Store.Record, ErrUntrusted), and the
// side input stays what its producer wrote: the main input's records,
// before and after it, each see the 3 side values, once each. Not under
// --error_policy: a side input's record is read whole by every instance
// that runs the stage, outside any transaction that commits its offset,
// so it has no one owner to fail naming it once or to write it to the
// dead-letter topic exactly once. Passed on main already (the side input
// reader splits every element, fnapi.WireElements.Split).
func TestGarbageElementInSideInputSkipped(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app, in, out, sideIn := uniqueName(t, "app"), uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "side")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(sideIn, 1)); err != nil {
		t.Fatal(err)
	}
	produceAt(t, bs, sideIn, 0, trustRecords(0, 3)...)
	p, s := beam.NewPipelineWithRoot()
	side := beam.ParDo(s, garbageSideValue, kafkaio.Read(s, sideIn, kafkaio.Bounded()))
	main := kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second))
	kafkaio.Write(s, out, beam.ParDo(s, garbageWithSideCount, main, beam.SideInput{Input: side}))
	done, addr := garbageJob(t, ctx, bs, app, in, out, p)
	produceAt(t, bs, in, 0, trustRecords(0, 10)...)
	if got := readValues(t, bs, out, 10, time.Minute); len(got) < 10 {
		t.Fatalf("%s holds %d records, want 10", out, len(got))
	}
	var sideTopic string
	for _, topic := range stageTopics(t, bs, app) {
		if strings.Contains(topic, "-side") {
			sideTopic = topic
		}
	}
	if sideTopic == "" {
		t.Fatalf("no side input topic among %v", stageTopics(t, bs, app))
	}
	produceKeyed(t, bs, sideTopic, 0, []byte("kx"), envelope.EncodeElement(garbageElement))
	waitUntrusted(t, addr, sideTopic, 1)
	produceAt(t, bs, in, 0, trustRecords(10, 10)...)
	if got := readValues(t, bs, out, 20, time.Minute); len(got) < 20 {
		t.Fatalf("%s holds %d records, want 20", out, len(got))
	}
	got := readValues(t, bs, out, 0, 30*time.Second) // to the end
	want := map[string]bool{}
	for i := 0; i < 20; i++ {
		want[fmt.Sprintf("v%d/3", i)] = true
	}
	seen := map[string]bool{}
	for _, v := range got {
		if !want[v] || seen[v] {
			t.Fatalf("%s holds %q (%d records), want v0/3..v19/3 once each: %v", out, v, len(got), got)
		}
		seen[v] = true
	}
	if len(seen) != 20 {
		t.Fatalf("%s holds %d records, want v0/3..v19/3 once each: %v", out, len(got), got)
	}
	select {
	case err := <-done:
		t.Fatalf("the job ended: %v", err)
	default:
	}
}

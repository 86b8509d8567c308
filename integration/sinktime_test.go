package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

func init() {
	register.DoFn2x0[[]byte, func(beam.EventTime, []byte, []byte)](&stNowFn{})
	register.Function2x0(stOnes)
	register.Function1x2(stSumRecord)
}

// stNowFn emits two records whose event times are an hour before and a
// day after NowMs (ms): "past" and "future".
type stNowFn struct{ NowMs int64 }

func (f *stNowFn) ProcessElement(_ []byte, emit func(beam.EventTime, []byte, []byte)) {
	emit(mtime.Time(f.NowMs-time.Hour.Milliseconds()), []byte("past"), []byte("p"))
	emit(mtime.Time(f.NowMs+24*time.Hour.Milliseconds()), []byte("future"), []byte("f"))
}

func stOnes(_ []byte, emit func(int)) { emit(1); emit(2) }

func stSumRecord(v int) ([]byte, []byte) { return []byte("sum"), []byte(strconv.Itoa(v)) }

// TestKafkaSinkTimestampsKafkaRefuses: a record's Kafka timestamp is its
// element's event time when the topic takes it, and the time of writing
// when it does not, and the record is written either way. A Kafka 4 broker
// refuses a timestamp more than message.timestamp.after.max.ms (one hour
// by default) ahead of its clock, and with it the transaction: an element
// a day ahead (an early pane of a window that ends tomorrow has such a
// timestamp) failed the stage for ever. And the end of the global window
// (a global Sum's pane) is past what the Kafka client carries: its
// timestamp wrapped to 1969-12-31.
func TestKafkaSinkTimestampsKafkaRefuses(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	out := uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p, s := beam.NewPipelineWithRoot()
	imp := beam.Impulse(s)
	kafkaio.Write(s, out, beam.ParDo(s, &stNowFn{NowMs: start.UnixMilli()}, imp))
	kafkaio.Write(s, out, beam.ParDo(s, stSumRecord, stats.Sum(s, beam.ParDo(s, stOnes, imp))))
	if _, err := beam.Run(withJob(ctx, bs, uniqueName(t, "app")), runner.Name, p); err != nil {
		t.Fatalf("job failed: %v", err)
	}
	end := time.Now()

	got := map[string]*kafka.Message{}
	for _, k := range []string{"past", "future", "sum"} {
		got[k] = readRecord(t, bs, out, k)
	}
	if want := start.Add(-time.Hour).UnixMilli(); got["past"].Timestamp.UnixMilli() != want {
		t.Errorf("past: timestamp %v, want its event time %v", got["past"].Timestamp, time.UnixMilli(want))
	}
	for _, k := range []string{"future", "sum"} {
		ts := got[k].Timestamp
		if ts.Before(start.Add(-time.Second)) || ts.After(end.Add(time.Second)) {
			t.Errorf("%s: timestamp %v, want the time of writing, in [%v, %v]", k, ts, start, end)
		}
	}
	if v := string(got["sum"].Value); v != "3" {
		t.Errorf("sum: value %q, want 3", v)
	}
}

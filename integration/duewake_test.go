package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// dueHead is a head with one pane due at input watermark due (step.Due,
// as a GroupByKey's window end): Advance at or past it returns the
// element "pane" once. It buffers nothing else.
type dueHead struct {
	step.Passthrough
	due   mtime.Time
	fired bool
}

func (h *dueHead) Element(int32, step.In) (step.Work, error) { return step.Work{}, nil }

func (h *dueHead) Advance(_ int32, in mtime.Time) (step.Work, error) {
	if in < h.due || h.fired {
		return step.Work{}, nil
	}
	h.fired = true
	return step.Work{Elements: [][]byte{[]byte("pane")}}, nil
}

func (h *dueHead) NextDue(int32) (mtime.Time, bool) { return h.due, !h.fired }

// runSinkLoop starts a stage loop of cfg whose head's output (Spec.HeadOutput
// "out") is written as it is to the one-partition topic out, and runs it
// until the test ends (then it must return nil). done receives Run's
// result if it returns before.
func runSinkLoop(ctx context.Context, t *testing.T, cfg stage.Config, out string) (loop *stage.Loop, done chan error) {
	t.Helper()
	cfg.Spec.HeadOutput = "out"
	cfg.Spec.Sinks = []step.Sink{{PCollection: "out", Topic: out, Partitions: 1, Decode: func(e []byte) (step.SinkRecord, error) {
		return step.SinkRecord{Value: e}, nil
	}}}
	loop, err := stage.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	done = make(chan error, 1)
	go func() { done <- loop.Run(lctx) }()
	t.Cleanup(func() {
		lcancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return loop, done
}

// TestDueWatermarkFiresBeforeTheCommitInterval: a watermark report that
// makes a pane due (step.Due) ends the stage's poll, so the pane is
// committed at once, not when the commit interval runs out (issue 24:
// in the steady run every GroupByKey pane waited out the rest of its
// stage's 100 ms poll after the report that made it due). The stage's
// commit interval is 4 s; a report below the due time is committed
// first, so the report that makes the pane due arrives at the start of
// a poll: without the wake-up, the pane waits the whole 4 s.
func TestDueWatermarkFiresBeforeTheCommitInterval(t *testing.T) {
	if broker == nil {
		t.Skip("needs a Kafka broker; not under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bs := broker.BootstrapServers()
	app := fmt.Sprintf("duewake-%d", time.Now().UnixNano())
	in, out, report := app+"-in", app+"-out", kafkaclient.ReportTopic(app)
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}, kafkaenv.TopicSpec{Name: out, Partitions: 1}, kafkaenv.TopicSpec{Name: report, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const interval = 4 * time.Second
	loop, done := runSinkLoop(ctx, t, stage.Config{
		BootstrapServers: bs, ReportTopic: report, InstanceID: "duewake", CommitInterval: interval,
		Head: &dueHead{due: 1000},
		Spec: step.Spec{ApplicationID: app, Name: "gbk", InputTopic: in, Partitions: 1, Upstreams: []string{"src"}},
	}, out)
	reportAt := func(wm int64) kafkaenv.Record {
		v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{
			Stage: "src", SourcePartition: 0, CommittedWatermarkMillis: wm, TotalSourcePartitions: 1}}})
		return kafkaenv.Record{Value: v, Headers: []kafka.Header{{Key: envelope.WriterHeader, Value: []byte(app)}}}
	}
	waitFor := func(what string, limit time.Duration, ok func() bool) time.Duration {
		start := time.Now()
		for !ok() {
			select {
			case err := <-done:
				t.Fatalf("stage loop stopped while waiting for %s: %v", what, err)
			case <-time.After(5 * time.Millisecond):
			}
			if time.Since(start) > limit {
				t.Fatalf("%s: not within %v", what, limit)
			}
		}
		return time.Since(start)
	}
	// Below the due time: committed when its poll's interval is out.
	if err := kafkaenv.Produce(ctx, bs, in, reportAt(500)); err != nil {
		t.Fatal(err)
	}
	waitFor("the first commit", time.Minute, func() bool { return loop.Stats().Commits >= 1 })
	if got := loop.Stats().ElementsOut; got != 0 {
		t.Fatalf("a report at 500 ms, below the due 1000 ms, fired %d elements", got)
	}
	// A new poll began with the commit: the due report arrives at its start.
	// From the report's acknowledgement, not from the call, which also
	// makes and closes its producer (ProduceAcked), to the commit that
	// fired the pane (Stats.LastCommit: it, or a later one), not to when
	// the wait saw it: the pane is often committed before that Close ends.
	acked, err := kafkaenv.ProduceAcked(ctx, bs, in, reportAt(1000))
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the due pane", time.Minute, func() bool { return loop.Stats().ElementsOut >= 1 })
	took := loop.Stats().LastCommit.Sub(acked)
	t.Logf("the pane committed %v after the report that made it due was acknowledged (commit interval %v)", took.Round(time.Millisecond), interval)
	if took > interval/4 {
		t.Fatalf("the pane committed %v after the report that made it due was acknowledged; want within %v (a quarter of the %v commit interval), not at the interval's end", took.Round(time.Millisecond), interval/4, interval)
	}
}

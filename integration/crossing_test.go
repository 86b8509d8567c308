package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// aheadHead is a source head whose task watermark is the highest Kafka
// timestamp it took (a Kafka source with no out-of-orderness bound), with
// step.WatermarkAhead; each record is one element, its value.
type aheadHead struct {
	step.Passthrough
	max mtime.Time
}

func (h *aheadHead) Element(_ int32, r step.In) (step.Work, error) {
	h.max = max(h.max, mtime.Time(r.Timestamp))
	return step.Work{Elements: [][]byte{r.Value}}, nil
}

func (h *aheadHead) Hold(int32) mtime.Time { return h.max }

func (h *aheadHead) Idle(int32) bool { return false }

func (h *aheadHead) WatermarkWith(_ int32, ts int64) (mtime.Time, bool) {
	return max(h.max, mtime.Time(ts)), true
}

// TestSourceCommitsAtAWindowEnd: a source stage whose keyed output's
// windows end every second (stage.Config.NextWindowEnd) commits the
// record that carries its watermark past a window's end at once, not
// when its commit interval (4 s here) runs out, so the GroupByKey
// downstream can fire the window (issue 24's steady run: the windowed
// sum's source stage held each window's last records for half its
// 100 ms interval on average). A record that passes no end waits for the
// interval as before.
func TestSourceCommitsAtAWindowEnd(t *testing.T) {
	if broker == nil {
		t.Skip("needs a Kafka broker; not under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bs := broker.BootstrapServers()
	app := fmt.Sprintf("crossing-%d", time.Now().UnixNano())
	in, out, report := app+"-in", app+"-out", kafkaclient.ReportTopic(app)
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}, kafkaenv.TopicSpec{Name: out, Partitions: 1}, kafkaenv.TopicSpec{Name: report, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const interval = 4 * time.Second
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	loop, done := runSinkLoop(ctx, t, stage.Config{
		BootstrapServers: bs, ReportTopic: report, InstanceID: "crossing", CommitInterval: interval,
		Head: &aheadHead{max: mtime.MinTimestamp},
		// Fixed windows of one second.
		NextWindowEnd: func(wm mtime.Time) (mtime.Time, bool) { return wm - (wm-mtime.Time(base))%1000 + 1000, true },
		Spec:          step.Spec{ApplicationID: app, Name: "src", InputTopic: in, Partitions: 1, RawInput: true},
	}, out)
	at := func(ms int64) kafkaenv.Record {
		return kafkaenv.Record{Value: []byte(fmt.Sprint(ms - base)), Timestamp: time.UnixMilli(ms)}
	}
	// committed waits until n input records are committed and returns
	// the time from start to the loop's last commit (Stats.LastCommit:
	// the one that took record n, or a later one), not to when this wait
	// saw it: the caller's producer may still have been closing then.
	committed := func(n uint64, start time.Time) time.Duration {
		for loop.Stats().RecordsIn < n {
			select {
			case err := <-done:
				t.Fatalf("stage loop stopped while waiting for record %d's commit: %v", n, err)
			case <-time.After(5 * time.Millisecond):
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("record %d: not committed within a minute", n)
			}
		}
		return loop.Stats().LastCommit.Sub(start)
	}
	// The first record passes the end after the watermark of no record.
	if err := kafkaenv.Produce(ctx, bs, in, at(base+200)); err != nil {
		t.Fatal(err)
	}
	committed(1, time.Now())
	// A poll began with the commit. Within the window: the interval.
	// Times count from a record's acknowledgement, not from the call, which
	// also makes and closes its producer (ProduceAcked).
	sent, err := kafkaenv.ProduceAcked(ctx, bs, in, at(base+700))
	if err != nil {
		t.Fatal(err)
	}
	if took := committed(2, sent); took < interval/2 {
		t.Fatalf("a record within the window [base, base+1000) committed %v after it was acknowledged; want the %v commit interval's end", took.Round(time.Millisecond), interval)
	}
	// Past the end at base+1000.
	if sent, err = kafkaenv.ProduceAcked(ctx, bs, in, at(base+1000)); err != nil {
		t.Fatal(err)
	}
	took := committed(3, sent)
	t.Logf("the record that passed the window's end committed %v after it was acknowledged (commit interval %v)", took.Round(time.Millisecond), interval)
	if took > interval/4 {
		t.Fatalf("the record that carried the watermark past a window's end committed %v after it was acknowledged; want within %v (a quarter of the %v commit interval), not at the interval's end", took.Round(time.Millisecond), interval/4, interval)
	}
}

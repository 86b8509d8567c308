package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// failOnceHead passes every record through and fails the first attempt
// that holds a record of value in fail: the transaction aborts, the loop
// rewinds the attempt's partitions, and the next attempt takes the
// record.
type failOnceHead struct {
	step.Passthrough
	mu   sync.Mutex
	fail map[string]bool
}

func (h *failOnceHead) Element(p int32, r step.In) (step.Work, error) {
	v := string(r.Value)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail[v] {
		delete(h.fail, v)
		return step.Work{}, fmt.Errorf("%s: failed once on purpose", v)
	}
	return step.Work{Elements: [][]byte{r.Value}}, nil
}

// TestPollDuringCommitRewindsExactlyOnce: a stage polls its next records
// while an attempt commits (stage/prefetch.go). Here attempts fail (a
// head that fails once on each of 20 records): the loop rewinds the
// failed attempt's partitions while it holds their records polled during
// that attempt; those are stale (the consumer delivers them again from
// the committed offset) and must be dropped, or the output holds them
// twice. 4 000 records over 2 partitions, 200 per transaction: every
// record is written once, and records were polled during commits (with
// --poll_during_commit=false, none: the counter says what it counts).
func TestPollDuringCommitRewindsExactlyOnce(t *testing.T) {
	if broker == nil {
		t.Skip("needs a Kafka broker; not under -short")
	}
	for _, serial := range []bool{false, true} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			bs := broker.BootstrapServers()
			app := fmt.Sprintf("prefetch-%d", time.Now().UnixNano())
			in, out, report := app+"-in", app+"-out", kafkaclient.ReportTopic(app)
			if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 2}, kafkaenv.TopicSpec{Name: out, Partitions: 1}, kafkaenv.TopicSpec{Name: report, Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			const n = 4000
			recs := make([]kafkaenv.Record, n)
			fail := map[string]bool{}
			for i := range recs {
				recs[i] = kafkaenv.Record{Partition: int32(i % 2), Value: []byte(fmt.Sprintf("r%05d", i))}
				if i%200 == 77 {
					fail[string(recs[i].Value)] = true
				}
			}
			if err := kafkaenv.Produce(ctx, bs, in, recs...); err != nil {
				t.Fatal(err)
			}
			head := &failOnceHead{fail: fail}
			loop, done := runSinkLoop(ctx, t, stage.Config{
				BootstrapServers: bs, ReportTopic: report, InstanceID: "prefetch", Head: head,
				MaxBatchRecords: 200, PollDuringCommit: !serial,
				Spec: step.Spec{ApplicationID: app, Name: "src", InputTopic: in, Partitions: 2, RawInput: true},
			}, out)
			got, err := kafkaenv.Consume(ctx, bs, out, n, kafkaenv.ReadCommitted, time.Minute)
			if err != nil && !errors.Is(err, kafkaenv.ErrTimeout) {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("stage loop stopped: %v", err)
			default:
			}
			// A moment for a duplicate committed after the n-th record.
			time.Sleep(500 * time.Millisecond)
			if more, err := kafkaenv.Consume(ctx, bs, out, n+1, kafkaenv.ReadCommitted, 2*time.Second); err == nil || errors.Is(err, kafkaenv.ErrTimeout) {
				got = more
			}
			seen := map[string]int{}
			var twice []string
			for _, r := range got {
				if seen[string(r.Value)]++; seen[string(r.Value)] == 2 {
					twice = append(twice, string(r.Value))
				}
			}
			s := loop.Stats()
			t.Logf("%d records written, %d distinct; %d commits, %d aborts, %d records polled during commits", len(got), len(seen), s.Commits, s.Aborts, s.PolledDuringCommit)
			if len(twice) > 0 {
				t.Errorf("%d records written twice, e.g. %q", len(twice), twice[:min(5, len(twice))])
			}
			if len(seen) != n {
				t.Errorf("%d distinct records written, want %d", len(seen), n)
			}
			if s.Aborts < 20 {
				t.Errorf("%d aborted attempts, want at least 20 (one for each failing record)", s.Aborts)
			}
			if serial && s.PolledDuringCommit != 0 {
				t.Errorf("%d records polled during commits serially", s.PolledDuringCommit)
			}
			if !serial && s.PolledDuringCommit == 0 {
				t.Errorf("no record polled during a commit over a backlog of %d", n)
			}
		})
	}
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// TestTopicDeletedStopsTheJob (issue 23, "the cluster changing under the
// job"): a source topic deleted while the job runs, one deleted and
// created again with the same partitions, a sink topic, an internal topic
// between two stages and the dead-letter topic deleted, each end the job
// within seconds (topicGoneWithin) with stage.ErrTopicGone naming the
// topic, and no offset of the records written after the delete is
// committed. Before, a deleted source was a consumer error logged on every
// poll with the watermark stuck, the job running on; a source created
// again was read from its start (Kafka drops a deleted topic's committed
// offsets); a deleted sink was created again by the producer (the
// broker's auto.create.topics.enable) with the broker's default partition
// count. Then (main at 1fc5b1c) a deleted sink or internal topic ended the
// job only after CommitTransaction had waited for its records for the
// transaction call's timeout (30 s), and a deleted dead-letter topic was
// not watched at all.
func TestTopicDeletedStopsTheJob(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	for _, tc := range []struct {
		name string
		// victim is the topic deleted: of in, out and the application app.
		victim   func(t *testing.T, in, out, app string) string
		recreate bool
		// reshuffle puts a Reshuffle (an internal topic) between Read and
		// Write; poison a DoFn failing on the value "poison", under
		// --error_policy=dead_letter.
		reshuffle, poison bool
		want              string
	}{
		{name: "source deleted", victim: func(_ *testing.T, in, _, _ string) string { return in }, want: "no longer exists"},
		{name: "source created again", victim: func(_ *testing.T, in, _, _ string) string { return in }, recreate: true, want: "deleted and created again"},
		{name: "sink deleted", victim: func(_ *testing.T, _, out, _ string) string { return out }, want: "no longer exists"},
		{name: "internal topic deleted", reshuffle: true, want: "no longer exists", victim: func(t *testing.T, _, _, app string) string {
			ts := stageTopics(t, bs, app)
			if len(ts) != 1 {
				t.Fatalf("internal data topics of %s: %v, want the Reshuffle's input", app, ts)
			}
			return ts[0]
		}},
		{name: "dead-letter topic deleted", poison: true, want: "no longer exists", victim: func(_ *testing.T, _, _, app string) string { return app + ".dead-letters" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 2)); err != nil {
				t.Fatal(err)
			}
			var recs []kioRec
			for i := 0; i < 20; i++ {
				recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", i)), value: []byte(fmt.Sprint("v", i)), ts: time.Now().UnixMilli()})
			}
			produceAt(t, bs, in, 0, recs...)
			p, s := beam.NewPipelineWithRoot()
			col := kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second))
			var set []func(*runner.Options)
			if tc.reshuffle {
				col = beam.Reshuffle(s, col)
			}
			if tc.poison {
				col = beam.ParDo(s, poisonErrs, col)
				set = append(set, func(o *runner.Options) { o.ErrorPolicy = stage.ErrorPolicyDeadLetter })
			}
			kafkaio.Write(s, out, col)
			jctx, jcancel := context.WithCancel(ctx)
			defer jcancel()
			done := startJob(jctx, bs, app, p, set...)
			if got := readValues(t, bs, out, 20, 60*time.Second); len(got) != 20 {
				t.Fatalf("before the delete: %d records in %s, want 20", len(got), out)
			}
			victim := tc.victim(t, in, out, app)
			admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			// A sink or internal topic is deleted under a running stream
			// (partition 1 of in, a record every 20 ms): a transaction
			// holding records for it is likely open at the delete.
			stream := victim != in && !tc.poison
			var streamed <-chan struct{}
			sctx, stopStream := context.WithCancel(ctx)
			defer stopStream()
			if stream {
				streamed = streamInto(sctx, t, bs, in, 1)
				time.Sleep(500 * time.Millisecond)
			}
			res, err := admin.DeleteTopics(ctx, []string{victim})
			if err != nil || res[0].Error.Code() != kafka.ErrNoError {
				t.Fatalf("delete %s: %v %v", victim, err, res)
			}
			deleted := time.Now()
			// Records of partition 1 below its end now may have been
			// committed before the delete took effect; none above it.
			var endAtDelete int64
			if victim != in {
				endAtDelete = offsetsOf(t, ctx, admin, in, 2, kafka.LatestOffsetSpec)[1]
			}
			after := recs[:5]
			if tc.poison {
				after = []kioRec{{key: []byte("kp"), value: []byte(poisonValue), ts: time.Now().UnixMilli()}}
			}
			if tc.recreate {
				// Created again as soon as the broker lets it (the delete
				// is asynchronous: TOPIC_ALREADY_EXISTS until it is done).
				for {
					if err := kafkaenv.CreateTopics(ctx, bs, userTopic(victim, 2)); err == nil {
						break
					} else if time.Since(deleted) > 30*time.Second {
						t.Fatalf("create %s again: %v", victim, err)
					}
					time.Sleep(50 * time.Millisecond)
				}
				produceAt(t, bs, victim, 0, after...)
			} else if tc.poison {
				// The poison record's dead letter would go to the deleted
				// topic.
				produceAt(t, bs, in, 1, after...)
			}
			select {
			case err := <-done:
				took := time.Since(deleted).Round(time.Millisecond)
				if !errors.Is(err, stage.ErrTopicGone) || !strings.Contains(err.Error(), "topic "+victim) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("the job ended %v after the delete with %v; want stage.ErrTopicGone naming topic %s (%q)", took, err, victim, tc.want)
				}
				if took > topicGoneWithin {
					t.Fatalf("the job ended %v after topic %s was deleted, want within %v: %v", took, victim, topicGoneWithin, err)
				}
				t.Logf("the job ended %v after the delete: %v", took, err)
			case <-time.After(60 * time.Second):
				t.Fatalf("the job still runs 60 s after topic %s was deleted", victim)
			}
			if victim == out {
				// Not created again by the producer (DescribeTopics, not a
				// metadata request, which could create it itself).
				d, err := admin.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{out}))
				if err == nil && d.TopicDescriptions[0].Error.Code() == kafka.ErrNoError {
					t.Errorf("the deleted sink topic %s exists again, with %d partitions: the runner's producer created it", out, len(d.TopicDescriptions[0].Partitions))
				}
			}
			stopStream()
			if stream {
				<-streamed
			}
			if !tc.recreate && victim != in {
				// Nothing committed past the delete.
				if c := stableCommitted(t, ctx, admin, app, in); c[1] > endAtDelete {
					t.Errorf("offset %d committed on %s[1] after topic %s was deleted (its end then: %d)", c[1], in, victim, endAtDelete)
				} else {
					t.Logf("committed on %s[1]: %d, its end at the delete %d", in, c[1], endAtDelete)
				}
			}
		})
	}
}

// topicGoneWithin bounds the time from a topic's delete to the job's end
// (stage.TopicCheck is 1 s, and a topic must be missing twice).
const topicGoneWithin = 10 * time.Second

// stableCommitted returns the offsets that application app's consumer
// groups committed on topic, by partition (the highest of any group):
// asked with require_stable (KIP-447) until no partition answers an
// error, so an open transaction holding offsets is waited out (aborted or
// committed: the broker's transaction.timeout.ms aborts an abandoned one).
func stableCommitted(t *testing.T, ctx context.Context, admin *kafka.AdminClient, app, topic string) map[int32]int64 {
	t.Helper()
	ls, err := admin.ListConsumerGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, g := range ls.Valid {
		if !strings.HasPrefix(g.GroupID, app+".") {
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
	again:
		res, err := admin.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: g.GroupID}}, kafka.SetAdminRequireStableOffsets(true))
		if err != nil {
			t.Fatal(err)
		}
		for _, gp := range res.ConsumerGroupsTopicPartitions {
			for _, tp := range gp.Partitions {
				if tp.Error != nil {
					if time.Now().After(deadline) {
						t.Fatalf("committed offsets of %s: %v", g.GroupID, tp.Error)
					}
					time.Sleep(500 * time.Millisecond)
					goto again
				}
				if tp.Topic != nil && *tp.Topic == topic && int64(tp.Offset) > out[tp.Partition] {
					out[tp.Partition] = int64(tp.Offset)
				}
			}
		}
	}
	return out
}

// streamInto writes a record to partition p of topic every 20 ms until
// ctx is done; the returned channel is closed when it has stopped.
func streamInto(ctx context.Context, t *testing.T, bs, topic string, p int32) <-chan struct{} {
	done := make(chan struct{})
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "go.delivery.reports": false, "linger.ms": 0})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		defer pr.Close()
		for i := 0; ctx.Err() == nil; i++ {
			v := []byte(fmt.Sprint("s", i))
			_ = pr.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p}, Key: v, Value: v, Timestamp: time.Now()}, nil)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		kafkaclient.Drain(pr, 5*time.Second)
	}()
	return done
}

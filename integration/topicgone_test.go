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
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
)

// TestTopicDeletedStopsTheJob (issue 23, "the cluster changing under the
// job"): a source topic deleted while the job runs, one deleted and
// created again with the same partitions, and a sink topic deleted, each
// end the job within seconds with stage.ErrTopicGone naming the topic.
// Before, a deleted source was a consumer error logged on every poll with
// the watermark stuck, the job running on; a source created again was
// read from its start (Kafka drops a deleted topic's committed offsets);
// a deleted sink was created again by the producer (the broker's
// auto.create.topics.enable) with the broker's default partition count.
func TestTopicDeletedStopsTheJob(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	for _, tc := range []struct {
		name     string
		victim   func(in, out string) string
		recreate bool
		want     string
	}{
		{"source deleted", func(in, _ string) string { return in }, false, "no longer exists"},
		{"source created again", func(in, _ string) string { return in }, true, "deleted and created again"},
		{"sink deleted", func(_, out string) string { return out }, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, out := uniqueName(t, "in"), uniqueName(t, "out")
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
			kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second)))
			jctx, jcancel := context.WithCancel(ctx)
			defer jcancel()
			done := startJob(jctx, bs, uniqueName(t, "app"), p)
			if got := readValues(t, bs, out, 20, 60*time.Second); len(got) != 20 {
				t.Fatalf("before the delete: %d records in %s, want 20", len(got), out)
			}
			victim := tc.victim(in, out)
			admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			res, err := admin.DeleteTopics(ctx, []string{victim})
			if err != nil || res[0].Error.Code() != kafka.ErrNoError {
				t.Fatalf("delete %s: %v %v", victim, err, res)
			}
			deleted := time.Now()
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
				produceAt(t, bs, victim, 0, recs[:5]...)
			} else if victim == out {
				// The next records' output would go to the deleted sink.
				produceAt(t, bs, in, 1, recs[:5]...)
			}
			select {
			case err := <-done:
				if !errors.Is(err, stage.ErrTopicGone) || !strings.Contains(err.Error(), "topic "+victim) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("the job ended %v after the delete with %v; want stage.ErrTopicGone naming topic %s (%q)", time.Since(deleted).Round(time.Millisecond), err, victim, tc.want)
				}
				t.Logf("the job ended %v after the delete: %v", time.Since(deleted).Round(time.Millisecond), err)
			case <-time.After(60 * time.Second):
				// A sink deleted under an open transaction holding its
				// records: CommitTransaction waits for them up to the
				// transaction call's timeout (30 s) before the loop sees
				// ErrTopicGone (seen in CI's container broker).
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
		})
	}
}

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// TestStaticMemberFencedRestarts: with --static_membership, a stage
// consumer fenced by another consumer with its group.instance.id (KIP-345's
// FENCED_INSTANCE_ID, a fatal consumer error: what librdkafka's own rejoin
// does to a static member after a broker failover, its issue 3437) makes
// the stage restart its clients, and the job goes on: a record written
// after the fencing comes out, and the job stops when cancelled.
// confluent-kafka-go v2.11.1's Close never returns on a consumer with a
// fatal error: before the loop gave such a consumer up (closeConsumer),
// the restart hung in Close and neither happened.
func TestStaticMemberFencedRestarts(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}

	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.WithIdleness(-1)))
	produceAt(t, bs, in, 0, kioRec{key: []byte("k"), value: []byte("before"), ts: 1_700_000_000_000})
	jctx, jcancel := context.WithCancel(ctx)
	done := startJob(jctx, bs, app, p, func(o *runner.Options) { o.StaticMembership = true })
	stopped := false
	defer func() {
		if !stopped {
			jcancel()
			select {
			case <-done:
			case <-time.After(45 * time.Second):
				t.Error("the job did not stop within 45 s of its cancellation")
			}
		}
	}()
	if got := readValues(t, bs, out, 1, time.Minute); strings.Join(got, "|") != "before" {
		t.Fatalf("output %q, want \"before\"", got)
	}

	// A stage's group, its static member's group.instance.id, and the
	// stage's input topic.
	group, instance, topic := staticMember(t, ctx, bs, app+".")
	t.Logf("fencing the static member %q of group %s (input %s)", instance, group, topic)
	rogue, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": bs, "group.id": group, "group.instance.id": instance,
		"session.timeout.ms": 6000, "partition.assignment.strategy": "cooperative-sticky",
		"enable.auto.commit": false, "isolation.level": "read_committed",
	})
	if err != nil {
		t.Fatal(err)
	}
	// Never closed: the stage's new consumer fences it in turn, and
	// Close would not return then (see above).
	if err := rogue.Subscribe(topic, nil); err != nil {
		t.Fatal(err)
	}
	fenced := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if e, ok := rogue.Poll(100).(kafka.Error); ok && e.IsFatal() {
			t.Logf("the intruder was fenced back %v after it joined: %v", time.Since(fenced).Round(time.Millisecond), e)
			break
		}
	}

	produceAt(t, bs, in, 0, kioRec{key: []byte("k"), value: []byte("after"), ts: 1_700_000_001_000})
	got := readValues(t, bs, out, 2, 90*time.Second)
	if strings.Join(got, "|") != "after|before" {
		t.Fatalf("output %q %v after the fencing, want \"after\" and \"before\", each once: the fenced stage did not restart its clients", got, time.Since(fenced).Round(time.Millisecond))
	}
	t.Logf("a record written after the fencing came out %v after it", time.Since(fenced).Round(time.Millisecond))
	jcancel()
	select {
	case <-done:
		stopped = true
	case <-time.After(45 * time.Second):
		t.Fatal("the job did not stop within 45 s of its cancellation")
	}
}

// staticMember returns a group (among those whose name starts with prefix)
// with a static member that holds partitions, that member's
// group.instance.id, and the topic of its partitions.
func staticMember(t *testing.T, ctx context.Context, bs, prefix string) (group, instance, topic string) {
	t.Helper()
	ad, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ls, err := ad.ListConsumerGroups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, g := range ls.Valid {
			if strings.HasPrefix(g.GroupID, prefix) {
				ids = append(ids, g.GroupID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		ds, err := ad.DescribeConsumerGroups(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range ds.ConsumerGroupDescriptions {
			for _, m := range g.Members {
				if m.GroupInstanceID != "" && len(m.Assignment.TopicPartitions) > 0 {
					return g.GroupID, m.GroupInstanceID, *m.Assignment.TopicPartitions[0].Topic
				}
			}
		}
	}
	t.Fatal(fmt.Sprintf("no group %s* has a static member with an assignment after 30 s", prefix))
	return "", "", ""
}

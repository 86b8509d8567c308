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
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// TestReadUncommittedSourceTakesStableOffsets: a Kafka source read
// read_uncommitted (kafkaio.WithReadUncommitted) starts its tasks at the
// group's stable committed offsets, as every other stage does. A previous
// owner's transaction that has sent its offsets (records 10 to 19 done,
// their output written) and is committing when the job starts is played by
// a transactional producer of the test's, which commits 3 s after the
// start; the job must wait for it and go on from offset 20. librdkafka
// asks the broker for stable offsets only for a consumer that reads
// read_committed: without the stage's read_committed reader of its
// offsets, the job took offset 10 at once and wrote records 10 to 19 a
// second time.
func TestReadUncommittedSourceTakesStableOffsets(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	value := func(i int) []byte { return []byte(fmt.Sprintf("v%02d", i)) }
	var recs []kioRec
	for i := 0; i < 10; i++ {
		recs = append(recs, kioRec{key: []byte("k"), value: value(i)})
	}
	produceAt(t, bs, in, 0, recs...)
	pipeline := func() *beam.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		kafkaio.Write(s, out, beam.ParDo(s, kioValue, kafkaio.Read(s, in, kafkaio.WithReadUncommitted())))
		return p
	}

	// A first run takes records 0 to 9: the source stage's group commits
	// offset 10. Its group is named after the stage (application id, ".",
	// the stage's name).
	jctx, jcancel := context.WithCancel(ctx)
	done := startJob(jctx, bs, app, pipeline())
	if got := readValues(t, bs, out, 10, time.Minute); len(got) != 10 {
		jcancel()
		t.Fatalf("the first run wrote %d of 10 records: %v (%v)", len(got), got, <-done)
	}
	jcancel()
	if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("the first run: %v", err)
	}
	group := sourceGroup(t, bs, app)

	// Records 10 to 19, and the previous owner's transaction that has
	// processed them: their output and the offset 20, not yet committed.
	recs = recs[:0]
	for i := 10; i < 20; i++ {
		recs = append(recs, kioRec{key: []byte("k"), value: value(i)})
	}
	produceAt(t, bs, in, 0, recs...)
	prev, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "transactional.id": app + "-previous-owner"})
	if err != nil {
		t.Fatal(err)
	}
	defer prev.Close()
	if err := prev.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := prev.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 20; i++ {
		if err := prev.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &out, Partition: 0}, Value: value(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	gm, err := kafka.NewTestConsumerGroupMetadata(group)
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.SendOffsetsToTransaction(ctx, []kafka.TopicPartition{{Topic: &in, Partition: 0, Offset: 20}}, gm); err != nil {
		t.Fatal(err)
	}

	jctx, jcancel = context.WithCancel(ctx)
	defer jcancel()
	started := time.Now()
	done = startJob(jctx, bs, app, pipeline())
	time.Sleep(3 * time.Second)
	if err := prev.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the previous owner's transaction committed %v after the second run's start", time.Since(started).Round(time.Millisecond))
	recs = recs[:0]
	for i := 20; i < 25; i++ {
		recs = append(recs, kioRec{key: []byte("k"), value: value(i)})
	}
	produceAt(t, bs, in, 0, recs...)
	got := readValues(t, bs, out, 25, time.Minute)
	time.Sleep(2 * time.Second) // a duplicate would come with or after record 24
	got = readValues(t, bs, out, 40, 3*time.Second)
	jcancel()
	<-done
	seen := map[string]int{}
	var twice []string
	for _, v := range got {
		if seen[v]++; seen[v] == 2 {
			twice = append(twice, v)
		}
	}
	if len(got) != 25 || len(twice) > 0 {
		t.Fatalf("output of %d records, want v00 to v24 once each: twice %v (the job took the offsets of before the previous owner's transaction)", len(got), twice)
	}
}

// sourceGroup is the consumer group of application app's Kafka source
// stage: app + "." + the stage's name, "s0-kafkaio.Read…".
func sourceGroup(t *testing.T, bs, app string) string {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.ListConsumerGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range res.Valid {
		if strings.HasPrefix(g.GroupID, app+".") && strings.Contains(g.GroupID, "kafkaio.Read") {
			return g.GroupID
		}
	}
	t.Fatalf("no consumer group of %s's Kafka source among %d groups", app, len(res.Valid))
	return ""
}

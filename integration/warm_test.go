package integration

import (
	"context"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
)

// TestBrokerIsWarm checks that the broker kafkaenv.Start launched is warm
// when Start returns: both internal topics exist, every partition has a
// leader, and a transactional producer and a group of ids never seen get
// their coordinators at once. Run alone (-run 'TestBrokerIsWarm$') it sees
// the broker as TestMain got it; without the warm-up the topics do not
// exist then (a broker creates them on the first FindCoordinator).
func TestBrokerIsWarm(t *testing.T) {
	b := needBroker(t)
	if b.Mode() == kafkaenv.ModeExternal {
		t.Skip("the broker is an external cluster (KAFKASTREAMS_KAFKA_MODE=external or KAFKA_BOOTSTRAP_SERVERS set), which kafkaenv does not warm: unset them to test the warm-up of a broker it launches")
	}
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.BootstrapServers()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Before any client of this test asks for a coordinator.
	res, err := admin.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{"__consumer_offsets", "__transaction_state"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.TopicDescriptions {
		if d.Error.Code() != kafka.ErrNoError {
			t.Fatalf("%s: %v (the broker was reported ready before its internal topics existed)", d.Name, d.Error)
		}
		if len(d.Partitions) == 0 {
			t.Fatalf("%s has no partitions", d.Name)
		}
		for _, p := range d.Partitions {
			if p.Leader == nil {
				t.Errorf("%s partition %d has no leader", d.Name, p.Partition)
			}
		}
		t.Logf("%s: %d partitions, each with a leader", d.Name, len(d.Partitions))
	}

	// A new transactional id's InitTransactions and a new group's
	// description answer without waiting for a partition load.
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.BootstrapServers(), "transactional.id": uniqueName(t, "txn")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	begin := time.Now()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatalf("InitTransactions: %v", err)
	}
	t.Logf("InitTransactions of a new transactional id: %v", time.Since(begin).Round(time.Millisecond))
	g, err := admin.DescribeConsumerGroups(ctx, []string{uniqueName(t, "group")})
	if err != nil {
		t.Fatal(err)
	}
	if c := g.ConsumerGroupDescriptions[0].Error.Code(); c != kafka.ErrNoError && c != kafka.ErrGroupIDNotFound {
		t.Fatalf("a new group's description: %v", g.ConsumerGroupDescriptions[0].Error)
	}
}

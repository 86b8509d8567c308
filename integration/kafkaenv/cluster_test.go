package kafkaenv

import (
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// A Cluster makes one admin client and hands it to every use; Stop waits
// for a use in flight before it closes the client, and no use follows
// Stop. No broker is needed: making an admin client connects to nothing
// yet (port 1 on loopback answers nobody).
func TestClusterAdminIsOneClientClosedAfterItsLastUse(t *testing.T) {
	c := &Cluster{bootstrap: "127.0.0.1:1"}
	var first, second *kafka.AdminClient
	if err := c.withAdmin(func(a *kafka.AdminClient) error { first = a; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.withAdmin(func(a *kafka.AdminClient) error { second = a; return nil }); err != nil {
		t.Fatal(err)
	}
	if first == nil || first != second {
		t.Fatalf("two uses got admin clients %p and %p, want one client", first, second)
	}

	inUse, release := make(chan struct{}), make(chan struct{})
	used := make(chan error, 1)
	go func() {
		used <- c.withAdmin(func(a *kafka.AdminClient) error {
			close(inUse)
			<-release
			// The handle is still live (closed under us, this would use
			// a destroyed librdkafka handle): a metadata request that
			// nobody answers times out.
			_, err := a.GetMetadata(nil, false, 100)
			if err == nil {
				return errors.New("metadata from 127.0.0.1:1, where no broker runs")
			}
			return nil
		})
	}()
	<-inUse
	stopped := make(chan struct{})
	go func() { c.closeAdmin(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("closeAdmin returned while a use of the client was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-used; err != nil {
		t.Fatal(err)
	}
	<-stopped
	if c.admin != nil {
		t.Error("the admin client is still set after closeAdmin")
	}
	if _, err := c.Leader("t", 0); !errors.Is(err, ErrClusterStopped) {
		t.Errorf("Leader after Stop: %v, want ErrClusterStopped", err)
	}
	c.closeAdmin() // a second Stop closes nothing twice
}

func TestPartitionStateAllInSync(t *testing.T) {
	for _, c := range []struct {
		st   PartitionState
		want bool
	}{
		{PartitionState{Leader: 3, Replicas: []int{3, 1, 2}, ISR: []int{1, 2, 3}}, true},
		{PartitionState{Leader: 3, Replicas: []int{3, 1, 2}, ISR: []int{3, 1}}, false},
		{PartitionState{Leader: -1, Replicas: []int{3, 1, 2}, ISR: []int{3}}, false},
		{PartitionState{Leader: -1}, false},
	} {
		if got := c.st.AllInSync(); got != c.want {
			t.Errorf("%s: AllInSync %v, want %v", c.st, got, c.want)
		}
	}
}

package runner

import (
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage/kafkasource"
)

// TestStrategyOfLimitedDelay: WithLimitedDelay(d) is kafkasource's
// LimitedDelay with d as its delay, and the runner's --default_idleness
// does not apply to it (its quiet partitions follow the wall clock
// instead of idling out; with idleness the strategy would be refused).
func TestStrategyOfLimitedDelay(t *testing.T) {
	var c kafkaio.Config
	kafkaio.WithLimitedDelay(1500 * time.Millisecond)(&c)
	st := strategyOf(c, 5*time.Minute)
	want := kafkasource.Strategy{Kind: kafkasource.LimitedDelay, MaxOutOfOrderness: 1500 * time.Millisecond}
	if st != want {
		t.Fatalf("strategyOf(WithLimitedDelay(1.5s)) = %+v, want %+v", st, want)
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
}

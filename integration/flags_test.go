package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/kafkastreams/kafkastreams/runner"
)

// TestNonPositiveFlagFailsBeforeAnyTopic: --commit_interval=-1s was accepted
// and the job ran (the stage loops took their default instead). It is now an
// error naming the flag and its value, returned before any topic of the
// application exists.
func TestNonPositiveFlagFailsBeforeAnyTopic(t *testing.T) {
	b := needBroker(t)
	app := uniqueName(t, "app")
	*runner.BootstrapServers = b.BootstrapServers()
	*runner.ApplicationID = app
	old := *runner.CommitInterval
	*runner.CommitInterval = -time.Second
	defer func() { *runner.CommitInterval = old }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p, s := beam.NewPipelineWithRoot()
	_ = beam.Reshuffle(s, beam.ParDo(s, double, beam.Create(s, 1, 2, 3)))
	_, err := beam.Run(ctx, runner.Name, p)
	const want = "kafkastreams: --commit_interval=-1s: must be positive"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("want the error %q, got %v", want, err)
	}
	if got := topicsWithPrefix(t, b.BootstrapServers(), app); len(got) != 0 {
		t.Fatalf("topics exist after a refused flag: %v", got)
	}
	t.Logf("refused as expected: %v", err)
}

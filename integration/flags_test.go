package integration

import (
	"context"
	"flag"
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
	// The command line's path: the flags, read by Execute
	// (runner.OptionsFromFlags).
	setFlag(t, "bootstrap_servers", b.BootstrapServers())
	setFlag(t, "application_id", app)
	setFlag(t, "commit_interval", "-1s")
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

// setFlag sets the command-line flag name to value for the test's duration.
func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag --%s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatalf("--%s=%s: %v", name, value, err)
	}
	t.Cleanup(func() {
		if err := flag.Set(name, old); err != nil {
			t.Errorf("restore --%s=%s: %v", name, old, err)
		}
	})
}

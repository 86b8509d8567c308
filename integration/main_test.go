package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
)

// broker is the one Kafka broker of this package's tests, started by
// TestMain (nil under -short: tests that need it skip).
var broker *kafkaenv.Broker

// TestMain starts one real broker for the package (see kafkaenv.Start for
// where it comes from), runs the tests, and stops it.
func TestMain(m *testing.M) {
	runChildIfAsked() // a child instance (instances_test.go) runs its pipeline and exits
	flag.Parse()
	if testing.Short() {
		fmt.Println("integration: -short: no Kafka broker; tests that need one skip")
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b, err := kafkaenv.Start(ctx, kafkaenv.Options{})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: cannot provide a Kafka broker: %v\n", err)
		os.Exit(1)
	}
	broker = b
	fmt.Printf("integration: broker: %s; ready in %.1fs\n", b.Describe(), b.ReadyIn().Seconds())
	code := m.Run()
	if err := b.Stop(); errors.Is(err, kafkaenv.ErrKilled) {
		// Slow to exit on a loaded machine, but stopped: not a test result.
		fmt.Fprintf(os.Stderr, "integration: stop broker (warning): %v\n", err)
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "integration: stop broker: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// needBroker returns the package's broker, logging where it runs, or skips
// the test under -short.
func needBroker(t *testing.T) *kafkaenv.Broker {
	t.Helper()
	if broker == nil {
		t.Skip("no Kafka broker under -short")
	}
	t.Logf("broker: %s (mode %s, ready in %.1fs)", broker.Describe(), broker.Mode(), broker.ReadyIn().Seconds())
	return broker
}

var nonName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// uniqueName returns a topic, group or transactional id unique to this test
// run: the test name, a suffix and the current time.
func uniqueName(t *testing.T, suffix string) string {
	name := nonName.ReplaceAllString(t.Name(), "_")
	return strings.ToLower(fmt.Sprintf("%s.%s.%d", name, suffix, time.Now().UnixNano()))
}

package kafkaclient

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestConsumerDefaults: a consumer made by NewConsumer gets
// fetch.queue.backoff.ms FetchQueueBackoff (librdkafka's 1 s starved a
// changelog restore: it waited out most of each second with its queue
// empty), a user's value is kept, and the bundled librdkafka takes the
// property (it refuses an unknown one when the client is made; the client
// dials 127.0.0.1 only).
func TestConsumerDefaults(t *testing.T) {
	cm := kafka.ConfigMap{}
	ConsumerDefaults(cm)
	if cm["fetch.queue.backoff.ms"] != int(FetchQueueBackoff.Milliseconds()) {
		t.Fatalf("fetch.queue.backoff.ms %v, want %d", cm["fetch.queue.backoff.ms"], FetchQueueBackoff.Milliseconds())
	}
	cm = GroupConsumerConfig("127.0.0.1:1", map[string]string{"fetch.queue.backoff.ms": "500"}, "g", 0, true, nil)
	ConsumerDefaults(cm)
	if cm["fetch.queue.backoff.ms"] != "500" {
		t.Fatalf("the user's fetch.queue.backoff.ms 500 became %v", cm["fetch.queue.backoff.ms"])
	}
	c, err := NewConsumer(AssignedReaderConfig("127.0.0.1:1", nil, "g"))
	if err != nil {
		t.Fatalf("NewConsumer with the defaults: %v", err)
	}
	c.Close()
}

// TestConsumersAreMadeHere: no code of the module but this package's
// NewConsumer calls kafka.NewConsumer (tests and the integration
// harness aside), so every consumer gets ConsumerDefaults: before it
// the module made consumers in sixteen places of eight packages, none
// with the backoff.
func TestConsumersAreMadeHere(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root %s: %v", root, err)
	}
	self, err := filepath.Abs("consumer.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "integration" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == self {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(src), "\n") {
			if strings.Contains(line, "kafka.NewConsumer(") {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d calls kafka.NewConsumer: make the consumer with kafkaclient.NewConsumer (ConsumerDefaults)", rel, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d source files under %s; the walk missed the module", checked, root)
	}
}

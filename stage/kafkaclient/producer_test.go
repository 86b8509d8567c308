package kafkaclient

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// stuckProducer is a producer whose records never leave: its only broker
// address, 127.0.0.1:1, refuses connections. Its queue holds 10 records.
func stuckProducer(t *testing.T) *kafka.Producer {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 10, "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range p.Events() {
		}
	}()
	return p
}

// flushRunning reports whether a goroutine is inside librdkafka's
// rd_kafka_flush: a C call a Close must not run beside.
func flushRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "rd_kafka_flush")
}

// TestDrainLeavesNoCallRunning: Drain returns after its timeout with the
// records still queued and nothing of the client library running on the
// producer, so a Close right after it is safe. Producer.Flush, which it
// replaces, returned with rd_kafka_flush still running on its own
// goroutine in 7 of 20 calls on this producer (a Close then destroys the
// handle under it).
func TestDrainLeavesNoCallRunning(t *testing.T) {
	p := stuckProducer(t)
	topic := "t"
	for i := 0; i < 10; i++ {
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		start := time.Now()
		// Len counts the 10 records and any error event (the refused
		// connection) not yet read from Events.
		if n := Drain(p, 20*time.Millisecond); n < 10 {
			t.Fatalf("Drain returned %d records left, want the 10 queued", n)
		}
		if d := time.Since(start); d < 20*time.Millisecond || d > 2*time.Second {
			t.Fatalf("Drain(20ms) took %v", d)
		}
		if flushRunning() {
			t.Fatalf("call %d: rd_kafka_flush still runs after Drain returned", i)
		}
	}
	p.Close()
}

// TestProduceWaitsForRoom: on a full queue Produce calls check before each
// wait and returns its error; it leaves nothing of the library running.
func TestProduceWaitsForRoom(t *testing.T) {
	p := stuckProducer(t)
	defer p.Close()
	topic := "t"
	m := func() *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte("v")}
	}
	for i := 0; i < 10; i++ {
		if err := Produce(p, m(), nil, func() error { t.Fatal("check called with room in the queue"); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	errGone := errors.New("the topic is gone")
	checks := 0
	err := Produce(p, m(), nil, func() error {
		if checks++; checks == 3 {
			return errGone
		}
		return nil
	})
	if !errors.Is(err, errGone) || checks != 3 {
		t.Fatalf("Produce on a full queue: err %v after %d checks, want the check's error after 3", err, checks)
	}
	if flushRunning() {
		t.Fatal("rd_kafka_flush runs after Produce returned")
	}
	// Without a check, another error than a full queue is returned at once.
	if err := Produce(p, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: make([]byte, 2<<20)}, nil, nil); err == nil {
		t.Fatal("a record over message.max.bytes was taken")
	}
}

// TestProduceNamesAFatalErrorsCause: once an idempotent producer has met
// a fatal error (here raised by librdkafka's test hook, as a fenced
// transactional producer raises one), Produce returns that error flagged
// fatal, with its code and text, and IsFenced says so; a record it held
// fails in its delivery report with an error FatalCause turns into the
// same. confluent-kafka-go's own Produce returns the bare "Local: Fatal
// error", unflagged, and the delivery report "Local: Purged in queue": a
// plan producer fenced by another instance starting at the same moment
// failed its job with the first (CI, TestTwoInstancesExactlyOnce) instead
// of trying again.
func TestProduceNamesAFatalErrorsCause(t *testing.T) {
	// Idempotent, as every producer of the stages is (a plain producer
	// takes records after a fatal error). No broker: its records wait.
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": true, "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	topic := "t"
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte("v")}
	held := make(chan kafka.Event, 1)
	if err = Produce(p, m, held, nil); err != nil {
		t.Fatalf("before the fatal error: %v", err)
	}
	if code := p.TestFatalError(kafka.ErrFenced, "fenced in a test"); code != kafka.ErrNoError {
		t.Fatalf("TestFatalError: %v", code)
	}
	fatal := func(what string, err error) {
		t.Helper()
		var ke kafka.Error
		if !errors.As(err, &ke) || !ke.IsFatal() || ke.Code() != kafka.ErrFenced || !strings.Contains(err.Error(), "fenced in a test") || !IsFenced(err) {
			t.Errorf("%s: %v (fatal %v, code %v); want the fatal error itself: flagged fatal, code ErrFenced, its text", what, err, ke.IsFatal(), ke.Code())
		}
	}
	raw := p.Produce(m, nil)
	var rk kafka.Error
	if !errors.As(raw, &rk) || rk.Code() != kafka.ErrFatal || rk.IsFatal() {
		t.Fatalf("the client library's Produce now says %v (code %v, fatal %v); this test and FatalCause assume the bare, unflagged ErrFatal", raw, rk.Code(), rk.IsFatal())
	}
	if !IsFenced(raw) {
		t.Errorf("IsFenced(%v) = false", raw)
	}
	fatal("Produce after the fatal error", Produce(p, m, nil, nil))
	select {
	case ev := <-held:
		dr := ev.(*kafka.Message).TopicPartition.Error
		if dr == nil {
			t.Fatal("the held record was delivered without a broker")
		}
		fatal(fmt.Sprintf("the held record's delivery report (%v) through FatalCause", dr), FatalCause(p, dr))
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery report for the held record 10 s after the fatal error")
	}
	healthy := stuckProducer(t)
	defer healthy.Close()
	for _, other := range []kafka.Error{kafka.NewError(kafka.ErrMsgTimedOut, "timed out", false), kafka.NewError(kafka.ErrPurgeQueue, "purged", false)} {
		if got := FatalCause(healthy, other); got != error(other) {
			t.Errorf("FatalCause of a client without a fatal error changed %v into %v", other, got)
		}
	}
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
)

// Issue 23, operating faults: a transaction that outlives
// transaction.timeout.ms. One input element whose DoFn output is large
// (a textio.Read of a whole file, a fan-out) is one attempt, one
// transaction; a slow broker or a producer quota can make its produce
// take longer than the runner's 10 s default. The broker aborts it, and
// before the fix the stage began the same attempt again, to be aborted
// again, for ever (the 10 M-event bench's first stage: 11 times in 16
// minutes, nothing committed).

// txnFanOut is how many records txnFan makes of its one input record, and
// txnFanBytes each one's value size: 3 MB in all. Under txnQuota the
// broker lets a client's first 10 s or so of quota through at once (its
// rate is measured over quota.window.num samples), so the first attempt
// takes 12-15 s, and every later one 30 s (seen: 2.4 MB took 9.7 s).
const (
	txnFanOut   = 3000
	txnFanBytes = 1000
	txnQuota    = "100000" // producer_byte_rate, bytes per second
)

// txnFan emits txnFanOut records for its input record: key "r-<i>", a
// value of txnFanBytes pseudo-random bytes (seeded by i: incompressible,
// and the same in every attempt).
func txnFan(_, _ []byte, emit func([]byte, []byte)) {
	for i := range txnFanOut {
		emit([]byte(fmt.Sprintf("r-%05d", i)), txnValue(i))
	}
}

// txnValue is record i's value.
func txnValue(i int) []byte {
	v := make([]byte, txnFanBytes)
	r := rand.NewChaCha8([32]byte{byte(i), byte(i >> 8)})
	_, _ = r.Read(v)
	return v
}

func init() {
	register.Function3x0(txnFan)
	register.Emitter2[[]byte, []byte]()
}

// txnTimeoutJob writes one record to a new topic and runs kafkaio.Read →
// txnFan → kafkaio.Write under a producer quota of txnQuota bytes/s on a
// client.id of the job's own (Kafka's client quotas throttle the
// producer's requests, as a busy or quota'd cluster does), with
// properties added to the job's. It returns the output topic, the job's
// error and how many times the stage logged the outlived transaction.
func txnTimeoutJob(t *testing.T, ctx context.Context, bs string, props map[string]string, within time.Duration) (out string, jobErr error, outlivedLogs int64) {
	t.Helper()
	in, app, client := uniqueName(t, "in"), uniqueName(t, "app"), uniqueName(t, "client")
	out = uniqueName(t, "out")
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}, kafkaenv.TopicSpec{Name: out, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := kafkaenv.Produce(ctx, bs, in, kafkaenv.Record{Key: []byte("file"), Value: []byte("one element, a large output")}); err != nil {
		t.Fatal(err)
	}
	if err := kafkaenv.SetClientQuotas(ctx, bs, client, map[string]string{"producer_byte_rate": txnQuota}); err != nil {
		t.Fatal(err)
	}
	counter := countLogs(t, "a transaction outlived transaction.timeout.ms")

	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(-1))
	kafkaio.Write(s, out, beam.ParDo(s, txnFan, kvs))
	jctx, jcancel := context.WithTimeout(ctx, within)
	defer jcancel()
	start := time.Now()
	done := startJob(jctx, bs, app, p, func(o *runner.Options) {
		o.KafkaProperties["client.id"] = client
		for k, v := range props {
			o.KafkaProperties[k] = v
		}
	})
	jobErr = <-done
	t.Logf("the job ended after %v: %v", time.Since(start).Round(time.Millisecond), jobErr)
	if jctx.Err() != nil {
		t.Fatalf("the job did not end within %v (the same attempt aborted at its timeout again and again?); it logged the outlived transaction %d times", within, counter.counts[0].Load())
	}
	return out, jobErr, counter.counts[0].Load()
}

// TestTransactionOutlivingTheRunnersTimeoutGetsALongerOne: under the
// runner's own transaction timeout (10 s) the attempt of 3 MB outlives
// it; the stage's clients restart with a producer whose timeout is 4
// times what the attempt took (42 s), logged, and the next attempt (30 s)
// commits: the sink holds each of the 3 000 records once. Without the fix
// the same attempt is aborted again and again, and the job does not end
// within the test's 150 s.
func TestTransactionOutlivingTheRunnersTimeoutGetsALongerOne(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, jobErr, logs := txnTimeoutJob(t, ctx, bs, nil, 150*time.Second)
	if jobErr != nil {
		t.Fatalf("the job failed: %v", jobErr)
	}
	if logs < 1 {
		t.Errorf("the stage never logged an outlived transaction: the attempt was not slowed past 10 s, and the test shows nothing")
	}
	recs, err := kafkaenv.Consume(ctx, bs, out, -1, kafkaenv.ReadCommitted, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range recs {
		var i int
		if _, err := fmt.Sscanf(string(r.Key), "r-%05d", &i); err != nil || string(r.Value) != string(txnValue(i)) {
			t.Fatalf("%s holds a record the job did not make: key %q, %d value bytes", out, r.Key, len(r.Value))
		}
		seen[string(r.Key)]++
	}
	var bad []string
	for k, n := range seen {
		if n != 1 {
			bad = append(bad, fmt.Sprintf("%s ×%d", k, n))
		}
	}
	if len(seen) != txnFanOut || len(bad) > 0 {
		t.Fatalf("%s holds %d records, %d distinct, want each of %d once; repeated: %s", out, len(recs), len(seen), txnFanOut, strings.Join(bad, ", "))
	}
	t.Logf("%s holds each of the %d records once; the outlived transaction was logged %d times", out, txnFanOut, logs)
}

// TestTransactionOutlivingTheUsersTimeoutFails: under a
// transaction.timeout.ms the user set (5 s) the same attempt outlives it
// and the job fails with stage.ErrTransactionTooLong naming the property,
// within a minute, the timeout never raised. Without the fix the job
// never ends.
func TestTransactionOutlivingTheUsersTimeoutFails(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, jobErr, logs := txnTimeoutJob(t, ctx, bs, map[string]string{"transaction.timeout.ms": "5000"}, 90*time.Second)
	if !errors.Is(jobErr, stage.ErrTransactionTooLong) || !strings.Contains(jobErr.Error(), "transaction.timeout.ms=5000") {
		t.Fatalf("the job ended with %v, want stage.ErrTransactionTooLong naming transaction.timeout.ms=5000", jobErr)
	}
	if logs != 0 {
		t.Fatalf("the stage logged a raised timeout %d times under the user's transaction.timeout.ms", logs)
	}
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// What the kill tests check of their kills (issue 23: a kill the test
// counted without checking it landed): that the signal killed a running
// process, and, where a test says so, that the killed instance had a
// transaction open.

// killedBy reports whether err, a child's cmd.Wait result, says the
// process died of sig (and not, say, exited by itself before the signal).
func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// freezeInTransaction stops process p (SIGSTOP) at a moment when open
// says it has a transaction open, and returns open's description; p stays
// stopped, for the caller to SIGKILL. open is asked after the stop and a
// pause, so that a commit p had sent before the stop has completed on the
// broker by then: a transaction open then stays open until p is killed and
// the broker aborts it. When open says no, p is continued and stopped
// again a moment later, until timeout passes; then the test fails.
func freezeInTransaction(t *testing.T, p *os.Process, open func() (string, bool, error), timeout time.Duration) string {
	t.Helper()
	const pause = 500 * time.Millisecond
	deadline := time.Now().Add(timeout)
	for probes := 1; ; probes++ {
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP pid %d: %v", p.Pid, err)
		}
		time.Sleep(pause)
		desc, ok, err := open()
		if err != nil {
			_ = p.Signal(syscall.SIGCONT)
			t.Fatal(err)
		}
		if ok {
			t.Logf("pid %d stopped with a transaction open (probe %d): %s", p.Pid, probes, desc)
			return desc
		}
		if err := p.Signal(syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT pid %d: %v", p.Pid, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d had no transaction open in any of %d probes within %v (last: %s)", p.Pid, probes, timeout, desc)
		}
		time.Sleep(time.Duration(50+rand.Intn(300)) * time.Millisecond)
	}
}

// instanceIDRe finds an instance's id in its log ("kafkastreams: instance
// slot" and "… taken over" lines).
var instanceIDRe = regexp.MustCompile(`msg="kafkastreams: instance slot[^"]*"[^\n]*? instance_id=(\S+)`)

// instanceID is the instance id child c logged, or the test fails.
func instanceID(t *testing.T, log string) string {
	t.Helper()
	m := instanceIDRe.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no instance id in the instance's log:\n%s", tail(log, 4000))
	}
	if s, err := strconv.Unquote(m[1]); err == nil {
		return s
	}
	return m[1]
}

// txnRecord is one record of an application's metrics topic: one
// transaction of a stage of an instance (runner.commitMetricsRecords).
type txnRecord struct {
	offset          int64
	stage, instance string
	elementsIn      uint64
}

// decodeTxnRecord decodes a metrics-topic value; false if it is not a
// stage's transaction record.
func decodeTxnRecord(offset int64, value []byte) (txnRecord, bool) {
	var r fnpb.ProcessBundleResponse
	if err := proto.Unmarshal(value, &r); err != nil {
		return txnRecord{}, false
	}
	for _, mi := range r.GetMonitoringInfos() {
		if mi.GetUrn() != service.URNStageCommit {
			continue
		}
		var m pb.StageCommitMetrics
		if err := proto.Unmarshal(mi.GetPayload(), &m); err != nil {
			return txnRecord{}, false
		}
		return txnRecord{offset: offset, stage: m.GetStage(), instance: m.GetInstance(), elementsIn: m.GetElementsIn()}, true
	}
	return txnRecord{}, false
}

// openTxnProbe tells whether an instance has a transaction open, from the
// application's metrics topic (partition 0), where each transaction of
// each stage writes one record naming its stage and instance: the record
// at the partition's last stable offset is the first of the oldest
// transaction not yet ended, so if it is one of the instance's, that
// instance's transaction is open. Asked while the instance is stopped
// (freezeInTransaction), after a pause, so that a commit it had sent
// before has ended; the test's last word is committedTxn, once the broker
// has ended every transaction.
type openTxnProbe struct {
	topic     string
	instance  string
	unc, comm *kafka.Consumer
	found     txnRecord // the record open found
}

func newOpenTxnProbe(t *testing.T, bs, app, instance string) *openTxnProbe {
	t.Helper()
	pr := &openTxnProbe{topic: kafkaclient.MetricsTopic(app), instance: instance}
	for _, c := range []struct {
		iso string
		dst **kafka.Consumer
	}{{"read_uncommitted", &pr.unc}, {"read_committed", &pr.comm}} {
		k, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": "kafkaenv-probe", "isolation.level": c.iso,
			"enable.auto.commit": false, "enable.partition.eof": true, "fetch.wait.max.ms": 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Close() })
		*c.dst = k
	}
	return pr
}

// open is freezeInTransaction's question: the record at the last stable
// offset of the partition (looked for among its newest 2000) is one of the
// instance's.
func (pr *openTxnProbe) open() (string, bool, error) {
	_, lso, err := pr.comm.QueryWatermarkOffsets(pr.topic, 0, 5000)
	if err != nil {
		return "", false, fmt.Errorf("last stable offset of %s/0: %w", pr.topic, err)
	}
	_, end, err := pr.unc.QueryWatermarkOffsets(pr.topic, 0, 5000)
	if err != nil {
		return "", false, fmt.Errorf("log end offset of %s/0: %w", pr.topic, err)
	}
	if lso >= end {
		return fmt.Sprintf("no transaction open in %s/0 (last stable offset = log end = %d)", pr.topic, end), false, nil
	}
	from := max(end-2000, 0)
	if err := pr.unc.Assign([]kafka.TopicPartition{{Topic: &pr.topic, Partition: 0, Offset: kafka.Offset(from)}}); err != nil {
		return "", false, err
	}
	mine := 0
	for deadline := time.Now().Add(10 * time.Second); from < end; {
		if time.Now().After(deadline) {
			return "", false, fmt.Errorf("read %s/0 from %d to %d: at %d after 10 s", pr.topic, max(end-2000, 0), end, from)
		}
		switch ev := pr.unc.Poll(100).(type) {
		case *kafka.Message:
			off := int64(ev.TopicPartition.Offset)
			from = max(from, off+1)
			r, ok := decodeTxnRecord(off, ev.Value)
			if !ok || r.instance != pr.instance {
				continue
			}
			mine++
			if off == lso {
				pr.found = r
				return fmt.Sprintf("instance %s's transaction of stage %s is open: its record at offset %d of %s/0 is the first of the oldest transaction not ended (the last stable offset; log end %d)", pr.instance, r.stage, off, pr.topic, end), true, nil
			}
		case kafka.PartitionEOF:
			from = max(from, int64(ev.Offset))
		case kafka.Error:
			if ev.IsFatal() {
				return "", false, ev
			}
		}
	}
	return fmt.Sprintf("the oldest transaction not ended in %s/0 (at the last stable offset %d, log end %d) is not instance %s's (%d of its records among the newest)", pr.topic, lso, end, pr.instance, mine), false, nil
}

// committedTxn reports whether the metrics topic's record r, read
// read_committed to the topic's end (every transaction open when the read
// began has ended), is there: false means its transaction was aborted.
func committedTxn(t *testing.T, ctx context.Context, bs, app string, r txnRecord) bool {
	t.Helper()
	topic := kafkaclient.MetricsTopic(app)
	recs, err := kafkaenv.Consume(ctx, bs, topic, 0, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	for _, rec := range recs {
		if rec.Partition == 0 && rec.Offset == r.offset {
			return true
		}
	}
	return false
}

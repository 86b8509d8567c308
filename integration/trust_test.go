package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// Issue 23, "records in internal topics that the runner did not write":
// a record appended to an internal topic by anything but the
// application's runner (a plain producer here) is skipped, committed
// past, logged and counted (kafkastreams_untrusted_records_total), and the
// job's output stays exact. Both tests run Read → Reshuffle → Write on an
// unbounded source, so the Reshuffle's stage reads an internal topic and
// the job runs until the test cancels it.

// trustJob starts Read(in) → Reshuffle → Write(out) as application app
// (in and out of 2 partitions, created here), and returns the job's end
// and the address of its GET /watermarks and /metrics.
func trustJob(t *testing.T, ctx context.Context, bs, app, in, out string) (<-chan error, string) {
	t.Helper()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 2)); err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.Reshuffle(s, kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second))))
	sctx, addrOf := serving(t, ctx)
	done := startJob(sctx, bs, app, p)
	return done, servingAddr(t, addrOf)
}

// trustRecords are n records v<from>..v<from+n-1> for partition 0.
func trustRecords(from, n int) []kioRec {
	var recs []kioRec
	for i := from; i < from+n; i++ {
		recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", i)), value: []byte(fmt.Sprint("v", i)), ts: time.Now().UnixMilli()})
	}
	return recs
}

// waitOutput waits up to a minute for n records in out (failing the test
// if the job ends first) and then checks out holds exactly v0..v<n-1>,
// once each.
func waitOutput(t *testing.T, bs, out string, n int, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("the job ended (%v) while %d records were expected in %s", err, n, out)
		default:
		}
		if got := readValues(t, bs, out, n, 2*time.Second); len(got) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %d records in %s: %d", n, out, len(readValues(t, bs, out, 0, 10*time.Second)))
		}
	}
	got := readValues(t, bs, out, 0, 30*time.Second) // to the end
	want := map[string]bool{}
	for i := 0; i < n; i++ {
		want[fmt.Sprint("v", i)] = true
	}
	seen := map[string]bool{}
	for _, v := range got {
		if !want[v] || seen[v] {
			t.Fatalf("%s holds %q (%d records, want v0..v%d once each): %v", out, v, len(got), n-1, got)
		}
		seen[v] = true
	}
	if len(seen) != n {
		t.Fatalf("%s holds %d records, want v0..v%d once each: %v", out, len(got), n-1, got)
	}
}

// stageTopics are application app's internal data topics (a stage's
// input: "<app>-s…", not a changelog).
func stageTopics(t *testing.T, bs, app string) []string {
	t.Helper()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	md, err := admin.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name := range md.Topics {
		if strings.HasPrefix(name, app+"-s") && !strings.HasSuffix(name, "-changelog") {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no internal data topic of %s", app)
	}
	return out
}

// produceValue writes value (with key "forged": the report topic is
// compacted) to partition p of topic with a plain (non-transactional)
// producer, as any client with write access could.
func produceValue(t *testing.T, bs, topic string, p int32, value []byte) {
	t.Helper()
	produceKeyed(t, bs, topic, p, []byte("forged"), value)
}

// produceKeyed is produceValue with key.
func produceKeyed(t *testing.T, bs, topic string, p int32, key, value []byte) {
	t.Helper()
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ch := make(chan kafka.Event, 1)
	if err := pr.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p}, Key: key, Value: value}, ch); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-ch:
		if m := e.(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatalf("produce to %s[%d]: %v", topic, p, m.TopicPartition.Error)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("produce to %s[%d]: no delivery report in 30 s", topic, p)
	}
}

// untrustedCount reads kafkastreams_untrusted_records_total{topic} of GET
// /metrics at addr (0 without a sample).
func untrustedCount(t *testing.T, addr, topic string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	prefix := fmt.Sprintf("kafkastreams_untrusted_records_total{topic=%q} ", topic)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// waitUntrusted waits up to 20 s for untrustedCount(topic) to be want.
func waitUntrusted(t *testing.T, addr, topic string, want float64) {
	t.Helper()
	var got float64
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = untrustedCount(t, addr, topic); got == want {
			return
		}
	}
	t.Fatalf("kafkastreams_untrusted_records_total{topic=%q} is %v, want %v", topic, got, want)
}

// TestUntrustedRecordInStageTopicIsSkipped: a record that is not an
// Envelope, appended by a plain producer to the Reshuffle stage's input
// topic mid-job, is skipped and counted, and the output is exact. Before
// (main at 9611e85), every attempt of its task failed on it ("is not an
// Envelope"), on every owner, and the job ended with the stage's error.
func TestUntrustedRecordInStageTopicIsSkipped(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app, in, out := uniqueName(t, "app"), uniqueName(t, "in"), uniqueName(t, "out")
	done, addr := trustJob(t, ctx, bs, app, in, out)
	produceAt(t, bs, in, 0, trustRecords(0, 20)...)
	waitOutput(t, bs, out, 20, done)
	topics := stageTopics(t, bs, app)
	for _, topic := range topics {
		for p := int32(0); p < 2; p++ {
			produceValue(t, bs, topic, p, []byte("garbage: not an Envelope \xff\xff"))
		}
	}
	produceAt(t, bs, in, 0, trustRecords(20, 20)...)
	waitOutput(t, bs, out, 40, done)
	for _, topic := range topics {
		waitUntrusted(t, addr, topic, 2)
	}
	select {
	case err := <-done:
		t.Fatalf("the job ended: %v", err)
	default:
	}
}

// TestForgedReportDoesNotEndTheJob: well-formed watermark reports at the
// end of time, for every partition of every stage, written by a plain
// producer to the report topic and (as an Envelope) to the Reshuffle
// stage's input topic, and a drain request in the control topic, are
// skipped and counted: the job runs on and its output is exact. Before
// (main at 9611e85), the report topic's made the embedded
// WatermarkManager see every sink stage at the end of time and the job
// returned as done, mid-stream.
func TestForgedReportDoesNotEndTheJob(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app, in, out := uniqueName(t, "app"), uniqueName(t, "in"), uniqueName(t, "out")
	done, addr := trustJob(t, ctx, bs, app, in, out)
	produceAt(t, bs, in, 0, trustRecords(0, 10)...)
	waitOutput(t, bs, out, 10, done)

	resp, err := http.Get("http://" + addr + "/watermarks")
	if err != nil {
		t.Fatal(err)
	}
	var wms service.WatermarksJSON
	err = json.NewDecoder(resp.Body).Decode(&wms)
	resp.Body.Close()
	if err != nil || len(wms.Stages) == 0 {
		t.Fatalf("GET /watermarks: %v, %d stages", err, len(wms.Stages))
	}
	reports := kafkaclient.ReportTopic(app)
	var forged []*pb.WatermarkReport
	for name, st := range wms.Stages {
		for p := int32(0); p < st.TotalSourcePartitions; p++ {
			r := &pb.WatermarkReport{Stage: name, SourcePartition: p, TotalSourcePartitions: st.TotalSourcePartitions, CommittedWatermarkMillis: int64(mtime.MaxTimestamp)}
			forged = append(forged, r)
			v, _ := proto.Marshal(r)
			produceValue(t, bs, reports, 0, v)
		}
	}
	// The same as a batch in every partition of the stage topics: the
	// Reshuffle's stage would pass the end of time on in its own reports.
	topics := stageTopics(t, bs, app)
	for _, topic := range topics {
		for p := int32(0); p < 2; p++ {
			produceValue(t, bs, topic, p, envelope.EncodeReports(forged))
		}
	}
	// A drain request as runner.Drain writes it, but without the header.
	control := kafkaclient.ControlTopic(app)
	produceKeyed(t, bs, control, 0, []byte("drain"), []byte(`{"by":"a plain producer"}`))
	select {
	case err := <-done:
		t.Fatalf("the job ended (%v) after reports at the end of time and a drain request written by a plain producer", err)
	case <-time.After(5 * time.Second):
	}
	waitUntrusted(t, addr, reports, float64(len(forged)))
	waitUntrusted(t, addr, control, 1)
	produceAt(t, bs, in, 0, trustRecords(10, 10)...)
	waitOutput(t, bs, out, 20, done)
	for _, topic := range topics {
		waitUntrusted(t, addr, topic, 2)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// commitMetricsValue is a metrics-topic value for one committed
// transaction of stage that read recordsIn records, as the runner writes
// it (runner.commitMetricsRecords).
func commitMetricsValue(t *testing.T, stage string, recordsIn uint64) []byte {
	t.Helper()
	payload, err := proto.Marshal(&pb.StageCommitMetrics{Stage: stage, Instance: "vm-1", RecordsIn: recordsIn})
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&fnpb.ProcessBundleResponse{MonitoringInfos: []*pipepb.MonitoringInfo{{Urn: service.URNStageCommit, Payload: payload}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func reportValue(t *testing.T, stage string, p int32, wm int64, total int32) []byte {
	t.Helper()
	b, err := proto.Marshal(&pb.WatermarkReport{Stage: stage, SourcePartition: p, CommittedWatermarkMillis: wm, TotalSourcePartitions: total})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// produceTxn writes values to topic partition 0 in one transaction, and
// commits it or aborts it.
func produceTxn(t *testing.T, ctx context.Context, bootstrap, topic, txnID string, commit bool, values ...[]byte) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "transactional.id": txnID})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if commit {
		err = p.CommitTransaction(ctx)
	} else {
		kafkaclient.Drain(p, 5*time.Second)
		err = p.AbortTransaction(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitStage polls GET /watermarks?stage= until ok accepts the stage or the
// deadline passes.
func waitStage(t *testing.T, addr, stage string, ok func(service.StageJSON) bool) service.StageJSON {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last service.StageJSON
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/watermarks?stage=" + stage)
		if err == nil {
			var body service.WatermarksJSON
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&body) == nil {
				last = body.Stages[stage]
				if ok(last) {
					resp.Body.Close()
					return last
				}
			}
			resp.Body.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("stage %s never got there; last seen %+v", stage, last)
	return last
}

// TestWatermarkServiceOnRealBroker produces reports into a report topic on
// the real broker (a hold, a count change, an aborted transaction and a
// record that is not a report) and checks what the WatermarkManager service
// serves over HTTP and gRPC.
func TestWatermarkServiceOnRealBroker(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := uniqueName(t, "reports")
	if err := kafkaenv.CreateTopics(ctx, b.BootstrapServers(), kafkaenv.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	metricsTopic := uniqueName(t, "metrics")
	if err := kafkaenv.CreateTopics(ctx, b.BootstrapServers(), kafkaenv.TopicSpec{Name: metricsTopic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	srv, err := service.Start(ctx, service.Config{
		Consumer:     service.ConsumerConfig{BootstrapServers: b.BootstrapServers(), Topic: topic},
		HTTPAddr:     "127.0.0.1:0",
		GRPCAddr:     "127.0.0.1:0",
		MetricsTopic: metricsTopic,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	txn := uniqueName(t, "txn")

	// Two of three partitions report: held on partition 2.
	produceTxn(t, ctx, b.BootstrapServers(), topic, txn, true, reportValue(t, "s1", 0, 1000, 3), reportValue(t, "s1", 1, 800, 3))
	st := waitStage(t, srv.HTTPAddr(), "s1", func(s service.StageJSON) bool { return len(s.Partitions) == 3 && s.Partitions["s1:1"].Reported })
	if !st.Held || st.GlobalMs != int64(mtime.MinTimestamp) || len(st.MissingPartitions) != 1 || st.MissingPartitions[0] != 2 {
		t.Fatalf("want held on partition 2, got %+v", st)
	}

	// An aborted transaction's reports must not count.
	produceTxn(t, ctx, b.BootstrapServers(), topic, txn, false, reportValue(t, "s1", 2, 5, 3), reportValue(t, "s1", 1, 9000, 3))
	// A record that is not a report is counted and skipped.
	if err := kafkaenv.Produce(ctx, b.BootstrapServers(), topic, kafkaenv.Record{Value: []byte("\xff\xff not a report")}); err != nil {
		t.Fatal(err)
	}
	produceTxn(t, ctx, b.BootstrapServers(), topic, txn, true, reportValue(t, "s1", 2, 900, 3))
	st = waitStage(t, srv.HTTPAddr(), "s1", func(s service.StageJSON) bool { return !s.Held })
	if st.GlobalMs != 800 || st.MinimumPartition == nil || *st.MinimumPartition != "s1:1" || st.Partitions["s1:1"].WatermarkMs != 800 {
		t.Fatalf("want 800 from partition 1 (the aborted 9000 must not count), got %+v", st)
	}
	if srv.Consumer.Undecodable() != 1 {
		t.Fatalf("undecodable records: %d, want 1", srv.Consumer.Undecodable())
	}

	// The count goes to 4: held again on partition 3, without going back.
	produceTxn(t, ctx, b.BootstrapServers(), topic, txn, true, reportValue(t, "s1", 0, 1100, 4))
	st = waitStage(t, srv.HTTPAddr(), "s1", func(s service.StageJSON) bool { return s.TotalSourcePartitions == 4 })
	if !st.Held || st.GlobalMs != 800 || len(st.MissingPartitions) != 1 || st.MissingPartitions[0] != 3 {
		t.Fatalf("count change: want held at 800 on partition 3, got %+v", st)
	}

	// gRPC: watch sees the release when partition 3 reports.
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := pb.NewWatermarkServiceClient(conn)
	watch, err := cl.WatchWatermarks(ctx, &pb.WatchWatermarksRequest{Stage: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || !m.Held {
		t.Fatalf("first watch message: want held, got %v, %v", m, err)
	}
	produceTxn(t, ctx, b.BootstrapServers(), topic, txn, true, reportValue(t, "s1", 3, 850, 4))
	for {
		m, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if !m.Held {
			if m.WatermarkMillis != 800 || m.MinimumPartition != 1 || !m.Partitions[3].Reported || m.Partitions[3].WatermarkMillis != 850 {
				t.Fatalf("after partition 3 reported 850: want 800 from partition 1, got %v", m)
			}
			break
		}
	}
	got, err := cl.GetWatermarks(ctx, &pb.GetWatermarksRequest{Stage: "s1"})
	if err != nil || got.Stages[0].WatermarkMillis != 800 {
		t.Fatalf("GetWatermarks: %v, %v", got, err)
	}

	// The page's counts come from the metrics topic, read_committed: an
	// aborted transaction's commit record never counts.
	produceTxn(t, ctx, b.BootstrapServers(), metricsTopic, txn, false, commitMetricsValue(t, "s1", 1000))
	produceTxn(t, ctx, b.BootstrapServers(), metricsTopic, txn, true, commitMetricsValue(t, "s1", 40), commitMetricsValue(t, "s1", 2))
	var ps service.PageState
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ps = service.PageState{}
		if getJSONErr("http://"+srv.HTTPAddr()+"/state", &ps) == nil && len(ps.Stages) == 1 && ps.Stages[0].App != nil && ps.Stages[0].App.Commits >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never counted s1's two committed transactions: %+v", ps)
		}
	}
	if a := ps.Stages[0].App; a.RecordsIn != 42 || a.Commits != 2 {
		t.Fatalf("s1 counts %+v, want 42 records in over 2 commits (the aborted 1000 must not count)", a)
	}

	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, want := range []string{`kafkastreams_watermark_millis{stage="s1"} 800`, `kafkastreams_watermark_undecodable_records_total 1`} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

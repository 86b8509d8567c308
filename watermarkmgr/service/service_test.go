package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/watermarkmgr"
)

func rep(stage string, p int32, wm int64, total int32, idle bool) *pb.WatermarkReport {
	return &pb.WatermarkReport{Stage: stage, SourcePartition: p, CommittedWatermarkMillis: wm, TotalSourcePartitions: total, Idle: idle}
}

var fixed = time.UnixMilli(1_790_071_600_000)

func TestTrackerAppliesBatchesPerStage(t *testing.T) {
	tr := NewTracker(func() time.Time { return fixed })
	if err := tr.Apply([]*pb.WatermarkReport{rep("a", 0, 100, 2, false), rep("b", 0, 7, 1, false)}); err != nil {
		t.Fatal(err)
	}
	a, _ := tr.Stage("a")
	if !a.Snapshot.Held || len(a.Snapshot.Missing) != 1 || a.Snapshot.Missing[0] != 1 {
		t.Fatalf("stage a: want held on partition 1, got %+v", a.Snapshot)
	}
	b, _ := tr.Stage("b")
	if b.Snapshot.Held || b.Snapshot.Watermark != 7 {
		t.Fatalf("stage b: want 7, got %+v", b.Snapshot)
	}
	if err := tr.Apply([]*pb.WatermarkReport{rep("a", 1, 50, 2, false)}); err != nil {
		t.Fatal(err)
	}
	a, _ = tr.Stage("a")
	if a.Snapshot.Held || a.Snapshot.Watermark != 50 || a.Snapshot.MinPartition != 1 {
		t.Fatalf("stage a: want 50 defined by partition 1, got %+v", a.Snapshot)
	}
	if _, err := tr.Stage("nope"); !errors.Is(err, ErrUnknownStage) {
		t.Fatalf("unknown stage: got %v", err)
	}
}

func TestTrackerRefusedReportsChangeNothingAndAreCounted(t *testing.T) {
	tr := NewTracker(nil)
	err := tr.Apply([]*pb.WatermarkReport{
		rep("a", 0, 10, 1, false),
		rep("a", 3, 10, 1, false), // partition out of range
		rep("", 0, 10, 1, false),  // no stage
		rep("c", 0, 10, 0, false), // bad total, unknown stage stays unknown
	})
	if err == nil || !errors.Is(err, watermarkmgr.ErrPartitionOutOfRange) || !errors.Is(err, watermarkmgr.ErrInvalidTotal) {
		t.Fatalf("want joined manager errors, got %v", err)
	}
	if !strings.Contains(err.Error(), `stage "a"`) {
		t.Fatalf("error does not name the stage: %v", err)
	}
	a, _ := tr.Stage("a")
	if a.Snapshot.Watermark != 10 || a.Rejected != 1 {
		t.Fatalf("stage a: want wm 10 and 1 rejected, got %+v rejected=%d", a.Snapshot, a.Rejected)
	}
	if _, err := tr.Stage("c"); !errors.Is(err, ErrUnknownStage) {
		t.Fatalf("stage c should not exist after only a bad report: %v", err)
	}
}

func TestHTTPWatermarksShape(t *testing.T) {
	tr := NewTracker(func() time.Time { return fixed })
	_ = tr.Apply([]*pb.WatermarkReport{rep("orders", 0, 1790071560000, 3, false), rep("orders", 1, 1790071260000, 3, false)})
	srv := httptest.NewServer(NewHTTPHandler(tr, nil, nil))
	defer srv.Close()

	var body WatermarksJSON
	getJSON(t, srv.URL+"/watermarks", &body)
	o := body.Stages["orders"]
	if !o.Held || o.State != "held" || o.LagMs != nil || o.GlobalMs != int64(mtime.MinTimestamp) || len(o.MissingPartitions) != 1 || o.MissingPartitions[0] != 2 {
		t.Fatalf("want held on partition 2, got %+v", o)
	}
	if !strings.Contains(o.HeldBecause, "[2]") {
		t.Fatalf("heldBecause does not name partition 2: %q", o.HeldBecause)
	}

	_ = tr.Apply([]*pb.WatermarkReport{rep("orders", 2, 1790071590000, 3, false)})
	getJSON(t, srv.URL+"/watermarks?stage=orders", &body)
	o = body.Stages["orders"]
	if o.Held || o.GlobalMs != 1790071260000 || o.GlobalIso != "2026-09-22T10:01:00.000Z" {
		t.Fatalf("want 10:01, got %+v", o)
	}
	if o.MinimumPartition == nil || *o.MinimumPartition != "orders:1" || !o.Partitions["orders:1"].Minimum || o.Partitions["orders:0"].Minimum {
		t.Fatalf("minimum partition wrong: %+v", o)
	}
	p0 := o.Partitions["orders:0"]
	if p0.WatermarkMs != 1790071560000 || p0.WatermarkIso != "2026-09-22T10:06:00.000Z" || !p0.Reported || p0.LastReportMs == nil || *p0.LastReportMs != fixed.UnixMilli() {
		t.Fatalf("partition 0 wrong: %+v", p0)
	}
	if o.LagMs == nil || *o.LagMs != fixed.UnixMilli()-1790071260000 || o.State != "running" {
		t.Fatalf("lag and state: got %v %q", o.LagMs, o.State)
	}

	resp, err := http.Get(srv.URL + "/watermarks?stage=missing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown stage: got %d", resp.StatusCode)
	}
}

func TestHTTPHealthAndMetrics(t *testing.T) {
	tr := NewTracker(func() time.Time { return fixed })
	_ = tr.Apply([]*pb.WatermarkReport{rep("s", 0, fixed.UnixMilli()-2500, 1, false)})
	healthy := errors.New("report topic not assigned yet")
	srv := httptest.NewServer(NewHTTPHandler(tr, func() error { return healthy }, nil))
	defer srv.Close()

	resp, _ := http.Get(srv.URL + "/healthz")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("unhealthy: got %d", resp.StatusCode)
	}
	healthy = nil
	resp, _ = http.Get(srv.URL + "/healthz")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthy: got %d", resp.StatusCode)
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := new(strings.Builder)
	_, _ = io.Copy(buf, resp.Body)
	for _, want := range []string{`kafkastreams_watermark_lag_seconds{stage="s"} 2.5`, `kafkastreams_watermark_held{stage="s"} 0`} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("metrics lack %q:\n%s", want, buf)
		}
	}
}

func TestGRPCGetAndWatch(t *testing.T) {
	tr := NewTracker(nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterWatermarkServiceServer(gs, NewGRPCServer(tr))
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := pb.NewWatermarkServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := cl.GetWatermarks(ctx, &pb.GetWatermarksRequest{Stage: "x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown stage: want NotFound, got %v", err)
	}
	watch, err := cl.WatchWatermarks(ctx, &pb.WatchWatermarksRequest{Stage: "x"})
	if err != nil {
		t.Fatal(err)
	}
	_ = tr.Apply([]*pb.WatermarkReport{rep("x", 0, 5, 2, false)})
	m, err := watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !m.Held || m.MissingPartitions[0] != 1 {
		t.Fatalf("first watch message: want held on 1, got %v", m)
	}
	_ = tr.Apply([]*pb.WatermarkReport{rep("x", 1, 3, 2, false)})
	m, err = watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.Held || m.WatermarkMillis != 3 || m.MinimumPartition != 1 || !m.Partitions[1].Minimum {
		t.Fatalf("second watch message: want 3 from partition 1, got %v", m)
	}
	got, err := cl.GetWatermarks(ctx, &pb.GetWatermarksRequest{})
	if err != nil || len(got.Stages) != 1 || got.Stages[0].WatermarkMillis != 3 {
		t.Fatalf("GetWatermarks all: %v %v", got, err)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func TestStateWords(t *testing.T) {
	for _, c := range []struct {
		held bool
		wm   mtime.Time
		want string
	}{{true, 5, "held"}, {false, mtime.MinTimestamp, "not started"}, {false, mtime.MaxTimestamp, "end of time"}, {false, 5, "running"}} {
		if got := stateWords(c.held, c.wm); got != c.want {
			t.Errorf("stateWords(%v, %d) = %q, want %q", c.held, c.wm, got, c.want)
		}
	}
}

// TestLagHasNoSampleAtTheEnds: a stage held at the start of time (a
// partition has not reported) and a stage done at the end of time have no
// kafkastreams_watermark_lag_seconds sample (it would read ±9.2e12 s); a
// running stage has its lag. The watermark gauge stays for all three.
func TestLagHasNoSampleAtTheEnds(t *testing.T) {
	tr := NewTracker(func() time.Time { return fixed })
	if err := tr.Apply([]*pb.WatermarkReport{
		rep("held", 0, fixed.UnixMilli()-1000, 2, false), // partition 1 of 2 has not reported
		rep("done", 0, int64(mtime.MaxTimestamp), 1, false),
		rep("running", 0, fixed.UnixMilli()-1500, 1, false),
	}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(tr))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				got[mf.GetName()] = append(got[mf.GetName()], fmt.Sprintf("%s=%g", l.GetValue(), m.GetGauge().GetValue()))
			}
		}
	}
	if lag := strings.Join(got["kafkastreams_watermark_lag_seconds"], " "); lag != "running=1.5" {
		t.Errorf("lag samples %q, want only running=1.5", lag)
	}
	if n := len(got["kafkastreams_watermark_millis"]); n != 3 {
		t.Errorf("%d watermark samples, want 3: %v", n, got["kafkastreams_watermark_millis"])
	}
}

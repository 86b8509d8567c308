package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kafkastreams/kafkastreams/runner/plantopic"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// properties collects repeated --kafka_property key=value flags.
type properties map[string]string

func (p properties) String() string { return fmt.Sprint(map[string]string(p)) }

func (p properties) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	p[k] = v
	return nil
}

func main() {
	props := properties{}
	var (
		bootstrap = flag.String("bootstrap_servers", os.Getenv("KAFKA_BOOTSTRAP_SERVERS"), "Kafka bootstrap.servers (default $KAFKA_BOOTSTRAP_SERVERS)")
		appID     = flag.String("application_id", "", "the kafkastreams application whose watermarks to serve (required unless --report_topic is set)")
		topic     = flag.String("report_topic", "", "report topic to read (default <application_id>-watermarks)")
		httpAddr  = flag.String("http_addr", "127.0.0.1:8089", "HTTP listen address for /watermarks, /healthz, /metrics; empty disables")
		grpcAddr  = flag.String("grpc_addr", "127.0.0.1:8090", "gRPC listen address for kafkastreams.v1.WatermarkService; empty disables")
		stuck     = flag.Duration("watermark_stuck_threshold", service.DefaultStuckAfter, "how long a stage's watermark may stay put before the page and GET /watermarks/explain explain it as stuck")
	)
	flag.Var(props, "kafka_property", "extra librdkafka property key=value (repeatable), e.g. security.protocol=SASL_SSL")
	flag.Parse()
	if *topic == "" && *appID != "" {
		*topic = kafkaclient.ReportTopic(*appID)
	}
	if *bootstrap == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "watermarkmgr: --bootstrap_servers and --application_id (or --report_topic) are required")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	metricsTopic := ""
	if *appID != "" {
		metricsTopic = kafkaclient.MetricsTopic(*appID) // the page's counts
	}
	srv, err := service.Start(ctx, service.Config{
		Consumer:     service.ConsumerConfig{BootstrapServers: *bootstrap, Topic: *topic, Properties: props},
		HTTPAddr:     *httpAddr,
		GRPCAddr:     *grpcAddr,
		MetricsTopic: metricsTopic,
	})
	if err != nil {
		slog.Error("watermarkmgr: cannot start", "err", err)
		os.Exit(1)
	}
	slog.Info("watermarkmgr: serving", "topic", *topic, "http", srv.HTTPAddr(), "grpc", srv.GRPCAddr())
	srv.SetInfo(service.Info{Application: *appID, StuckAfter: *stuck})
	if srv.HTTPAddr() != "" {
		slog.Info("watermarkmgr: try: curl -s http://" + srv.HTTPAddr() + "/watermarks, or open the live page: http://" + srv.HTTPAddr() + "/")
	}
	if *appID != "" {
		go watchPlan(ctx, srv, *bootstrap, props, *appID, *stuck)
	}
	<-ctx.Done()
	if err := srv.Stop(); err != nil {
		slog.Error("watermarkmgr: stopped with an error", "err", err)
		os.Exit(1)
	}
}

// planRetry is how often watchPlan asks the plan topic again while it holds
// no plan (the application has not started yet).
// One second: the page draws no graph until then, and a job like make
// run-stream's is half done in 5 s.
const planRetry = time.Second

// watchPlan reads the application's plan (the stage graph) from its plan
// topic, asking again every planRetry until there is one, and gives it to
// the service's page and explanations.
func watchPlan(ctx context.Context, srv *service.Server, bootstrap string, props map[string]string, appID string, stuck time.Duration) {
	for {
		pl, err := plantopic.ReadNew(ctx, bootstrap, props, appID, appID+"-plan-watermarkmgr")
		switch {
		case err != nil:
			slog.Warn("watermarkmgr: cannot read the plan yet; the page shows no stage graph until it can", "err", err)
		case pl != nil:
			srv.SetInfo(service.Info{Application: appID, Stages: plantopic.StageInfos(pl), StuckAfter: stuck})
			slog.Info("watermarkmgr: read the application's plan", "stages", len(pl.Stages))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(planRetry):
		}
	}
}

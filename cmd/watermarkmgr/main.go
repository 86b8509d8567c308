package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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

// String is the settings as kafkaclient.FormatProperties prints them: a
// secret property's value reads "***".
func (p properties) String() string { return kafkaclient.FormatProperties(p) }

func (p properties) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	p[k] = v
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr, slog.Default().Handler()))
}

// run is the command with its arguments args (without the program's name),
// writing usage to stderr and its log lines to h through
// kafkaclient.RedactHandler with the --kafka_property settings (no line
// shows a secret property's value, whatever error it quotes). It serves
// until ctx is done and returns the exit status: 0 after a clean stop, 1
// when the service cannot start or stops with an error, 2 for bad flags.
func run(ctx context.Context, args []string, stderr io.Writer, h slog.Handler) int {
	props := properties{}
	fs := flag.NewFlagSet("watermarkmgr", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		bootstrap = fs.String("bootstrap_servers", os.Getenv("KAFKA_BOOTSTRAP_SERVERS"), "Kafka bootstrap.servers (default $KAFKA_BOOTSTRAP_SERVERS)")
		appID     = fs.String("application_id", "", "the kafkastreams application whose watermarks to serve (required unless --report_topic is set)")
		topic     = fs.String("report_topic", "", "report topic to read (default <application_id>-watermarks)")
		httpAddr  = fs.String("http_addr", "127.0.0.1:8089", "HTTP listen address for /watermarks, /healthz, /metrics; empty disables. On a loopback address only requests for localhost, a loopback address or this address's host are served (DNS rebinding); on another address or the wildcard, any")
		grpcAddr  = fs.String("grpc_addr", "127.0.0.1:8090", "gRPC listen address for kafkastreams.v1.WatermarkService; empty disables")
		stuck     = fs.Duration("watermark_stuck_threshold", service.DefaultStuckAfter, "how long a stage's watermark may stay put before the page and GET /watermarks/explain explain it as stuck")
	)
	fs.Var(props, "kafka_property", "extra librdkafka property key=value (repeatable), e.g. security.protocol=SASL_SSL; the values of secret ones (kafkaclient.SecretProperty: sasl.password, …) are never printed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(kafkaclient.RedactHandler(h, props))
	if *topic == "" && *appID != "" {
		*topic = kafkaclient.ReportTopic(*appID)
	}
	if *bootstrap == "" || *topic == "" {
		fmt.Fprintln(stderr, "watermarkmgr: --bootstrap_servers and --application_id (or --report_topic) are required")
		fs.Usage()
		return 2
	}
	metricsTopic := ""
	if *appID != "" {
		metricsTopic = kafkaclient.MetricsTopic(*appID) // the page's counts
	}
	srv, err := service.Start(ctx, service.Config{
		// With --application_id, reports without the application's header
		// (envelope.WriterHeader) are skipped and counted (issue 23).
		Consumer:     service.ConsumerConfig{BootstrapServers: *bootstrap, Topic: *topic, Properties: props, ApplicationID: *appID},
		HTTPAddr:     *httpAddr,
		GRPCAddr:     *grpcAddr,
		MetricsTopic: metricsTopic,
		Logger:       log,
	})
	if err != nil {
		log.Error("watermarkmgr: cannot start", "err", err)
		return 1
	}
	log.Info("watermarkmgr: serving", "topic", *topic, "http", srv.HTTPAddr(), "grpc", srv.GRPCAddr(), "bootstrap_servers", *bootstrap, "kafka_properties", props.String())
	srv.SetInfo(service.Info{Application: *appID, StuckAfter: *stuck})
	if srv.HTTPAddr() != "" {
		log.Info("watermarkmgr: try: curl -s http://" + srv.HTTPAddr() + "/watermarks, or open the live page: http://" + srv.HTTPAddr() + "/")
	}
	if *appID != "" {
		go watchPlan(ctx, log, srv, *bootstrap, props, *appID, *stuck)
	}
	<-ctx.Done()
	if err := srv.Stop(); err != nil {
		log.Error("watermarkmgr: stopped with an error", "err", err)
		return 1
	}
	return 0
}

// planRetry is how often watchPlan asks the plan topic again while it holds
// no plan (the application has not started yet).
// One second: the page draws no graph until then, and a job like make
// run-stream's is half done in 5 s.
const planRetry = time.Second

// watchPlan reads the application's plan (the stage graph) from its plan
// topic, asking again every planRetry until there is one, and gives it to
// the service's page and explanations.
func watchPlan(ctx context.Context, log *slog.Logger, srv *service.Server, bootstrap string, props map[string]string, appID string, stuck time.Duration) {
	for {
		pl, err := plantopic.ReadNew(ctx, bootstrap, props, appID, appID+"-plan-watermarkmgr")
		switch {
		case err != nil:
			log.Warn("watermarkmgr: cannot read the plan yet; the page shows no stage graph until it can", "err", err)
		case pl != nil:
			srv.SetInfo(service.Info{Application: appID, Stages: plantopic.StageInfos(pl), StuckAfter: stuck})
			log.Info("watermarkmgr: read the application's plan", "stages", len(pl.Stages))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(planRetry):
		}
	}
}

package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// Config configures a Server.
type Config struct {
	// Consumer says which report topic to read and how.
	Consumer ConsumerConfig
	// HTTPAddr is where GET /watermarks, /healthz and /metrics listen, e.g.
	// "127.0.0.1:8089"; ":0"-style ports pick a free one; empty disables HTTP.
	HTTPAddr string
	// GRPCAddr is where kafkastreams.v1.WatermarkService listens; empty disables gRPC.
	GRPCAddr string
	// MetricsTopic, if set, is the application's metrics topic
	// (kafkaclient.MetricsTopic), read read_committed with the Consumer's brokers and
	// properties into Server.Counts: the page then shows the application's
	// counts per stage (cmd/watermarkmgr). Empty: not read (an instance
	// shows its own counts, Info.Local).
	MetricsTopic string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is the running WatermarkManager service: a Consumer feeding a
// Tracker, served over HTTP and gRPC.
type Server struct {
	Tracker  *Tracker
	Consumer *Consumer
	// Counts are the application's counts from Config.MetricsTopic; nil
	// without one.
	Counts *AppCounts
	// Registry is what GET /metrics serves; an embedding process registers
	// its own collectors on it (the runner: late elements dropped per stage).
	Registry *prometheus.Registry
	// Untrusted is kafkastreams_untrusted_records_total{topic}, registered
	// on Registry: records of the application's internal topics skipped
	// because its runner did not write them (stage/envelope's trust
	// rules). The Consumer counts the report topic's; an embedding
	// runner counts its stages' and side inputs' here too.
	Untrusted *prometheus.CounterVec

	httpLis, grpcLis net.Listener
	httpSrv          *http.Server
	endStreams       context.CancelFunc // ends every open request (newHTTPServer)
	grpcSrv          *grpc.Server
	cancel           context.CancelFunc
	wg               sync.WaitGroup
	runErr           error
	info             infoBox
}

// SetInfo gives the service the stage graph and this instance's tasks
// (Info): the page, GET /watermarks/explain and the explanations use it
// from then on. Safe at any time.
func (s *Server) SetInfo(i Info) { s.info.set(i) }

// Info returns what SetInfo last set.
func (s *Server) Info() Info { return s.info.get() }

// infoWithCounts is Info with App set to the metrics topic's counts when
// the server reads them and SetInfo did not set App.
func (s *Server) infoWithCounts() Info {
	i := s.info.get()
	if i.App == nil && s.Counts != nil {
		i.App = s.Counts.Stages
	}
	return i
}

// Start opens the listeners and starts reading the report topic. It returns
// an error naming the address if a listener cannot be opened (e.g. the port
// is in use). Stop releases everything.
//
// No secret property of cfg.Consumer.Properties (kafkaclient.SecretProperty)
// is shown by what the service says: its log lines go through
// kafkaclient.RedactHandler, and its errors, Start's and the one GET
// /healthz serves, through kafkaclient.RedactError.
//
// The HTTP server (newHTTPServer) has read, write and idle timeouts,
// refuses requests for other hosts when it listens on a loopback address
// (hostGuard), serves at most MaxEventStreams GET /events streams, and
// Stop ends those streams.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	props := cfg.Consumer.Properties
	cfg.Logger = slog.New(kafkaclient.RedactHandler(cfg.Logger.Handler(), props))
	cfg.Consumer.Logger = cfg.Logger
	s := &Server{Tracker: NewTracker(nil), Registry: prometheus.NewRegistry()}
	if cfg.MetricsTopic != "" {
		s.Counts = NewAppCounts()
	}
	s.Untrusted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kafkastreams_untrusted_records_total",
		Help: "Records of the application's internal topics that its runner did not write (not an Envelope or a WatermarkReport, watermark reports without the application's header kafkastreams.application_id, a report of a stage or partition the plan does not have), by topic: each skipped, its offset committed like any consumed record, and logged.",
	}, []string{"topic"})
	s.Registry.MustRegister(s.Untrusted)
	if cfg.Consumer.Untrusted == nil {
		cfg.Consumer.Untrusted = s.Untrusted.WithLabelValues(cfg.Consumer.Topic).Inc
	}
	c, err := NewConsumer(cfg.Consumer, s.Tracker)
	if err != nil {
		return nil, kafkaclient.RedactError(err, props)
	}
	s.Consumer = c
	if cfg.HTTPAddr != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			c.c.Close()
			return nil, fmt.Errorf("watermarkmgr/service: HTTP listener on %s: %w", cfg.HTTPAddr, err)
		}
		reg := s.Registry
		reg.MustRegister(NewCollector(s.Tracker), collectors.NewGoCollector(),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "kafkastreams_watermark_undecodable_records_total",
				Help: "Records on the report topic that did not decode as a WatermarkReport and were skipped.",
			}, func() float64 { return float64(c.Undecodable()) }))
		health := func() error { return kafkaclient.RedactError(c.Health(), props) }
		s.setHTTP(NewHTTPHandlerWith(s.Tracker, health, reg, s.infoWithCounts), cfg.HTTPAddr)
	}
	if cfg.GRPCAddr != "" {
		if s.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			c.c.Close()
			if s.httpLis != nil {
				s.httpLis.Close()
			}
			return nil, fmt.Errorf("watermarkmgr/service: gRPC listener on %s: %w", cfg.GRPCAddr, err)
		}
		s.grpcSrv = grpc.NewServer()
		pb.RegisterWatermarkServiceServer(s.grpcSrv, NewGRPCServer(s.Tracker))
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.runErr = c.Run(ctx)
	}()
	if cfg.MetricsTopic != "" {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := readMetrics(ctx, cfg.Logger, cfg.Consumer.BootstrapServers, cfg.Consumer.Properties, cfg.MetricsTopic, cfg.Consumer.ApplicationID, s.Untrusted.WithLabelValues(cfg.MetricsTopic).Inc, s.Counts); err != nil {
				cfg.Logger.Error("watermarkmgr: stopped reading the metrics topic; the page shows no counts", "err", err)
			}
		}()
	}
	if s.httpSrv != nil {
		go s.serveHTTP(cfg.Logger)
	}
	if s.grpcSrv != nil {
		go func() { _ = s.grpcSrv.Serve(s.grpcLis) }()
	}
	return s, nil
}

// setHTTP makes the HTTP server of h on s.httpLis (newHTTPServer),
// configured the address Config.HTTPAddr asked for.
func (s *Server) setHTTP(h http.Handler, configured string) {
	s.httpSrv, s.endStreams = newHTTPServer(h, s.httpLis, configured)
}

// serveHTTP serves s.httpSrv on s.httpLis until Stop.
func (s *Server) serveHTTP(log *slog.Logger) {
	if err := s.httpSrv.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("watermarkmgr: HTTP server stopped", "err", err)
	}
}

// HTTPAddr is the HTTP listener's address ("" if disabled).
func (s *Server) HTTPAddr() string { return addr(s.httpLis) }

// GRPCAddr is the gRPC listener's address ("" if disabled).
func (s *Server) GRPCAddr() string { return addr(s.grpcLis) }

func addr(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// Stop stops serving and reading, and returns the consumer's error if it
// failed (nil after a clean stop). It cancels the context of every open
// HTTP request first, so GET /events streams end at once; a request still
// being answered then gets up to httpShutdownWait to finish before its
// connection is closed.
func (s *Server) Stop() error {
	s.cancel()
	if s.grpcSrv != nil {
		s.grpcSrv.Stop()
	}
	if s.httpSrv != nil {
		s.endStreams()
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownWait)
		if s.httpSrv.Shutdown(ctx) != nil {
			_ = s.httpSrv.Close()
		}
		cancel()
	}
	s.wg.Wait()
	return s.runErr
}

// httpShutdownWait bounds how long Stop waits for HTTP requests being
// answered (never an event stream: Stop ends those first).
const httpShutdownWait = 2 * time.Second

package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// BootstrapServers is Kafka's bootstrap.servers, e.g. "127.0.0.1:9092". Required.
	BootstrapServers string
	// Topic is the report topic to read, e.g. kafkaclient.ReportTopic(applicationID). Required.
	Topic string
	// Properties are extra librdkafka properties (security settings, …);
	// they cannot override isolation.level or enable.auto.commit.
	Properties map[string]string
	// BatchSize is the most records applied as one batch. Default 1000.
	BatchSize int
	// MetadataInterval is how often the topic's partition count is checked so
	// new partitions are read too. Default 10 s.
	MetadataInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// ApplicationID, if set, is the application whose runner writes the
	// topic: a record without the header envelope.WriterHeader naming it
	// (a report written by a plain producer, another application, a
	// tool) is skipped, logged and counted (Untrusted), never applied: a
	// report at the end of time for every sink would end the job
	// (issue 23). Empty: every well-formed report is applied (a
	// --report_topic read without --application_id).
	ApplicationID string
	// Stages, if set, are the stages of the application's plan: a report
	// naming another is skipped the same way. Nil: any stage.
	Stages []string
	// Untrusted, if set, is called for every record skipped (not a
	// WatermarkReport, no header, a stage not in Stages), from Run's
	// goroutine.
	Untrusted func()
}

// Consumer reads a report topic from the beginning with
// isolation.level=read_committed (so reports of aborted transactions never
// count) and applies each poll's records to a Tracker as one batch. It reads
// every partition itself (assign, no group membership): every reader needs
// every report.
type Consumer struct {
	cfg ConsumerConfig
	t   *Tracker
	c   *kafka.Consumer

	undecodable atomic.Uint64
	untrusted   atomic.Uint64
	// stages is ConsumerConfig.Stages as a set (nil: any stage).
	stages map[string]bool
	// skippedAt is when the last skipped record was logged, quiet how
	// many were skipped since (Run's goroutine only).
	skippedAt time.Time
	quiet     int
	applied   atomic.Uint64
	mu        sync.Mutex
	lastErr   error
	assigned  int
}

// NewConsumer connects to the brokers; Run does the reading.
func NewConsumer(cfg ConsumerConfig, t *Tracker) (*Consumer, error) {
	if cfg.BootstrapServers == "" || cfg.Topic == "" {
		return nil, errors.New("watermarkmgr/service: ConsumerConfig needs BootstrapServers and Topic")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.MetadataInterval <= 0 {
		cfg.MetadataInterval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cm := kafkaclient.AssignedReaderConfig(cfg.BootstrapServers, cfg.Properties, fmt.Sprintf("kafkastreams-watermarkmgr-%d", time.Now().UnixNano())) // never joined or committed
	cm["auto.offset.reset"] = "earliest"
	c, err := kafkaclient.NewConsumer(cm)
	if err != nil {
		return nil, fmt.Errorf("watermarkmgr/service: kafka consumer for %s: %w", cfg.Topic, err)
	}
	var stages map[string]bool
	if cfg.Stages != nil {
		stages = map[string]bool{}
		for _, s := range cfg.Stages {
			stages[s] = true
		}
	}
	return &Consumer{cfg: cfg, t: t, c: c, stages: stages}, nil
}

// Untrusted is how many records on the report topic were skipped as not
// written by the application's runner (ConsumerConfig.ApplicationID and
// Stages; the undecodable ones included).
func (c *Consumer) Untrusted() uint64 { return c.untrusted.Load() }

// trust returns why record m, decoded as r (err its decoding error), is
// not to be applied, or "" if it is.
func (c *Consumer) trust(m *kafka.Message, r *pb.WatermarkReport, err error) string {
	switch {
	case err != nil:
		return "not a WatermarkReport: " + err.Error()
	case r.GetStage() == "":
		return "not a WatermarkReport: no stage"
	case c.cfg.ApplicationID != "" && !envelope.FromApplication(m.Headers, c.cfg.ApplicationID):
		return fmt.Sprintf("no header %s=%q: not written by this application's runner", envelope.WriterHeader, c.cfg.ApplicationID)
	case c.stages != nil && !c.stages[r.GetStage()]:
		return fmt.Sprintf("stage %q is not in the application's plan", r.GetStage())
	}
	return ""
}

// skip counts record m as skipped for why and logs it, at most one line a
// second, naming its topic, partition and offset.
func (c *Consumer) skip(m *kafka.Message, undecodable bool, why string) {
	if undecodable {
		c.undecodable.Add(1)
	}
	c.untrusted.Add(1)
	if f := c.cfg.Untrusted; f != nil {
		f()
	}
	c.quiet++
	if now := time.Now(); now.Sub(c.skippedAt) >= time.Second {
		c.cfg.Logger.Warn("watermarkmgr: skipping a record of the report topic that this application's runner did not write (see README, Security)",
			"topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition,
			"offset", int64(m.TopicPartition.Offset), "reason", why, "skipped_since_last_line", c.quiet)
		c.skippedAt, c.quiet = now, 0
	}
}

// Undecodable is how many records on the report topic did not decode as a
// WatermarkReport; each was logged once with its offset and skipped.
func (c *Consumer) Undecodable() uint64 { return c.undecodable.Load() }

// Applied is how many reports were applied (including ones the manager refused).
func (c *Consumer) Applied() uint64 { return c.applied.Load() }

// Health is nil once the topic's partitions are assigned and the last poll
// did not fail; otherwise it says what is wrong.
func (c *Consumer) Health() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil {
		return c.lastErr
	}
	if c.assigned == 0 {
		return fmt.Errorf("watermarkmgr/service: report topic %s not assigned yet", c.cfg.Topic)
	}
	return nil
}

func (c *Consumer) setErr(err error) {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}

// assign reads the topic's partition count and assigns any partition not yet
// assigned, from the beginning.
func (c *Consumer) assign() error {
	md, err := c.c.GetMetadata(&c.cfg.Topic, false, 5000)
	if err != nil {
		return fmt.Errorf("watermarkmgr/service: metadata of %s: %w", c.cfg.Topic, err)
	}
	tm, ok := md.Topics[c.cfg.Topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
		return fmt.Errorf("watermarkmgr/service: report topic %s not found (%v)", c.cfg.Topic, tm.Error)
	}
	c.mu.Lock()
	have := c.assigned
	c.mu.Unlock()
	if len(tm.Partitions) <= have {
		return nil
	}
	var tps []kafka.TopicPartition
	for p := have; p < len(tm.Partitions); p++ {
		tps = append(tps, kafka.TopicPartition{Topic: &c.cfg.Topic, Partition: int32(p), Offset: kafka.OffsetBeginning})
	}
	if err := c.c.IncrementalAssign(tps); err != nil {
		return fmt.Errorf("watermarkmgr/service: assign %s: %w", c.cfg.Topic, err)
	}
	c.mu.Lock()
	c.assigned = len(tm.Partitions)
	c.mu.Unlock()
	c.cfg.Logger.Info("watermarkmgr: reading report topic", "topic", c.cfg.Topic, "partitions", len(tm.Partitions))
	return nil
}

// Run reads until ctx is done, then closes the Kafka consumer. It returns nil
// on cancellation; it keeps retrying (and reports through Health) while the
// topic is missing or the brokers are away.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.c.Close()
	lastMeta := time.Time{}
	batch := make([]*pb.WatermarkReport, 0, c.cfg.BatchSize)
	for ctx.Err() == nil {
		if time.Since(lastMeta) >= c.cfg.MetadataInterval || c.assignedCount() == 0 {
			if err := c.assign(); err != nil {
				c.setErr(err)
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			lastMeta = time.Now()
		}
		batch = batch[:0]
		pollErr := false
		timeout := 100
		for len(batch) < c.cfg.BatchSize {
			ev := c.c.Poll(timeout)
			if ev == nil {
				break
			}
			timeout = 0 // drain what is buffered, then apply
			switch e := ev.(type) {
			case *kafka.Message:
				r := &pb.WatermarkReport{}
				err := proto.Unmarshal(e.Value, r)
				if why := c.trust(e, r, err); why != "" {
					c.skip(e, err != nil || r.GetStage() == "", why)
					continue
				}
				batch = append(batch, r)
			case kafka.Error:
				pollErr = true
				c.setErr(fmt.Errorf("watermarkmgr/service: reading %s: %w", c.cfg.Topic, e))
				if e.IsFatal() {
					return e
				}
			}
		}
		if len(batch) > 0 {
			c.applied.Add(uint64(len(batch)))
			if err := c.t.Apply(batch); err != nil {
				c.cfg.Logger.Warn("watermarkmgr: refused reports", "err", err)
			}
		}
		if !pollErr {
			c.setErr(nil)
		}
	}
	return nil
}

func (c *Consumer) assignedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assigned
}

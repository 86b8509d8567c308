package runner

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// Drain (Beam's meaning): stop reading the unbounded sources, let every
// watermark go to the end of time so that every window and timer fires,
// commit, and exit. Flink calls it stop --drain, Dataflow drain.
//
// A drain is a request record in the application's control topic
// (kafkaclient.ControlTopic); every instance reads that topic from its start while it
// runs, so one request drains every instance, those started later too.
// Each stage loop then drains (step.Drainer): a Kafka source stops
// reading, leaving what it has not read uncommitted, and reports the end
// of time on each of its partitions; a splittable DoFn's residuals run at
// once, truncated (its TruncateRestriction); every other stage finishes as
// its inputs reach the end of time, as a bounded job does, and each
// instance's Run returns when every sink stage is done.
//
// Ways to ask: runner.Drain from Go; the program run with --drain (and the
// same --application_id and --bootstrap_servers), which writes the request
// and exits; or SIGUSR1 to any running instance. SIGINT and SIGTERM do not
// drain: they stop the instance, which hands its tasks over (the job goes
// on). A drained application is finished: started again under the same
// --application_id, it reads the request and drains again at once; use a
// new application id to run the job again (its Kafka sources then start
// from their start position, not from the drained job's offsets).

// drainFlag (Options.Drain) makes the program ask the running application to drain
// instead of running the pipeline: it writes a drain request and exits.
var drainFlag = flag.Bool("drain", false, "ask the running application (--application_id on --bootstrap_servers) to drain, Beam's drain: stop reading sources, fire every window and timer, exit; then exit (SIGUSR1 to a running instance does the same)")

// drainKey is the key of a drain request record.
const drainKey = "drain"

// drainRequest is a drain request record's value (JSON).
type drainRequest struct {
	RequestedAt time.Time `json:"requestedAt"`
	By          string    `json:"by"`
}

// Drain asks application applicationID on the cluster at bootstrap (with
// client properties props) to drain: it writes a drain request to the
// application's control topic and returns once the broker has it. by says
// who asks (a host name, an instance id), for the logs. Errors: the
// control topic does not exist (the application never ran there), or the
// broker could not be reached.
func Drain(ctx context.Context, bootstrap string, props map[string]string, applicationID, by string) error {
	cm := kafkaclient.IdempotentProducerConfig(bootstrap, props)
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return fmt.Errorf("kafkastreams: drain: producer: %w", err)
	}
	defer p.Close()
	topic := kafkaclient.ControlTopic(applicationID)
	md, err := p.GetMetadata(&topic, false, 10000)
	if err != nil {
		return fmt.Errorf("kafkastreams: drain of %s: metadata: %w", applicationID, err)
	}
	if tm, ok := md.Topics[topic]; !ok || tm.Error.Code() != kafka.ErrNoError {
		return fmt.Errorf("kafkastreams: drain of %s: no control topic %s on %s: is the application running there?", applicationID, topic, bootstrap)
	}
	v, _ := json.Marshal(drainRequest{RequestedAt: time.Now().UTC(), By: by})
	ch := make(chan kafka.Event, 1)
	// The application's header: watchDrain heeds no request without it.
	hs := []kafka.Header{{Key: envelope.WriterHeader, Value: []byte(applicationID)}}
	if err := kafkaclient.Produce(p, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte(drainKey), Value: v, Headers: hs}, ch, nil); err != nil {
		return fmt.Errorf("kafkastreams: drain of %s: %w", applicationID, err)
	}
	select {
	case e := <-ch:
		if m, ok := e.(*kafka.Message); ok && m.TopicPartition.Error != nil {
			return fmt.Errorf("kafkastreams: drain of %s: %w", applicationID, kafkaclient.FatalCause(p, m.TopicPartition.Error))
		}
	case <-ctx.Done():
		return fmt.Errorf("kafkastreams: drain of %s: %w", applicationID, context.Cause(ctx))
	}
	return nil
}

// watchDrain reads the control topic of applicationID from its start
// until ctx ends, and calls drain once, at the first drain request: a
// record with the key drainKey and the header envelope.WriterHeader
// naming the application, as Drain writes it. Any other record is
// skipped; one with the key and without the header (not written by this
// runner's Drain: issue 23) is logged and counted with untrusted.
func watchDrain(ctx context.Context, log *slog.Logger, bootstrap string, props map[string]string, applicationID, instanceID string, untrusted func(), drain func()) error {
	cm := kafkaclient.Base(bootstrap, props)
	cm["group.id"] = applicationID + ".control." + instanceID
	cm["enable.auto.commit"] = false
	cm["go.logs.channel.enable"] = false
	c, err := kafkaclient.NewConsumer(cm)
	if err != nil {
		return fmt.Errorf("kafkastreams: control topic consumer: %w", err)
	}
	topic := kafkaclient.ControlTopic(applicationID)
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		_ = c.Close()
		return fmt.Errorf("kafkastreams: control topic %s: %w", topic, err)
	}
	go func() {
		defer func() { _ = c.Close() }()
		for ctx.Err() == nil {
			switch e := c.Poll(200).(type) {
			case *kafka.Message:
				if string(e.Key) != drainKey {
					continue
				}
				if !envelope.FromApplication(e.Headers, applicationID) {
					untrusted()
					log.Warn("kafkastreams: skipped a drain request that this application's runner did not write (no header "+envelope.WriterHeader+"; see README, Security)",
						"topic", topic, "partition", e.TopicPartition.Partition, "offset", int64(e.TopicPartition.Offset))
					continue
				}
				var r drainRequest
				_ = json.Unmarshal(e.Value, &r)
				log.Info("kafkastreams: drain requested: the sources stop reading, every window and timer fires, then the job ends", "requested_at", r.RequestedAt, "by", r.By, "control_topic", topic)
				drain()
				return
			case kafka.Error:
				if e.IsFatal() {
					log.Warn("kafkastreams: control topic consumer failed: drain requests are not seen", "err", e)
					return
				}
			}
		}
	}()
	return nil
}

// drainBy names this process in a drain request.
func drainBy(instanceID string) string {
	h, _ := os.Hostname()
	if instanceID == "" {
		return fmt.Sprintf("%s pid %d", h, os.Getpid())
	}
	return fmt.Sprintf("%s pid %d (instance %s)", h, os.Getpid(), instanceID)
}

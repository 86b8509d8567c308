package runner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// The metrics of the application, not of one instance.
//
// Every committed bundle whose monitoring infos hold a metric the runner
// aggregates (user counters, distributions, gauges, element counts) adds one
// record to the application's metrics topic in its own transaction, the one
// that carries its outputs and offsets. A read_committed read of the topic
// is then the metrics of exactly the committed bundles of every instance:
// an aborted attempt's never, a SIGKILLed instance's committed ones always,
// none twice. When a bounded job is done (every sink stage at the end of
// time, which no stage reaches before every bundle upstream of it has
// committed), each instance reads the topic to its end and returns those
// metrics in its PipelineResult, so every instance reports the job's
// metrics, as a single-process runner does.

// metricsRecord returns the metrics-topic record of one bundle of stage
// stageName, or false if none of infos is aggregated (committedMetrics.add).
func metricsRecord(app, stageName string, infos []*pipepb.MonitoringInfo) (step.Record, bool) {
	var keep []*pipepb.MonitoringInfo
	for _, mi := range infos {
		if _, ok := aggregated[mi.GetUrn()]; ok {
			keep = append(keep, mi)
		}
	}
	if len(keep) == 0 {
		return step.Record{}, false
	}
	v, err := proto.Marshal(&fnpb.ProcessBundleResponse{MonitoringInfos: keep})
	if err != nil {
		return step.Record{}, false // cannot happen for well-formed infos
	}
	return step.Record{Topic: kafkaclient.MetricsTopic(app), Partition: 0, Key: []byte(stageName), Value: v, Headers: writerHeader(app)}, true
}

// writerHeader is the header of every record of application app's
// metrics topic (envelope.WriterHeader): its readers skip a record
// without it (issue 23: a record the runner did not write must not count
// in the job's metrics).
func writerHeader(app string) []step.Header {
	return []step.Header{{Key: envelope.WriterHeader, Value: []byte(app)}}
}

// URNStageCommit is the URN of the MonitoringInfo whose payload is a
// kafkastreams.v1.StageCommitMetrics: the counts of one committed
// transaction of a stage (commitMetricsRecords). Beam's readers, and
// committedMetrics, skip a URN they do not know.
const URNStageCommit = service.URNStageCommit

// commitMetricsRecords is stage stageName's stage.Config.CommitRecords on
// instance instance: one metrics-topic record per transaction, holding a
// StageCommitMetrics (URNStageCommit) with the transaction's counts, the
// late drops of a GroupByKey head (gbk.Head) and the state its tasks hold
// (a GroupByKey head's panes, a stateful head's timers: userstate.Head).
// It runs on the loop's goroutine, where the head's attempt state may be
// read.
func commitMetricsRecords(app, stageName, instance string, head step.Head) func(stage.TxnSummary) []step.Record {
	topic, hs := kafkaclient.MetricsTopic(app), writerHeader(app)
	dropped, _ := head.(attemptDrops)
	windows, _ := head.(windowCounts)
	timers, _ := head.(timerCounts)
	return func(t stage.TxnSummary) []step.Record {
		m := &pb.StageCommitMetrics{Stage: stageName, Instance: instance, RecordsIn: t.RecordsIn, ElementsIn: t.ElementsIn,
			ElementsOut: t.ElementsOut, Bundles: t.Bundles, Aborts: t.AbortsBefore, DeadLetters: t.DeadLetters}
		if dropped != nil {
			m.LateDropped = proto.Int64(dropped.AttemptDropped())
		}
		if windows != nil || timers != nil {
			for _, p := range t.Tasks {
				ts := &pb.TaskStateHeld{Partition: p}
				if windows != nil {
					ts.WindowsHeld = proto.Int64(windows.TaskWindowsHeld(p))
				}
				if timers != nil {
					ts.TimersPending = proto.Int64(timers.TaskTimers(p))
				}
				m.Tasks = append(m.Tasks, ts)
			}
		}
		payload, err := proto.Marshal(m)
		if err != nil {
			return nil // cannot happen for a well-formed message
		}
		v, err := proto.Marshal(&fnpb.ProcessBundleResponse{MonitoringInfos: []*pipepb.MonitoringInfo{{Urn: URNStageCommit, Payload: payload}}})
		if err != nil {
			return nil
		}
		return []step.Record{{Topic: topic, Partition: 0, Key: []byte(stageName), Value: v, Headers: hs}}
	}
}

// readApplicationMetrics reads the metrics topic read_committed from its
// beginning to its log end offset as it was when the read began
// (kafkaclient.ReadToEnd) and merges every record's infos. A record that does not
// decode, or that lacks the application's header (writerHeader: not
// written by its runner), is skipped, counted in skipped and logged with
// its offset. Errors name the topic.
func readApplicationMetrics(ctx context.Context, log *slog.Logger, bootstrap string, props map[string]string, app string) (m *committedMetrics, records, skipped int, err error) {
	topic := kafkaclient.MetricsTopic(app)
	c, err := kafkaclient.NewEndReader(bootstrap, props, topic+"-reader")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("kafkastreams: metrics topic %s: %w", topic, err)
	}
	defer c.Close()
	m = newCommittedMetrics()
	_, err = kafkaclient.ReadToEnd(ctx, c, topic, 0, func(e *kafka.Message) error {
		if !envelope.FromApplication(e.Headers, app) {
			skipped++
			log.Warn("kafkastreams: skipped a record of the metrics topic that this application's runner did not write (no header "+envelope.WriterHeader+"; see README, Security)", "topic", topic, "partition", e.TopicPartition.Partition, "offset", int64(e.TopicPartition.Offset))
			return nil
		}
		var r fnpb.ProcessBundleResponse
		if err := proto.Unmarshal(e.Value, &r); err != nil {
			skipped++
			log.Warn("kafkastreams: skipped an undecodable record of the metrics topic", "topic", topic, "offset", int64(e.TopicPartition.Offset), "err", err)
			return nil
		}
		m.add(r.GetMonitoringInfos())
		records++
		return nil
	})
	if err != nil {
		return nil, records, skipped, fmt.Errorf("kafkastreams: metrics topic %s: %w", topic, err)
	}
	return m, records, skipped, nil
}

// applicationMetricsTimeout bounds the read of the metrics topic at the end
// of a job.
const applicationMetricsTimeout = 2 * time.Minute

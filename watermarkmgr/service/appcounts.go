package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// URNStageCommit is the URN of the MonitoringInfo, on the metrics topic,
// whose payload is a kafkastreams.v1.StageCommitMetrics: what one committed
// transaction of one stage did. Every other info (Beam's user metrics and
// element counts of a bundle) is not a count of the page and is skipped.
const URNStageCommit = "kafkastreams:metric:stage_commit:v1"

// AppStage is the application's counts of one stage: the sum over every
// committed transaction of every instance, from the metrics topic read
// read_committed (AppCounts). The JSON names are LocalStage's, so the page
// shows either the same way.
type AppStage struct {
	RecordsIn   uint64 `json:"recordsIn"`
	ElementsIn  uint64 `json:"elementsIn"`
	ElementsOut uint64 `json:"elementsOut"`
	// Commits is the number of committed transactions.
	Commits uint64 `json:"commits"`
	// Aborts is the aborted attempts counted by a later commit of the same
	// loop (StageCommitMetrics.aborts).
	Aborts uint64 `json:"aborts"`
	// DeadLetters is the input records written to the dead-letter topic
	// (StageCommitMetrics.dead_letters; --error_policy=dead_letter): the
	// application-wide sum of every instance's
	// kafkastreams_dead_letter_records_total{stage}.
	DeadLetters uint64 `json:"deadLetters"`
	// LateDropped is the values a GroupByKey stage dropped as too late;
	// -1 if no record said (not a GroupByKey stage).
	LateDropped int64 `json:"lateDropped"`
	// WindowsHeld and TimersPending are the sum over the stage's tasks of
	// each task's latest gauge (open (key, window) panes of a GroupByKey
	// stage, pending timers of a stateful one); -1 if no record said.
	WindowsHeld   int64 `json:"windowsHeld"`
	TimersPending int64 `json:"timersPending"`
	// Instances are the instances whose commits were counted, sorted.
	Instances []string `json:"instances"`
}

// AppCounts sums the application's metrics-topic records into per-stage
// counts (AppStage). Records must be applied in the topic's order (a
// task's latest state wins). Safe for concurrent use.
type AppCounts struct {
	mu struct {
		sync.Mutex
		stages map[string]*appStage
	}
	// records counts the records applied; undecodable those skipped.
	records, undecodable atomic.Uint64
}

type appStage struct {
	sum             AppStage
	windows, timers map[int32]int64
	hasLate         bool
	instances       map[string]bool
}

// NewAppCounts returns empty counts.
func NewAppCounts() *AppCounts {
	a := &AppCounts{}
	a.mu.stages = map[string]*appStage{}
	return a
}

// Apply adds one metrics-topic record's value: every URNStageCommit info in
// it counts once. A value that is not a ProcessBundleResponse, or an info
// whose payload is not a StageCommitMetrics with a stage, is an error and
// changes nothing; a bundle's record without such an info is no error and
// changes nothing.
func (a *AppCounts) Apply(value []byte) error {
	var r fnpb.ProcessBundleResponse
	if err := proto.Unmarshal(value, &r); err != nil {
		a.undecodable.Add(1)
		return fmt.Errorf("watermarkmgr/service: metrics record: %w", err)
	}
	var ms []*pb.StageCommitMetrics
	for _, mi := range r.GetMonitoringInfos() {
		if mi.GetUrn() != URNStageCommit {
			continue
		}
		m := &pb.StageCommitMetrics{}
		if err := proto.Unmarshal(mi.GetPayload(), m); err != nil || m.GetStage() == "" {
			if err == nil {
				err = errors.New("no stage")
			}
			a.undecodable.Add(1)
			return fmt.Errorf("watermarkmgr/service: metrics record: %s: %w", URNStageCommit, err)
		}
		ms = append(ms, m)
	}
	a.records.Add(1)
	if len(ms) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range ms {
		st := a.mu.stages[m.GetStage()]
		if st == nil {
			st = &appStage{windows: map[int32]int64{}, timers: map[int32]int64{}, instances: map[string]bool{}}
			a.mu.stages[m.GetStage()] = st
		}
		st.sum.RecordsIn += m.GetRecordsIn()
		st.sum.ElementsIn += m.GetElementsIn()
		st.sum.ElementsOut += m.GetElementsOut()
		st.sum.Commits++
		st.sum.Aborts += m.GetAborts()
		st.sum.DeadLetters += m.GetDeadLetters()
		if m.LateDropped != nil {
			st.hasLate = true
			st.sum.LateDropped += m.GetLateDropped()
		}
		for _, t := range m.GetTasks() {
			if t.WindowsHeld != nil {
				st.windows[t.GetPartition()] = t.GetWindowsHeld()
			}
			if t.TimersPending != nil {
				st.timers[t.GetPartition()] = t.GetTimersPending()
			}
		}
		if in := m.GetInstance(); in != "" {
			st.instances[in] = true
		}
	}
	return nil
}

// Stages returns every stage's counts by stage name.
func (a *AppCounts) Stages() map[string]AppStage {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]AppStage, len(a.mu.stages))
	for name, st := range a.mu.stages {
		s := st.sum
		if !st.hasLate {
			s.LateDropped = -1
		}
		s.WindowsHeld, s.TimersPending = gaugeSum(st.windows), gaugeSum(st.timers)
		for in := range st.instances {
			s.Instances = append(s.Instances, in)
		}
		sort.Strings(s.Instances)
		out[name] = s
	}
	return out
}

// gaugeSum is the sum of the tasks' gauges, -1 for none.
func gaugeSum(m map[int32]int64) int64 {
	if len(m) == 0 {
		return -1
	}
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// Records is the number of metrics-topic records applied; Undecodable
// those skipped because they did not decode.
func (a *AppCounts) Records() uint64     { return a.records.Load() }
func (a *AppCounts) Undecodable() uint64 { return a.undecodable.Load() }

// readMetrics reads topic's partition 0 read_committed from its beginning
// into a until ctx is done, retrying every second while the topic does not
// exist (the application has not started). It returns nil on cancellation.
//
// With app set, a record without the application's header
// (envelope.WriterHeader) is skipped, logged and counted with untrusted
// (issue 23: a record the runner did not write must not count).
func readMetrics(ctx context.Context, log *slog.Logger, bootstrap string, props map[string]string, topic, app string, untrusted func(), a *AppCounts) error {
	cm := kafkaclient.AssignedReaderConfig(bootstrap, props, fmt.Sprintf("kafkastreams-watermarkmgr-metrics-%d", time.Now().UnixNano())) // never joined or committed
	cm["auto.offset.reset"] = "earliest"
	c, err := kafkaclient.NewConsumer(cm)
	if err != nil {
		return fmt.Errorf("watermarkmgr/service: metrics topic %s: %w", topic, err)
	}
	defer c.Close()
	for ctx.Err() == nil {
		md, err := c.GetMetadata(&topic, false, 5000)
		if err == nil {
			if tm, ok := md.Topics[topic]; ok && tm.Error.Code() == kafka.ErrNoError && len(tm.Partitions) > 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		return fmt.Errorf("watermarkmgr/service: metrics topic %s: assign: %w", topic, err)
	}
	log.Info("watermarkmgr: reading the metrics topic", "topic", topic)
	for ctx.Err() == nil {
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			if app != "" && !envelope.FromApplication(e.Headers, app) {
				untrusted()
				log.Warn("watermarkmgr: skipped a record of the metrics topic that this application's runner did not write (no header "+envelope.WriterHeader+"; see README, Security)", "topic", topic, "offset", int64(e.TopicPartition.Offset))
				continue
			}
			if err := a.Apply(e.Value); err != nil {
				log.Warn("watermarkmgr: skipped a metrics record", "topic", topic, "offset", int64(e.TopicPartition.Offset), "err", err)
			}
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("watermarkmgr/service: metrics topic %s: %w", topic, e)
			}
		}
	}
	return nil
}

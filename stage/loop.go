package stage

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

// Bundle is what Process returns for one bundle.
type Bundle struct {
	// Outputs holds the encoded elements the bundle produced, by PCollection
	// id, each encoded with the PCollection's windowed-value wire coder.
	Outputs map[string][][]byte
	// Extra are records the bundle adds to its transaction besides its
	// outputs (the runner's: the bundle's metrics, for the application's
	// metrics topic), produced after the outputs, in order.
	Extra []Record
	// Committed, if set, is called once the transaction carrying the bundle's
	// outputs has committed (e.g. to add its metrics to the job's committed
	// metrics); never for an aborted bundle.
	Committed func()
}

// Record is one Kafka record for a transaction: its topic, partition (>= 0,
// no partitioner), key and value.
type Record struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
}

// ProcessFunc runs one bundle of the stage's fused SDK transforms over
// elements encoded with the head output's wire coder. It must not keep
// elements after it returns. An error aborts the transaction; the records are
// read again and retried.
type ProcessFunc func(ctx context.Context, elements [][]byte) (*Bundle, error)

// Config configures the Loop of one stage in one instance.
type Config struct {
	// BootstrapServers is Kafka's bootstrap.servers. Required.
	BootstrapServers string
	// Properties are extra librdkafka properties for the consumer and the
	// producer (security settings, …). The loop's own settings win.
	Properties map[string]string
	// Plan and Stage say what to read and write. Required.
	Plan  *plan.Plan
	Stage *plan.Stage
	// ReportTopic receives every report the stage's tasks write (see
	// watermarkmgr/service.ReportTopic). Required.
	ReportTopic string
	// InstanceID makes the transactional.id unique to this instance:
	// "<application_id>-<stage>-<InstanceID>". Required. An instance that
	// reuses a dead one's InstanceID fences it and aborts its open
	// transactions when it starts (InitTransactions).
	InstanceID string
	// Process runs a bundle. Nil means the stage has no SDK transforms: the
	// head's output is the stage's output, element for element.
	Process ProcessFunc
	// ImpulseElement is the encoded impulse element (empty bytes in the global
	// window at mtime.MinTimestamp), for a stage whose head is Impulse.
	ImpulseElement []byte
	// Head is the stage's runner-side head. Nil means a passthrough (Reshuffle,
	// Flatten; Impulse with ImpulseElement). A GroupByKey stage needs one.
	Head Head
	// KeyOf extracts the encoded Beam key of an element of PCollection pc
	// (encoded with its wire coder), for outputs to a GroupByKey stage's
	// topic: the record's Kafka key and partition (equal keys meet on one
	// partition). Required for such outputs.
	KeyOf map[string]func(element []byte) ([]byte, error)
	// SideInputs, if set, holds back main input whose side input windows are
	// not complete yet (see sideGate). Only for stages whose head is a
	// passthrough (plan: side-input ParDos are never fused after a stateful
	// head). Nil for a stage without side inputs.
	SideInputs SideInputGate
	// CommitInterval is the longest a transaction collects records before it
	// commits, like Kafka Streams' commit.interval.ms. Default 100 ms.
	CommitInterval time.Duration
	// MaxBatchRecords bounds the records in one transaction. Default 10 000;
	// always 1 for a TestStream stage (one segment per transaction, so that
	// each segment's watermark report follows exactly its elements).
	MaxBatchRecords int
	// MaxAttempts is how many times a failing bundle is retried (abort,
	// rewind, read again) before Run returns its error. Default 4.
	MaxAttempts int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Sentinel errors.
var (
	// ErrFenced: another producer with this transactional.id, or a newer
	// group generation, fenced this instance; its tasks stop. Not retryable.
	ErrFenced = errors.New("stage: producer fenced")
	// ErrBundleFailed: a bundle failed MaxAttempts times; wraps the cause.
	ErrBundleFailed = errors.New("stage: bundle failed")
)

// Stats are counters of committed work (never of aborted attempts).
type Stats struct {
	RecordsIn, ElementsIn, ElementsOut, ReportsOut, Commits, Aborts uint64
	// FirstCommit and LastCommit are the wall-clock times of the first and
	// the last committed transaction (zero if none): RecordsIn / (LastCommit
	// - FirstCommit) is the stage's throughput in input records. (ElementsIn
	// counts what entered the bundles: panes, for a GroupByKey stage.)
	FirstCommit, LastCommit time.Time
}

// Loop is the transactional consume-process-produce loop of one stage in one
// instance: one consumer in the group "<application_id>.<stage>"
// (cooperative-sticky assignment) and one transactional producer (KIP-447:
// fenced by the group generation sent with the offsets). Every input
// partition is a task; a transaction holds, for the tasks it read from, the
// outputs, the watermark reports and the consumed offsets (with each task's
// TaskCheckpoint as offset metadata).
type Loop struct {
	cfg      Config
	log      *slog.Logger
	consumer *kafka.Consumer
	producer *kafka.Producer
	group    string
	txnID    string
	// outTopics are the stage's output topics with their partition counts.
	outTopics map[string]int32
	rr        map[string]int32 // round-robin cursor per output topic
	// keyed are the output topics of GroupByKey stages: records are keyed
	// and partitioned by the element's Beam key.
	keyed map[string]bool
	head  Head

	// tasks are owned by the goroutine running Run (rebalance callbacks run
	// inside Poll, on that goroutine).
	tasks map[int32]*task
	// rebalanceErr is set by the rebalance callback when a task cannot be
	// restored (the client ignores a callback's error); Run returns it.
	rebalanceErr error
	// side holds back tasks waiting for side inputs (sidegate.go).
	side sideGate
	// woken are the tasks the last attempt ran for due processing-time
	// timers without records of theirs (wakeDue): rewind restores them too.
	woken []int32

	stats struct {
		recordsIn, elementsIn, elementsOut, reportsOut, commits, aborts atomic.Uint64
		// firstCommit and lastCommit are Unix nanoseconds (0: none yet).
		firstCommit, lastCommit atomic.Int64
	}
	closeOnce sync.Once
}

// New creates the consumer and producer and initialises transactions. It
// returns an error naming the stage if the brokers cannot be reached.
func New(ctx context.Context, cfg Config) (*Loop, error) {
	if cfg.Plan == nil || cfg.Stage == nil || cfg.BootstrapServers == "" || cfg.ReportTopic == "" || cfg.InstanceID == "" {
		return nil, errors.New("stage: Config needs Plan, Stage, BootstrapServers, ReportTopic and InstanceID")
	}
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = 100 * time.Millisecond
	}
	if cfg.MaxBatchRecords <= 0 {
		cfg.MaxBatchRecords = 10000
	}
	if cfg.Stage != nil && cfg.Stage.Head == plan.HeadTestStream {
		cfg.MaxBatchRecords = 1
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Loop{
		cfg:       cfg,
		log:       cfg.Logger.With("stage", cfg.Stage.Name),
		group:     cfg.Plan.ApplicationID + "." + cfg.Stage.Name,
		txnID:     cfg.Plan.ApplicationID + "-" + cfg.Stage.Name + "-" + cfg.InstanceID,
		outTopics: map[string]int32{},
		rr:        map[string]int32{},
		keyed:     map[string]bool{},
		tasks:     map[int32]*task{},
		head:      cfg.Head,
	}
	if l.head == nil {
		if cfg.Stage.Head == plan.HeadGroupByKey || cfg.Stage.Head == plan.HeadTestStream {
			return nil, fmt.Errorf("stage %s: a %s stage needs a Head", cfg.Stage.Name, cfg.Stage.Head)
		}
		l.head = &passthrough{impulse: cfg.ImpulseElement}
	}
	for _, s := range cfg.Plan.Stages {
		if s.Head == plan.HeadGroupByKey || s.Head == plan.HeadStateful {
			l.keyed[s.InputTopic] = true
		}
	}
	topics := cfg.Plan.Topics()
	for _, o := range cfg.Stage.Outputs {
		for _, t := range o.Topics {
			n, ok := topics[t]
			if !ok {
				return nil, fmt.Errorf("stage %s: output topic %s is not in the plan", cfg.Stage.Name, t)
			}
			l.outTopics[t] = n
			if l.keyed[t] && cfg.KeyOf[o.PCollection] == nil {
				return nil, fmt.Errorf("stage %s: output %s goes to GroupByKey topic %s but has no KeyOf", cfg.Stage.Name, o.PCollection, t)
			}
		}
	}
	cc := kafka.ConfigMap{}
	pc := kafka.ConfigMap{}
	for k, v := range cfg.Properties {
		cc[k], pc[k] = v, v
	}
	cc["bootstrap.servers"] = cfg.BootstrapServers
	cc["group.id"] = l.group
	cc["partition.assignment.strategy"] = "cooperative-sticky"
	cc["isolation.level"] = "read_committed"
	cc["enable.auto.commit"] = false
	cc["enable.auto.offset.store"] = false
	cc["auto.offset.reset"] = "earliest"
	pc["bootstrap.servers"] = cfg.BootstrapServers
	pc["transactional.id"] = l.txnID
	pc["linger.ms"] = 5
	// A killed instance's open transaction blocks read_committed readers of
	// its output partitions until the broker aborts it at this timeout, so
	// keep it short, as Kafka Streams does under exactly-once (10 s).
	pc["transaction.timeout.ms"] = 10000
	pc["go.delivery.reports"] = false
	var err error
	if l.consumer, err = kafka.NewConsumer(&cc); err != nil {
		return nil, fmt.Errorf("stage %s: consumer: %w", cfg.Stage.Name, err)
	}
	if l.producer, err = kafka.NewProducer(&pc); err != nil {
		l.consumer.Close()
		return nil, fmt.Errorf("stage %s: producer: %w", cfg.Stage.Name, err)
	}
	go l.drainProducerEvents()
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := l.producer.InitTransactions(ictx); err != nil {
		l.Close()
		return nil, fmt.Errorf("stage %s: init transactions for transactional.id %s: %w", cfg.Stage.Name, l.txnID, err)
	}
	return l, nil
}

func (l *Loop) drainProducerEvents() {
	for ev := range l.producer.Events() {
		if e, ok := ev.(kafka.Error); ok {
			l.log.Warn("stage: producer error", "err", e)
		}
	}
}

// Stats returns the committed counters.
func (l *Loop) Stats() Stats {
	return Stats{
		RecordsIn:   l.stats.recordsIn.Load(),
		ElementsIn:  l.stats.elementsIn.Load(),
		ElementsOut: l.stats.elementsOut.Load(),
		ReportsOut:  l.stats.reportsOut.Load(),
		Commits:     l.stats.commits.Load(),
		Aborts:      l.stats.aborts.Load(),
		FirstCommit: unixNanos(l.stats.firstCommit.Load()),
		LastCommit:  unixNanos(l.stats.lastCommit.Load()),
	}
}

func unixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Close leaves the group and closes the clients. Safe to call twice.
func (l *Loop) Close() {
	l.closeOnce.Do(func() {
		_ = l.consumer.Close()
		l.producer.Close()
	})
}

// rebalance keeps l.tasks in step with the assignment. On assignment it
// restores every new task from its committed offset's metadata, before the
// partition is consumed.
func (l *Loop) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	if err := l.applyRebalance(c, ev); err != nil {
		l.rebalanceErr = err
		return err
	}
	return nil
}

func (l *Loop) applyRebalance(c *kafka.Consumer, ev kafka.Event) error {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		committed, err := l.committed(c, e.Partitions)
		if err != nil {
			return fmt.Errorf("stage %s: committed offsets: %w", l.cfg.Stage.Name, err)
		}
		for _, tp := range committed {
			md := ""
			if tp.Metadata != nil {
				md = *tp.Metadata
			}
			t, err := restoreTask(tp.Partition, l.cfg.Stage.Upstreams, md)
			if err != nil {
				return err
			}
			if err := l.head.Assign(context.Background(), tp.Partition); err != nil {
				return fmt.Errorf("stage %s: task %d: %w", l.cfg.Stage.Name, tp.Partition, err)
			}
			l.tasks[tp.Partition] = t
		}
		l.log.Info("stage: tasks assigned", "partitions", partitionsOf(e.Partitions))
		return c.IncrementalAssign(e.Partitions)
	case kafka.RevokedPartitions:
		for _, tp := range e.Partitions {
			delete(l.tasks, tp.Partition)
			delete(l.side.paused, tp.Partition)
			l.head.Revoke(tp.Partition)
		}
		l.log.Info("stage: tasks revoked", "partitions", partitionsOf(e.Partitions), "lost", c.AssignmentLost())
		return c.IncrementalUnassign(e.Partitions)
	}
	return nil
}

// committedTimeout bounds the wait for a task's committed offsets. A
// read_committed consumer asks for stable offsets (KIP-447): while a
// transaction that sent offsets for the partition is still open, which is
// what a SIGKILLed previous owner leaves, the broker answers
// UNSTABLE_OFFSET_COMMIT and librdkafka asks again, until the broker aborts
// that transaction transaction.timeout.ms (10 s here) after it began,
// checked every transaction.abort.timed.out.transaction.cleanup.interval.ms
// (10 s by default): up to about 20 s, longer on a slow broker.
const committedTimeout = 2 * time.Minute

// committed returns c's committed offsets (with their metadata) for tps,
// waiting for unstable ones as committedTimeout says; a wait of more than a
// second is logged with its likely cause.
func (l *Loop) committed(c *kafka.Consumer, tps []kafka.TopicPartition) ([]kafka.TopicPartition, error) {
	start := time.Now()
	out, err := c.Committed(tps, int(committedTimeout.Milliseconds()))
	if el := time.Since(start); el > time.Second {
		l.log.Info("stage: waited for stable committed offsets (a transaction of a previous owner of these tasks was open until the broker aborted it)",
			"partitions", partitionsOf(tps), "waited", el.Round(time.Millisecond))
	}
	return out, err
}

func partitionsOf(tps []kafka.TopicPartition) []int32 {
	out := make([]int32, len(tps))
	for i, tp := range tps {
		out[i] = tp.Partition
	}
	return out
}

// Run consumes until ctx is done (nil), the producer is fenced (ErrFenced),
// or a bundle fails MaxAttempts times (ErrBundleFailed). It closes the
// clients before returning.
func (l *Loop) Run(ctx context.Context) error {
	defer l.Close()
	if err := l.consumer.SubscribeTopics([]string{l.cfg.Stage.InputTopic}, l.rebalance); err != nil {
		return fmt.Errorf("stage %s: subscribe %s: %w", l.cfg.Stage.Name, l.cfg.Stage.InputTopic, err)
	}
	attempts := 0
	for ctx.Err() == nil {
		batch, err := l.poll(ctx)
		if err != nil {
			return err
		}
		if len(batch) == 0 && len(l.dueTasks()) == 0 {
			continue
		}
		err = l.commitBatch(ctx, batch)
		if err == nil {
			err = l.holdBlocked()
		}
		l.side.blocked = nil // after an abort, rewind seeks every task of the batch
		switch {
		case err == nil:
			attempts = 0
		case errors.Is(err, ErrFenced):
			return err
		default:
			attempts++
			l.stats.aborts.Add(1)
			l.log.Warn("stage: transaction aborted, rewinding", "attempt", attempts, "err", err)
			if rerr := l.rewind(batch); rerr != nil {
				return rerr
			}
			if attempts >= l.cfg.MaxAttempts {
				return fmt.Errorf("%w: stage %s after %d attempts: %w", ErrBundleFailed, l.cfg.Stage.Name, attempts, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempts) * 200 * time.Millisecond):
			}
		}
	}
	return nil
}

// poll collects records for at most CommitInterval or MaxBatchRecords.
// Records of partitions revoked meanwhile are dropped.
func (l *Loop) poll(ctx context.Context) ([]*kafka.Message, error) {
	if err := l.resumeHeld(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(l.cfg.CommitInterval)
	var batch []*kafka.Message
	// owners[i] is the task that owned batch[i]'s partition when it was
	// polled. A partition revoked and assigned again during the poll has a
	// new task and a position back at its committed offset: its records
	// polled before are stale and would be processed twice.
	var owners []*task
	for len(batch) < l.cfg.MaxBatchRecords && ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		switch e := l.consumer.Poll(int(left.Milliseconds()) + 1).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				l.log.Warn("stage: consume error", "err", e.TopicPartition.Error)
				continue
			}
			batch = append(batch, e)
			owners = append(owners, l.tasks[e.TopicPartition.Partition])
		case kafka.Error:
			if e.IsFatal() {
				return nil, fmt.Errorf("stage %s: consumer: %w", l.cfg.Stage.Name, e)
			}
			l.log.Warn("stage: consumer error", "err", e)
		}
		if l.rebalanceErr != nil {
			return nil, l.rebalanceErr
		}
	}
	kept := batch[:0]
	for i, m := range batch {
		if t := l.tasks[m.TopicPartition.Partition]; t != nil && t == owners[i] {
			kept = append(kept, m)
		}
	}
	return kept, nil
}

// commitBatch runs the batch through the head and the bundle and commits the
// outputs, the reports and the offsets in one transaction. On an error the
// transaction is aborted and the error returned; the caller rewinds.
func (l *Loop) commitBatch(ctx context.Context, batch []*kafka.Message) (err error) {
	var elements [][]byte
	touched := map[int32]*task{}
	next := map[int32]kafka.Offset{}
	inTxn := false
	defer func() {
		if err != nil {
			if herr := l.head.Aborted(sortedInt32Keys(touched)); herr != nil {
				err = errors.Join(err, herr)
			}
			if inTxn {
				err = l.abort(ctx, err)
			}
		}
	}()
	// A source stage (Impulse, TestStream) reads the raw records the plan
	// transaction wrote, not Envelopes, and has no upstream.
	impulse := l.cfg.Stage.Head == plan.HeadImpulse || l.cfg.Stage.Head == plan.HeadTestStream
	for _, m := range batch {
		p := m.TopicPartition.Partition
		t := l.tasks[p]
		if ok, err := l.sideReady(m, impulse); err != nil {
			return err
		} else if !ok {
			continue // held back, with the rest of the partition (sideGate)
		}
		touched[p] = t
		next[p] = m.TopicPartition.Offset + 1
		if impulse {
			es, err := l.head.Element(p, m.Key, m.Value)
			if err != nil {
				return err
			}
			elements = append(elements, es...)
			continue
		}
		env := &pb.Envelope{}
		if err := proto.Unmarshal(m.Value, env); err != nil {
			return fmt.Errorf("stage %s: record at %s[%d]@%d is not an Envelope: %w", l.cfg.Stage.Name, *m.TopicPartition.Topic, p, m.TopicPartition.Offset, err)
		}
		switch pl := env.Payload.(type) {
		case *pb.Envelope_Element:
			es, err := l.head.Element(p, m.Key, pl.Element)
			if err != nil {
				return fmt.Errorf("stage %s: element at %s[%d]@%d: %w", l.cfg.Stage.Name, *m.TopicPartition.Topic, p, m.TopicPartition.Offset, err)
			}
			elements = append(elements, es...)
		case *pb.Envelope_Report:
			if err := t.observe(pl.Report); err != nil {
				return fmt.Errorf("stage %s: report at offset %d: %w", l.cfg.Stage.Name, m.TopicPartition.Offset, err)
			}
			if l.cfg.Stage.Head == plan.HeadGroupByKey {
				// The partition's order is the truth: a value after this
				// report is on time or late with respect to it, so the
				// GroupByKey advances here, before the next record, not
				// only once at the end of the batch.
				fired, err := l.advanceOnReport(p, t)
				if err != nil {
					return err
				}
				elements = append(elements, fired...)
			}
		default:
			return fmt.Errorf("stage %s: record at %s[%d]@%d: empty Envelope", l.cfg.Stage.Name, *m.TopicPartition.Topic, p, m.TopicPartition.Offset)
		}
	}
	if err := l.wakeDue(touched, next); err != nil {
		return err
	}
	if len(touched) == 0 {
		return nil // every task of the batch is held back by side inputs
	}
	// Watermarks: input from the reports, then the head fires what it can.
	type wmState struct {
		out  mtime.Time
		idle bool
		in   mtime.Time // input watermark, to take a TimerHead's hold again after the bundle
	}
	outWM := map[int32]wmState{}
	for _, p := range sortedInt32Keys(touched) {
		t := touched[p]
		in, idle := t.inputWatermark()
		if impulse {
			// A source task has no upstream: once its record is read, its
			// input is complete (a TestStream head holds the output
			// watermark at the segment's).
			in, idle = mtime.MaxTimestamp, false
		}
		fired, hold, err := l.head.Advance(p, in)
		if err != nil {
			return fmt.Errorf("stage %s: task %d: %w", l.cfg.Stage.Name, p, err)
		}
		elements = append(elements, fired...)
		wm := min(in, hold)
		if wm < t.out {
			wm = t.out
		}
		outWM[p] = wmState{wm, idle && hold == mtime.MaxTimestamp, in}
	}

	th, timed := l.head.(TimerHead)
	var bundle *Bundle
	if l.cfg.Process != nil && (len(elements) > 0 || timed && th.Pending()) {
		if bundle, err = l.cfg.Process(ctx, elements); err != nil {
			return fmt.Errorf("stage %s: bundle of %d elements: %w", l.cfg.Stage.Name, len(elements), err)
		}
	} else if len(elements) > 0 {
		bundle = &Bundle{Outputs: map[string][][]byte{l.cfg.Stage.HeadOutput: elements}}
	}
	if timed {
		// Timers the bundle set hold the output too (TimerHead).
		for p, st := range outWM {
			hold := th.Hold(p)
			if wm := min(st.in, hold); wm < st.out {
				st.out = max(wm, touched[p].out)
			}
			st.idle = st.idle && hold == mtime.MaxTimestamp
			outWM[p] = st
		}
	}

	if err := l.producer.BeginTransaction(); err != nil {
		return l.classify(ctx, "begin transaction", err)
	}
	inTxn = true
	var out, reports uint64
	if bundle != nil {
		for _, o := range l.cfg.Stage.Outputs {
			for _, e := range bundle.Outputs[o.PCollection] {
				v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Element{Element: e}})
				var key []byte
				for i, topic := range o.Topics {
					part := int32(0)
					if l.keyed[topic] {
						if key == nil {
							if key, err = l.cfg.KeyOf[o.PCollection](e); err != nil {
								return fmt.Errorf("stage %s: key of an element of %s: %w", l.cfg.Stage.Name, o.PCollection, err)
							}
						}
						part = keyPartition(key, l.outTopics[topic])
					}
					for c := 0; c < o.Copies[i]; c++ {
						if !l.keyed[topic] {
							part = l.nextPartition(topic)
						}
						if err := l.produce(topic, part, key, v); err != nil {
							return err
						}
						out++
					}
				}
			}
		}
	}
	if bundle != nil {
		for _, r := range bundle.Extra {
			if err := l.produce(r.Topic, r.Partition, r.Key, r.Value); err != nil {
				return err
			}
		}
	}
	if err := l.head.Prepare(l.produce); err != nil {
		return fmt.Errorf("stage %s: head: %w", l.cfg.Stage.Name, err)
	}
	offsets := make([]kafka.TopicPartition, 0, len(touched))
	for _, p := range sortedInt32Keys(touched) {
		t := touched[p]
		st := outWM[p]
		if st.out != t.out || !t.reported {
			n, err := l.writeReports(p, st.out, st.idle)
			if err != nil {
				return err
			}
			reports += n
			t.out, t.reported = st.out, true
		}
		md, err := t.checkpoint()
		if err != nil {
			return err
		}
		topic := l.cfg.Stage.InputTopic
		offsets = append(offsets, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: next[p], Metadata: &md})
	}
	gm, err := l.consumer.GetConsumerGroupMetadata()
	if err != nil {
		return err
	}
	if err := l.producer.SendOffsetsToTransaction(ctx, offsets, gm); err != nil {
		return l.classify(ctx, "send offsets", err)
	}
	if err := l.producer.CommitTransaction(ctx); err != nil {
		return l.classify(ctx, "commit", err)
	}
	inTxn = false
	if err := l.head.Committed(); err != nil {
		// The transaction is durable in Kafka; the local store can be
		// restored from the changelog. Stop: the task state is suspect.
		return fmt.Errorf("%w: stage %s: head state after commit: %w", ErrFenced, l.cfg.Stage.Name, err)
	}
	l.stats.commits.Add(1)
	now := time.Now().UnixNano()
	l.stats.firstCommit.CompareAndSwap(0, now)
	l.stats.lastCommit.Store(now)
	l.stats.recordsIn.Add(uint64(len(batch)))
	l.stats.elementsIn.Add(uint64(len(elements)))
	l.stats.elementsOut.Add(out)
	l.stats.reportsOut.Add(reports)
	if bundle != nil && bundle.Committed != nil {
		bundle.Committed()
	}
	return nil
}

// advanceOnReport advances the head of task p (in the middle of a batch)
// if the report just observed moved the task's input watermark:
//
//	Advance(p, in) ⇔ in > the input watermark of p's last Advance
//
// The Advance at the end of the batch (commitBatch) still happens, with
// the same or a later watermark; the head's watermarks never decrease.
func (l *Loop) advanceOnReport(p int32, t *task) ([][]byte, error) {
	in, _ := t.inputWatermark()
	if in <= t.advanced {
		return nil, nil
	}
	fired, _, err := l.head.Advance(p, in)
	if err != nil {
		return nil, fmt.Errorf("stage %s: task %d: %w", l.cfg.Stage.Name, p, err)
	}
	t.advanced = in
	return fired, nil
}

// keyPartition is the partition of a record keyed by an encoded Beam key:
// FNV-1a of the key bytes modulo the partition count. Every instance computes
// the same partition for the same key.
func keyPartition(key []byte, partitions int32) int32 {
	h := fnv.New32a()
	h.Write(key)
	return int32(h.Sum32() % uint32(partitions))
}

// writeReports writes task p's report to every partition of every output
// topic and to the report topic (DESIGN.md: fan-out, in the transaction).
func (l *Loop) writeReports(p int32, wm mtime.Time, idle bool) (uint64, error) {
	r := &pb.WatermarkReport{
		Stage:                    l.cfg.Stage.Name,
		SourcePartition:          p,
		CommittedWatermarkMillis: int64(wm),
		TotalSourcePartitions:    l.cfg.Stage.Partitions,
		Idle:                     idle,
	}
	env, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: r}})
	var n uint64
	for _, topic := range sortedKeys(l.outTopics) {
		for q := int32(0); q < l.outTopics[topic]; q++ {
			if err := l.produce(topic, q, nil, env); err != nil {
				return n, err
			}
			n++
		}
	}
	raw, _ := proto.Marshal(r)
	key := []byte(fmt.Sprintf("%s/%d", l.cfg.Stage.Name, p))
	if err := l.produce(l.cfg.ReportTopic, kafka.PartitionAny, key, raw); err != nil {
		return n, err
	}
	return n + 1, nil
}

func (l *Loop) produce(topic string, partition int32, key, value []byte) error {
	for {
		err := l.producer.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition}, Key: key, Value: value}, nil)
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
			l.producer.Flush(100)
			continue
		}
		if err != nil {
			return fmt.Errorf("stage %s: produce to %s: %w", l.cfg.Stage.Name, topic, err)
		}
		return nil
	}
}

func (l *Loop) nextPartition(topic string) int32 {
	p := l.rr[topic]
	l.rr[topic] = (p + 1) % l.outTopics[topic]
	return p
}

// classify turns a fatal producer error into ErrFenced.
func (l *Loop) classify(_ context.Context, what string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.IsFatal() || ke.Code() == kafka.ErrFenced || ke.Code() == kafka.ErrProducerFenced) {
		return fmt.Errorf("%w: stage %s: %s: %w", ErrFenced, l.cfg.Stage.Name, what, err)
	}
	return fmt.Errorf("stage %s: %s: %w", l.cfg.Stage.Name, what, err)
}

// abort aborts the open transaction and returns cause (or ErrFenced if the
// abort itself says the producer is fenced).
func (l *Loop) abort(ctx context.Context, cause error) error {
	if errors.Is(cause, ErrFenced) {
		return cause
	}
	if err := l.producer.AbortTransaction(ctx); err != nil {
		return errors.Join(cause, l.classify(ctx, "abort", err))
	}
	return cause
}

// rewind puts every task of the batch back to its committed state: the
// checkpoint in the committed offset's metadata, and the consumer position at
// the committed offset.
func (l *Loop) rewind(batch []*kafka.Message) error {
	parts := map[int32]bool{}
	for _, m := range batch {
		parts[m.TopicPartition.Partition] = true
	}
	for _, p := range l.woken {
		parts[p] = true
	}
	topic := l.cfg.Stage.InputTopic
	var tps []kafka.TopicPartition
	for p := range parts {
		if l.tasks[p] != nil {
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	if len(tps) == 0 {
		return nil
	}
	committed, err := l.committed(l.consumer, tps)
	if err != nil {
		return fmt.Errorf("stage %s: rewind: committed offsets: %w", l.cfg.Stage.Name, err)
	}
	for i, tp := range committed {
		md := ""
		if tp.Metadata != nil {
			md = *tp.Metadata
		}
		t, err := restoreTask(tp.Partition, l.cfg.Stage.Upstreams, md)
		if err != nil {
			return err
		}
		l.tasks[tp.Partition] = t
		if tp.Offset < 0 {
			committed[i].Offset = kafka.OffsetBeginning
		}
	}
	if _, err := l.consumer.SeekPartitions(committed); err != nil {
		return fmt.Errorf("stage %s: rewind: seek: %w", l.cfg.Stage.Name, err)
	}
	return nil
}

// dueTasks are the assigned tasks whose processing-time timers are due
// (TimerHead.Due); none for other heads.
func (l *Loop) dueTasks() []int32 {
	th, ok := l.head.(TimerHead)
	if !ok {
		return nil
	}
	var out []int32
	for _, p := range th.Due() {
		if l.tasks[p] != nil {
			out = append(out, p)
		}
	}
	return out
}

// wakeDue adds to the attempt the tasks with due processing-time timers
// that no record of the batch touched, at their current position (the
// consumer's position; the committed offset before the first fetch): the
// attempt commits the same offset with the task's new checkpoint.
func (l *Loop) wakeDue(touched map[int32]*task, next map[int32]kafka.Offset) error {
	l.woken = l.woken[:0]
	topic := l.cfg.Stage.InputTopic
	for _, p := range l.dueTasks() {
		if touched[p] != nil {
			continue
		}
		tps := []kafka.TopicPartition{{Topic: &topic, Partition: p}}
		pos, err := l.consumer.Position(tps)
		if err == nil && (len(pos) != 1 || pos[0].Offset < 0) {
			pos, err = l.committed(l.consumer, tps)
		}
		if err != nil {
			return fmt.Errorf("stage %s: task %d: position for due timers: %w", l.cfg.Stage.Name, p, err)
		}
		if len(pos) != 1 || pos[0].Offset < 0 {
			continue // nothing consumed nor committed yet: wait for a record
		}
		touched[p] = l.tasks[p]
		next[p] = pos[0].Offset
		l.woken = append(l.woken, p)
	}
	return nil
}

package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// Config configures the Loop of one stage in one instance.
type Config struct {
	// BootstrapServers is Kafka's bootstrap.servers. Required.
	BootstrapServers string
	// Properties are extra librdkafka properties for the consumer and the
	// producer (security settings, …). The loop's own settings win.
	Properties map[string]string
	// Spec says what to read and write. Required.
	Spec step.Spec
	// ReportTopic receives every report the stage's tasks write (see
	// kafkaclient.ReportTopic). Required.
	ReportTopic string
	// InstanceID makes the transactional.id unique to this instance:
	// "<application_id>-<stage>-<InstanceID>". Required. An instance that
	// reuses a dead one's InstanceID fences it and aborts its open
	// transactions when it starts (InitTransactions).
	InstanceID string
	// Process runs a bundle. Nil means the stage has no SDK transforms: the
	// head's output is the stage's output, element for element.
	Process step.ProcessFunc
	// Head is the stage's runner-side head. Required (Passthrough for a
	// stage whose records are its elements).
	Head step.Head
	// KeyOf extracts the encoded Beam key of an element of PCollection pc
	// (encoded with its wire coder), for outputs to a keyed topic: the
	// record's Kafka key and partition (equal keys meet on one partition).
	// Required for such outputs.
	KeyOf map[string]func(element []byte) ([]byte, error)
	// SideInputs, if set, holds back main input whose side input windows are
	// not complete yet (see sideGate). Nil for a stage without side inputs.
	SideInputs step.SideInputGate
	// JobClock is StepConfig.JobClock: the job has a TestStream, whose
	// processing-time advances are the job's processing time.
	JobClock bool
	// Consumer are consumer settings that win over the loop's own (a Kafka
	// source's auto.offset.reset and isolation.level).
	Consumer map[string]string
	// StartAt, if not zero, is where a task without a committed offset
	// starts: at the first record whose Kafka timestamp is at or after it
	// (offsetsForTimes; the partition's end if there is none), instead of
	// auto.offset.reset's place. Kafka timestamps are milliseconds: StartAt
	// is taken to the millisecond.
	StartAt time.Time
	// CommitInterval is the longest a transaction collects records before it
	// commits, like Kafka Streams' commit.interval.ms. Default 100 ms.
	CommitInterval time.Duration
	// SpillDir is where an attempt's spill file lives (Loop.spill: the
	// records of an attempt beyond StepConfig.SpillBytes wait there for
	// the transaction; removed when Run returns). Default os.TempDir().
	SpillDir string
	// MaxBatchRecords bounds the records in one transaction. Default 10 000.
	MaxBatchRecords int
	// MaxAttempts is how many times a failing bundle is retried (abort,
	// rewind, read again) before Run returns its error. Default 4.
	MaxAttempts int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Producer, if set, is the stage's transactional producer started
	// ahead by StartProducer for this stage and InstanceID: New waits for
	// its InitTransactions and takes it over (Close closes it). Nil: New
	// creates and initialises one itself.
	Producer *Producer
	// Observer is told of commits, aborts and rebalances (metrics); its
	// nil fields are skipped.
	Observer Observer
	// CommitRecords, if set, returns records to add to every transaction
	// the loop commits, after the step's records (the runner's: the
	// transaction's counts for the application's metrics topic). It is
	// called on the loop's goroutine once the step has decided the attempt
	// (the head's state is the attempt's) and before the transaction
	// begins; the records are aborted with the attempt.
	CommitRecords func(TxnSummary) []step.Record
}

// TxnSummary is what one transaction about to commit holds, for
// Config.CommitRecords.
type TxnSummary struct {
	// RecordsIn, ElementsIn, ElementsOut and Bundles are the transaction's
	// (Stats' fields of one commit).
	RecordsIn, ElementsIn, ElementsOut, Bundles uint64
	// AbortsBefore counts the attempts this loop aborted since its previous
	// committed transaction (or its start).
	AbortsBefore uint64
	// Tasks are the tasks (input partitions) the transaction holds work
	// or offsets of, ascending.
	Tasks []int32
}

// Sentinel errors.
var (
	// ErrFenced: another producer with this transactional.id, or a newer
	// group generation, fenced this instance; its tasks stop. Not retryable.
	ErrFenced = errors.New("stage: producer fenced")
	// ErrBundleFailed: a bundle failed MaxAttempts times; wraps the cause.
	ErrBundleFailed = errors.New("stage: bundle failed")
	// ErrLocalState: a transaction committed but the head could not apply
	// its state changes to the local stores; the task state here is
	// suspect (a restart restores it from the changelog). Not retryable.
	ErrLocalState = errors.New("stage: local state after commit")
	// ErrInputGrown: a partition was added to the input topic of a stage
	// whose count the plan fixes (an internal topic; Spec.GrowingInput
	// false): no upstream writes to it or counts it, so its task's reports
	// would be refused downstream. Not retryable: the application's topics
	// must be recreated (at start-up the runner refuses a count that differs
	// from the plan's).
	ErrInputGrown = errors.New("stage: partitions added to an internal topic")
)

// Stats are counters of committed work (never of aborted attempts).
type Stats struct {
	RecordsIn, ElementsIn, ElementsOut, ReportsOut, Commits, Aborts uint64
	// Bundles counts the committed bundles.
	Bundles uint64
	// FirstCommit and LastCommit are the wall-clock times of the first and
	// the last committed transaction (zero if none): RecordsIn / (LastCommit
	// - FirstCommit) is the stage's throughput in input records. (ElementsIn
	// counts what entered the bundles: panes, for a GroupByKey stage.)
	FirstCommit, LastCommit time.Time
	// Assigned is when the loop's first assignment was served (its tasks
	// restored and consumable; zero if none yet), FirstRecord when its
	// first input record was polled (zero if none yet): the start-up
	// timeline's last two steps.
	Assigned, FirstRecord time.Time
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
	// drainRequested is set by Drain; drained and stopReading are the
	// loop goroutine's record of having applied it.
	drainRequested       atomic.Bool
	drained, stopReading bool
	producer             *kafka.Producer
	group                string
	txnID                string
	core                 *step.Step
	head                 step.Head
	// topicNames holds one *string per topic name for the produced
	// messages (kafka.TopicPartition wants a pointer: one allocation per
	// topic, not per record).
	topicNames map[string]*string

	// tasks are owned by the goroutine running Run (rebalance callbacks run
	// inside Poll, on that goroutine).
	tasks map[int32]*step.Task
	// rebalanceErr is set by the rebalance callback when a task cannot be
	// restored (the client ignores a callback's error); Run returns it.
	rebalanceErr error
	// side holds back tasks waiting for side inputs (sidegate.go).
	side sideGate
	// woken are the tasks the last attempt ran for due processing-time
	// timers without records of theirs (woken): rewind restores them too.
	woken map[int32]int64
	// reportAll: every assigned task reports at the next attempt (the
	// input topic's partition count grew; Spec.GrowingInput).
	reportAll bool
	// seenPartitions is the largest partition count of the input topic
	// that watchPartitions has read (0: none yet); written by that
	// goroutine, read by the loop's.
	seenPartitions atomic.Int32
	// aligned are the partitions paused because the head asked (Pause).
	aligned map[int32]bool
	// logEnd is askLogEnds' state (logends.go): its admin client (nil
	// until first needed), whether a request is in flight (busy; its
	// answer comes on answers), when it last asked and last logged a
	// failure.
	logEnd struct {
		admin         *kafka.AdminClient
		answers       chan logEndAnswer
		busy          bool
		asked, failed time.Time
	}
	// status is what Tasks returns: written here, read by any goroutine.
	status taskStatuses
	// abortsUncommitted counts the attempts aborted since the last commit
	// (TxnSummary.AbortsBefore).
	abortsUncommitted uint64
	// spilled holds the records the attempt's Decide spilled
	// (StepConfig.Spill) until its transaction produces them; nil until
	// the first spill.
	spilled *spillFile

	stats struct {
		recordsIn, elementsIn, elementsOut, reportsOut, commits, aborts, bundles atomic.Uint64
		// firstCommit and lastCommit are Unix nanoseconds (0: none yet).
		firstCommit, lastCommit atomic.Int64
		// assigned and firstRecord are Unix nanoseconds (0: none yet).
		assigned, firstRecord atomic.Int64
	}
	closeOnce sync.Once
	// abandoned says a transaction call of the producer did not return
	// (callWithin): the producer is left as it is, never closed.
	abandoned bool
	// closing is set while the consumer closes: an assignment that arrives
	// then (a rebalance in the middle of leaving) is taken without
	// restoring its tasks (no committed-offset wait, which could block the
	// close for minutes behind an abandoned transaction).
	closing bool
	// consumerFatal says the consumer reported a fatal error (a static
	// member fenced, KIP-345): it is abandoned, never closed (see
	// closeConsumer).
	consumerFatal bool
	// cbMu orders the rebalance callbacks, which a closing consumer runs
	// on closeConsumer's goroutine, with closeConsumer giving that
	// consumer up; live (guarded by cbMu) is the consumer whose callbacks
	// change the loop's state: a callback of any other consumer (one given
	// up) does nothing.
	cbMu sync.Mutex
	live *kafka.Consumer
}

// New creates the consumer and producer and initialises transactions. It
// returns an error naming the stage if the brokers cannot be reached.
func New(ctx context.Context, cfg Config) (*Loop, error) {
	if cfg.Spec.Name == "" || cfg.Spec.InputTopic == "" || cfg.Head == nil || cfg.BootstrapServers == "" || cfg.ReportTopic == "" || cfg.InstanceID == "" {
		return nil, errors.New("stage: Config needs Spec (Name, InputTopic), Head, BootstrapServers, ReportTopic and InstanceID")
	}
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = 100 * time.Millisecond
	}
	if cfg.MaxBatchRecords <= 0 {
		cfg.MaxBatchRecords = 10000
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Loop{}
	core, err := step.New(step.Config{Spec: cfg.Spec, Head: cfg.Head, Process: cfg.Process, KeyOf: cfg.KeyOf, SideInputs: cfg.SideInputs, ReportTopic: cfg.ReportTopic, Instance: cfg.InstanceID, JobClock: cfg.JobClock, Spill: l.spill})
	if err != nil {
		return nil, err
	}
	*l = Loop{
		cfg:   cfg,
		log:   cfg.Logger.With("stage", cfg.Spec.Name),
		group: cfg.Spec.ApplicationID + "." + cfg.Spec.Name,
		txnID: kafkaclient.TransactionalID(cfg.Spec.ApplicationID, cfg.Spec.Name, cfg.InstanceID),
		core:  core,
		head:  cfg.Head,
		tasks: map[int32]*step.Task{},
	}
	if cfg.Producer != nil && cfg.Producer.txnID != l.txnID {
		cfg.Producer.Close()
		return nil, fmt.Errorf("stage %s: Config.Producer has transactional.id %s, the stage's is %s", cfg.Spec.Name, cfg.Producer.txnID, l.txnID)
	}
	if err := l.openClients(ctx, cfg.Producer); err != nil {
		return nil, err
	}
	return l, nil
}

// openClients creates the loop's consumer and takes pr (nil: a new one,
// StartProducer) as its transactional producer once pr's InitTransactions
// has returned (fencing any earlier producer of the same transactional id
// and aborting its open transaction).
func (l *Loop) openClients(ctx context.Context, pr *Producer) error {
	cfg := l.cfg
	var err error
	// Statistics events give each task's consumer lag (TaskStatus).
	cc := kafkaclient.GroupConsumerConfig(cfg.BootstrapServers, cfg.Properties, l.group, StatsInterval, cfg.Consumer)
	if pr == nil {
		pr = StartProducer(ctx, cfg.BootstrapServers, cfg.Properties, cfg.Spec.ApplicationID, cfg.Spec.Name, cfg.InstanceID, cfg.Logger)
	}
	if l.consumer, err = kafka.NewConsumer(&cc); err != nil {
		pr.Close()
		return fmt.Errorf("stage %s: consumer: %w", cfg.Spec.Name, err)
	}
	l.cbMu.Lock()
	l.live, l.consumerFatal = l.consumer, false
	l.cbMu.Unlock()
	if err := pr.wait(ctx); err != nil {
		pr.Close()
		l.consumer.Close()
		return err
	}
	pr.taken.Store(true)
	l.producer = pr.p
	return nil
}

// Tasks returns the status of the tasks this instance is assigned, sorted
// by partition. Safe from any goroutine.
func (l *Loop) Tasks() []TaskStatus { return l.status.snapshot() }

// InstanceID is the instance id the loop was configured with.
func (l *Loop) InstanceID() string { return l.cfg.InstanceID }

// Stats returns the committed counters.
func (l *Loop) Stats() Stats {
	return Stats{
		RecordsIn:   l.stats.recordsIn.Load(),
		ElementsIn:  l.stats.elementsIn.Load(),
		ElementsOut: l.stats.elementsOut.Load(),
		ReportsOut:  l.stats.reportsOut.Load(),
		Commits:     l.stats.commits.Load(),
		Bundles:     l.stats.bundles.Load(),
		Aborts:      l.stats.aborts.Load(),
		FirstCommit: unixNanos(l.stats.firstCommit.Load()),
		LastCommit:  unixNanos(l.stats.lastCommit.Load()),
		Assigned:    unixNanos(l.stats.assigned.Load()),
		FirstRecord: unixNanos(l.stats.firstRecord.Load()),
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
		l.closeLogEnds()
		l.closeConsumer()
		if !l.abandoned {
			l.producer.Close()
		}
	})
}

// rebalance keeps l.tasks in step with the assignment. On assignment it
// restores every new task from its committed offset's metadata, before the
// partition is consumed.
func (l *Loop) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	l.cbMu.Lock()
	defer l.cbMu.Unlock()
	if c != l.live {
		return nil // a consumer given up by closeConsumer
	}
	if err := l.applyRebalance(c, ev); err != nil {
		l.rebalanceErr = err
		return err
	}
	return nil
}

func (l *Loop) applyRebalance(c *kafka.Consumer, ev kafka.Event) error {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if l.closing {
			return c.IncrementalAssign(e.Partitions)
		}
		if !l.cfg.Spec.GrowingInput {
			for _, tp := range e.Partitions {
				if tp.Partition >= l.core.Partitions() {
					return fmt.Errorf("%w: stage %s: partition %d of %s assigned, but the plan made the topic with %d partitions and its upstreams write to those only", ErrInputGrown, l.cfg.Spec.Name, tp.Partition, l.cfg.Spec.InputTopic, l.core.Partitions())
				}
			}
		}
		committed, err := l.committed(c, e.Partitions)
		if err != nil {
			return fmt.Errorf("stage %s: committed offsets: %w", l.cfg.Spec.Name, err)
		}
		for _, tp := range committed {
			md := ""
			if tp.Metadata != nil {
				md = *tp.Metadata
			}
			t, err := step.RestoreTask(tp.Partition, l.cfg.Spec.Upstreams, md)
			if err != nil {
				return err
			}
			if err := l.head.Assign(context.Background(), tp.Partition); err != nil {
				return fmt.Errorf("stage %s: task %d: %w", l.cfg.Spec.Name, tp.Partition, err)
			}
			l.tasks[tp.Partition] = t
			now := time.Now()
			l.status.update(tp.Partition, func(s *TaskStatus) { *s = TaskStatus{Partition: s.Partition, AssignedAt: now, LagRecords: -1} })
		}
		if f := l.cfg.Observer.Rebalanced; f != nil {
			f(partitionsOf(e.Partitions), nil)
		}
		if err := l.startAt(c, committed, e.Partitions); err != nil {
			return err
		}
		l.log.Info("stage: tasks assigned", "partitions", partitionsOf(e.Partitions))
		l.stats.assigned.CompareAndSwap(0, time.Now().UnixNano())
		for _, tp := range e.Partitions {
			if tp.Partition >= l.core.Partitions() {
				// A partition beyond the count: its task must not report
				// before the count covers it (a report of partition p of
				// total <= p is refused downstream). Ask now.
				l.checkPartitions(c, tp.Partition+1)
				break
			}
		}
		return c.IncrementalAssign(e.Partitions)
	case kafka.RevokedPartitions:
		for _, tp := range e.Partitions {
			delete(l.tasks, tp.Partition)
			delete(l.side.paused, tp.Partition)
			delete(l.aligned, tp.Partition)
			l.head.Revoke(tp.Partition)
			l.status.remove(tp.Partition)
		}
		if f := l.cfg.Observer.Rebalanced; f != nil {
			f(nil, partitionsOf(e.Partitions))
		}
		l.log.Info("stage: tasks revoked", "partitions", partitionsOf(e.Partitions), "lost", c.AssignmentLost())
		return c.IncrementalUnassign(e.Partitions)
	}
	return nil
}

// startAt sets, in assigned, the start offset of every partition that has
// no committed offset (committed says) to Config.StartAt's, when it is set.
func (l *Loop) startAt(c *kafka.Consumer, committed, assigned []kafka.TopicPartition) error {
	if l.cfg.StartAt.IsZero() {
		return nil
	}
	var ask []kafka.TopicPartition
	for _, tp := range committed {
		if tp.Offset < 0 {
			ask = append(ask, kafka.TopicPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: kafka.Offset(l.cfg.StartAt.UnixMilli())})
		}
	}
	if len(ask) == 0 {
		return nil
	}
	got, err := c.OffsetsForTimes(ask, int(committedTimeout.Milliseconds()))
	if err != nil {
		return fmt.Errorf("stage %s: offsets for start time %s: %w", l.cfg.Spec.Name, l.cfg.StartAt.UTC().Format(time.RFC3339Nano), err)
	}
	at := map[int32]kafka.Offset{}
	for _, tp := range got {
		if tp.Error != nil {
			return fmt.Errorf("stage %s: task %d: offset for start time %s: %w", l.cfg.Spec.Name, tp.Partition, l.cfg.StartAt.UTC().Format(time.RFC3339Nano), tp.Error)
		}
		at[tp.Partition] = tp.Offset // kafka.OffsetEnd when no record is that late
	}
	for i, tp := range assigned {
		if o, ok := at[tp.Partition]; ok {
			assigned[i].Offset = o
		}
	}
	l.log.Info("stage: tasks without committed offsets start at a time", "start_at", l.cfg.StartAt.UTC().Format(time.RFC3339Nano), "partitions", partitionsOf(ask))
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

// Run consumes until ctx is done (nil), a bundle fails MaxAttempts times
// (ErrBundleFailed), the local state cannot take a committed attempt
// (ErrLocalState), or a Kafka error recurs. A Kafka error (the producer
// fenced or fatal, the consumer fatal, a coordinator gone while the rewind
// asked for committed offsets, a transaction that timed out: what a
// broker's failover gives) restarts the loop's clients, as a restart of the
// instance would: every task is revoked, the consumer leaves the group, new
// clients join it (InitTransactions aborts the open transaction) and get
// tasks assigned, each restored from its committed offset and checkpoint.
// Exactly once holds as for any restart. After maxRestarts restarts within
// restartWindow the error is returned. Run closes the clients before
// returning.
//
// The goroutine runs under the pprof label stage=<name> (runtime/pprof.Do):
// a CPU profile of an instance splits by stage with -tagfocus=stage=….
func (l *Loop) Run(ctx context.Context) (err error) {
	pprof.Do(ctx, pprof.Labels("stage", l.cfg.Spec.Name), func(ctx context.Context) { err = l.runLabelled(ctx) })
	return err
}

// runLabelled is Run's body.
func (l *Loop) runLabelled(ctx context.Context) error {
	defer l.Close()
	defer func() {
		if l.spilled != nil {
			l.spilled.close()
		}
	}()
	var restarts []time.Time
	for {
		err := l.run(ctx)
		if err == nil || ctx.Err() != nil || !restartable(err) {
			return err
		}
		now := time.Now()
		kept := restarts[:0]
		for _, at := range restarts {
			if now.Sub(at) < restartWindow {
				kept = append(kept, at)
			}
		}
		restarts = append(kept, now)
		if len(restarts) > maxRestarts {
			return fmt.Errorf("%w (the stage restarted its Kafka clients %d times within %v)", err, maxRestarts, restartWindow)
		}
		l.log.Warn("stage: restarting the stage's Kafka clients after a Kafka error: its tasks are revoked and will be assigned again, restored from their committed offsets", "restart", len(restarts), "err", err)
		if err := l.reopen(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// maxRestarts bounds Run's client restarts within restartWindow.
const (
	maxRestarts   = 5
	restartWindow = 5 * time.Minute
)

// restartable says whether err, which ended run, is one a restart of the
// stage's Kafka clients can get past: ErrFenced, or any error from the
// Kafka client (wrapped in ErrBundleFailed or not); never ErrLocalState or
// an error of the SDK or the head.
func restartable(err error) bool {
	if errors.Is(err, ErrLocalState) {
		return false
	}
	if errors.Is(err, ErrFenced) {
		return true
	}
	var ke kafka.Error
	return errors.As(err, &ke)
}

// reopen closes the loop's clients, revokes every task from the head and
// forgets the loop's per-task state, then opens new clients (after a
// second, or until ctx is done).
func (l *Loop) reopen(ctx context.Context) error {
	l.closeConsumer()
	if !l.abandoned {
		l.producer.Close()
	}
	l.abandoned = false
	for p := range l.tasks {
		l.head.Revoke(p)
		l.status.remove(p)
	}
	l.tasks = map[int32]*step.Task{}
	l.side.paused = map[int32]time.Time{}
	l.aligned = map[int32]bool{}
	l.woken = nil
	l.rebalanceErr = nil
	select {
	case <-ctx.Done():
		l.closeLogEnds()
		l.closeOnce.Do(func() {}) // closed above: Close must not close them again
		return ctx.Err()
	case <-time.After(time.Second):
	}
	if err := l.openClients(ctx, nil); err != nil {
		l.closeOnce.Do(func() {})
		return err
	}
	return nil
}

// closeConsumer closes the loop's consumer (its rebalance callbacks run
// with closing set), or gives it up: a consumer that reported a fatal error
// is never closed, and one whose Close has not returned after
// consumerCloseTimeout is left to it. confluent-kafka-go v2.11.1 (the newest
// the module proxy serves) loops for ever in Close when the consumer has a
// fatal error, e.g. a static member fenced by its own rejoin after a broker
// failover (librdkafka issue 3437): rd_kafka_consumer_close_queue refuses to
// start and Close waits for a close that never comes (fixed upstream by
// confluent-kafka-go PR 1588). In the broker failover scenario with static
// membership an instance could not restart its clients, nor stop. A consumer
// given up keeps its librdkafka handle (a leak bounded by Run's restart
// budget); its callbacks no longer touch the loop (live), and a new consumer
// takes its place in the group (with static membership at once: the same
// group.instance.id fences it; otherwise at its session timeout).
func (l *Loop) closeConsumer() {
	c := l.consumer
	l.cbMu.Lock()
	l.closing = true
	l.cbMu.Unlock()
	// A fatal error may wait in the queue unread (the loop restarts after a
	// producer error as well): look for one first. Records read here are
	// dropped: every task is revoked and rewinds to its committed offset.
	for i := 0; i < closeDrainMax; i++ {
		ev := c.Poll(0)
		if ev == nil {
			break
		}
		if e, ok := ev.(kafka.Error); ok && e.IsFatal() {
			l.cbMu.Lock()
			l.consumerFatal = true
			l.cbMu.Unlock()
		}
	}
	l.cbMu.Lock()
	fatal := l.consumerFatal
	l.cbMu.Unlock()
	reason := ""
	if fatal {
		reason = "it reported a fatal error (confluent-kafka-go v2.11.1's Close never returns then)"
	} else {
		done := make(chan struct{})
		go func() {
			_ = c.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(consumerCloseTimeout):
			reason = fmt.Sprintf("its Close did not return within %v", consumerCloseTimeout)
		}
	}
	l.cbMu.Lock()
	if reason != "" {
		l.live = nil
		l.log.Warn("stage: the consumer is given up, not closed: its librdkafka handle stays allocated", "reason", reason)
	}
	l.closing = false
	l.cbMu.Unlock()
}

// consumerCloseTimeout bounds closeConsumer's wait for a consumer's Close
// (a revocation callback and leaving the group: well under a second on a
// healthy cluster).
const consumerCloseTimeout = 20 * time.Second

// closeDrainMax bounds the events closeConsumer reads looking for a fatal
// error before it closes the consumer (one fetch's records at most).
const closeDrainMax = 100_000

// run is one life of the loop's clients (see Run).
func (l *Loop) run(ctx context.Context) error {
	if err := l.consumer.SubscribeTopics([]string{l.cfg.Spec.InputTopic}, l.rebalance); err != nil {
		return fmt.Errorf("stage %s: subscribe %s: %w", l.cfg.Spec.Name, l.cfg.Spec.InputTopic, err)
	}
	if l.cfg.Spec.GrowingInput {
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.watchPartitions(wctx, l.consumer)
		}()
		// Before the consumer is closed (reopen, Close): the watcher uses it.
		defer wg.Wait()
		defer stop()
	}
	attempts := 0
	for ctx.Err() == nil {
		l.applyDrain()
		l.grow(l.seenPartitions.Load())
		// Before the poll: a partition the head holds must not be read.
		if err := l.align(); err != nil {
			return err
		}
		l.askLogEnds(ctx)
		batch, err := l.poll(ctx)
		if err != nil {
			return err
		}
		if l.stopReading && len(batch) > 0 {
			// Drained: records fetched before the pause stay unprocessed
			// and uncommitted (a rerun of the application reads them).
			l.log.Info("stage: draining: records left unread", "records", len(batch))
			batch = nil
		}
		wake := l.wakeTasks(batch)
		if len(batch) == 0 && len(wake) == 0 {
			continue
		}
		var blocked map[int32]int64
		blocked, err = l.commit(ctx, batch, wake)
		if err == nil {
			err = l.holdBlocked(blocked)
		}
		switch {
		case err == nil:
			attempts = 0
		case errors.Is(err, ErrFenced), errors.Is(err, ErrLocalState):
			return err
		default:
			attempts++
			l.stats.aborts.Add(1)
			l.abortsUncommitted++
			if f := l.cfg.Observer.Aborted; f != nil {
				f()
			}
			l.log.Warn("stage: transaction aborted, rewinding", "attempt", attempts, "err", err)
			if rerr := l.rewind(batch); rerr != nil {
				return rerr
			}
			if attempts >= l.cfg.MaxAttempts {
				return fmt.Errorf("%w: stage %s after %d attempts: %w", ErrBundleFailed, l.cfg.Spec.Name, attempts, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempts) * 200 * time.Millisecond):
			}
		}
	}
	l.leaveGroup()
	return nil
}

// Drain asks the loop to drain (Beam's drain; see Drainer): at its next
// iteration it calls the head's Drain, and polls no more records if the
// head says so. Safe from any goroutine; later calls do nothing more.
func (l *Loop) Drain() { l.drainRequested.Store(true) }

// applyDrain carries out a requested drain once, on the loop's goroutine.
func (l *Loop) applyDrain() {
	if !l.drainRequested.Load() || l.drained {
		return
	}
	l.drained = true
	if d, ok := l.head.(step.Drainer); ok {
		l.stopReading = d.Drain()
		l.log.Info("stage: draining", "stop_reading", l.stopReading)
	}
}

// leaveGroup, on a clean stop, makes a static member (group.instance.id
// set, KIP-345) leave its group now, as a dynamic one does when its
// consumer closes: librdkafka sends no LeaveGroup when a static member
// closes, so its tasks would wait for its session timeout. Unsubscribing
// first does send it; the revocation is served here (Poll), at most 5 s.
func (l *Loop) leaveGroup() {
	if l.cfg.Consumer["group.instance.id"] == "" {
		return
	}
	if err := l.consumer.Unsubscribe(); err != nil {
		l.log.Warn("stage: leaving the group", "err", err)
		return
	}
	for deadline := time.Now().Add(5 * time.Second); len(l.tasks) > 0 && time.Now().Before(deadline); {
		l.consumer.Poll(50)
	}
}

// poll collects records for at most CommitInterval or MaxBatchRecords,
// or until the batch holds a record that ends an input (endsInput) and
// the records the consumer already has queued are in the batch too: the
// end of an input is what the stages downstream wait for, and waiting out
// the interval with nothing more to come cost every stage of a bounded
// job a commit interval at its end (7 stages, 0.1 s each). Records of
// partitions revoked meanwhile are dropped.
func (l *Loop) poll(ctx context.Context) ([]*kafka.Message, error) {
	if err := l.resumeHeld(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(l.cfg.CommitInterval)
	if o, ok := l.head.(step.Owing); ok && o.Owes() {
		// The next attempt is due now: take only what is fetched already.
		deadline = time.Now().Add(time.Millisecond)
	}
	var batch []*kafka.Message
	// owners[i] is the task that owned batch[i]'s partition when it was
	// polled. A partition revoked and assigned again during the poll has a
	// new task and a position back at its committed offset: its records
	// polled before are stale and would be processed twice.
	var owners []*step.Task
	// ending: the batch holds a record that ends an input; the poll takes
	// what is queued (Poll without waiting) and stops at the first empty
	// answer.
	ending := false
	for len(batch) < l.cfg.MaxBatchRecords && ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		wait := int(left.Milliseconds()) + 1
		if ending {
			wait = 0
		}
		switch e := l.consumer.Poll(wait).(type) {
		case nil:
			if ending {
				deadline = time.Now()
			}
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				l.log.Warn("stage: consume error", "err", e.TopicPartition.Error)
				continue
			}
			if len(batch) == 0 {
				l.stats.firstRecord.CompareAndSwap(0, time.Now().UnixNano())
			}
			batch = append(batch, e)
			owners = append(owners, l.tasks[e.TopicPartition.Partition])
			ending = ending || l.endsInput(e.Value)
		case kafka.PartitionEOF:
			if l.tasks[e.Partition] != nil {
				l.head.ReachedEnd(e.Partition, int64(e.Offset))
			}
		case kafka.Error:
			if e.IsFatal() {
				l.cbMu.Lock()
				l.consumerFatal = true
				l.cbMu.Unlock()
				return nil, fmt.Errorf("stage %s: consumer: %w", l.cfg.Spec.Name, e)
			}
			l.log.Warn("stage: consumer error", "err", e)
		case *kafka.Stats:
			if r, ok := l.head.(step.Reachability); ok {
				if up, err := PartitionsReachable(e.String(), l.cfg.Spec.InputTopic); err == nil {
					for p, ok := range up {
						if l.tasks[p] != nil {
							r.SetReachable(p, ok)
						}
					}
				}
			}
			if lag, err := ConsumerLag(e.String(), l.cfg.Spec.InputTopic); err == nil {
				for p, n := range lag {
					if l.tasks[p] != nil {
						l.status.update(p, func(s *TaskStatus) { s.LagRecords = n })
					}
				}
			}
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

// endsInput reports whether an input record of this stage ends an input
// of one of its tasks, so that poll commits it without waiting out the
// commit interval: any record of a head that says every record does
// (step.EndsInput: an Impulse stage, whose impulse record is the only
// record its input topic ever holds), or, on an internal topic, a batch of
// watermark reports one of which is at the end of time (an upstream task
// is done; reportsEndOfTime). A task reports only a watermark that moved
// (Step: out' > out), so each upstream task reports the end of time once
// (again after its partition moves to another instance): a long-running
// job commits early a bounded number of times, and the commit interval
// still paces its steady flow. Records of users' topics (Spec.RawInput)
// never end an input here.
func (l *Loop) endsInput(v []byte) bool {
	if e, ok := l.head.(step.EndsInput); ok && e.EveryRecordEndsInput() {
		return true
	}
	return !l.cfg.Spec.RawInput && reportsEndOfTime(v)
}

// commit decides the attempt (Step.Decide: the head and the bundles, no
// Kafka) and carries out its Ready in one transaction: the records, the
// head's changelog, the offsets with the tasks' checkpoints. On an error
// the transaction is aborted, the head's changes dropped and the error
// returned; the caller rewinds. It returns the tasks side inputs hold back.
func (l *Loop) commit(ctx context.Context, batch []*kafka.Message, wake []int32) (blocked map[int32]int64, err error) {
	ins := make([]step.In, len(batch))
	touched := map[int32]bool{}
	for i, m := range batch {
		ins[i] = step.In{Task: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset), Key: m.Key, Value: m.Value}
		if m.TimestampType != kafka.TimestampNotAvailable {
			ins[i].Timestamp = m.Timestamp.UnixMilli()
			ins[i].LogAppendTime = m.TimestampType == kafka.TimestampLogAppendTime
		}
		for _, h := range m.Headers {
			ins[i].Headers = append(ins[i].Headers, step.Header{Key: h.Key, Value: h.Value})
		}
		touched[m.TopicPartition.Partition] = true
	}
	began := time.Now()
	for p := range touched {
		l.status.update(p, func(s *TaskStatus) { s.AttemptSince = began })
	}
	defer func() {
		for p := range touched {
			if l.tasks[p] != nil {
				l.status.update(p, func(s *TaskStatus) { s.AttemptSince = time.Time{} })
			}
		}
	}()
	l.woken = nil
	if len(wake) > 0 {
		if l.woken, err = l.positions(wake); err != nil {
			return nil, err
		}
		for p := range l.woken {
			touched[p] = true
		}
	}
	inTxn := false
	defer func() {
		if err != nil {
			if herr := l.core.Abort(slices.Sorted(maps.Keys(touched))); herr != nil {
				err = errors.Join(err, herr)
			}
			if inTxn {
				err = l.abort(ctx, err)
			}
		}
	}()
	if l.spilled != nil {
		if err := l.spilled.reset(); err != nil {
			return nil, fmt.Errorf("stage %s: %w", l.cfg.Spec.Name, err)
		}
	}
	r, err := l.core.Decide(ctx, l.tasks, ins, l.woken)
	if err != nil {
		return nil, err
	}
	if r.Empty() {
		return r.Blocked, nil // nothing to commit
	}
	decided := time.Now()
	if err := l.producer.BeginTransaction(); err != nil {
		return nil, l.classify(ctx, "begin transaction", err)
	}
	inTxn = true
	if r.Spilled > 0 {
		if err := l.spilled.replay(l.produceRecord); err != nil {
			return nil, err
		}
	}
	for i := range r.Records {
		if err := l.produceRecord(&r.Records[i]); err != nil {
			return nil, err
		}
	}
	if f := l.cfg.CommitRecords; f != nil {
		extra := f(TxnSummary{RecordsIn: uint64(len(batch)), ElementsIn: r.ElementsIn, ElementsOut: r.ElementsOut, Bundles: r.Bundles, AbortsBefore: l.abortsUncommitted, Tasks: slices.Sorted(maps.Keys(touched))})
		for i := range extra {
			if err := l.produceRecord(&extra[i]); err != nil {
				return nil, err
			}
		}
	}
	for i := range r.State {
		if err := l.produceRecord(&r.State[i]); err != nil {
			return nil, err
		}
	}
	topic := l.cfg.Spec.InputTopic
	offsets := make([]kafka.TopicPartition, len(r.Offsets))
	for i, o := range r.Offsets {
		md := o.Metadata
		offsets[i] = kafka.TopicPartition{Topic: &topic, Partition: o.Task, Offset: kafka.Offset(o.Next), Metadata: &md}
	}
	gm, err := l.consumer.GetConsumerGroupMetadata()
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, txnCallTimeout)
	defer cancel()
	if err := l.callWithin("send offsets", func() error { return l.producer.SendOffsetsToTransaction(tctx, offsets, gm) }); err != nil {
		return nil, l.classify(ctx, "send offsets", err)
	}
	if err := l.callWithin("commit", func() error { return l.producer.CommitTransaction(tctx) }); err != nil {
		return nil, l.classify(ctx, "commit", err)
	}
	inTxn = false
	if err := l.core.Advance(r); err != nil {
		// The transaction is durable in Kafka; the local store can be
		// restored from the changelog. Stop: the task state is suspect.
		return nil, fmt.Errorf("%w: %w", ErrLocalState, err)
	}
	l.stats.commits.Add(1)
	l.abortsUncommitted = 0
	end := time.Now()
	for p := range touched {
		if l.tasks[p] != nil {
			l.status.update(p, func(s *TaskStatus) { s.LastCommit = end })
		}
	}
	if f := l.cfg.Observer.Committed; f != nil {
		f(CommitObservation{Process: decided.Sub(began), Commit: end.Sub(decided), Stats: Stats{RecordsIn: uint64(len(batch)), ElementsIn: r.ElementsIn, ElementsOut: r.ElementsOut, Bundles: r.Bundles, Commits: 1}})
	}
	now := end.UnixNano()
	l.stats.firstCommit.CompareAndSwap(0, now)
	l.stats.lastCommit.Store(now)
	l.stats.recordsIn.Add(uint64(len(batch)))
	l.stats.elementsIn.Add(r.ElementsIn)
	if out := l.stats.elementsOut.Add(r.ElementsOut); r.ElementsOut > 0 && out == r.ElementsOut {
		// Once per loop: when this instance's share of the stage first
		// gave output (tests wait for it before killing an instance).
		l.log.Info("stage: first output committed", "elements_out", r.ElementsOut, "commits", l.stats.commits.Load())
	}
	l.stats.reportsOut.Add(r.ReportsOut)
	l.stats.bundles.Add(r.Bundles)
	return r.Blocked, nil
}

// spill is the step's StepConfig.Spill: it writes records to the
// attempt's spill file on local disk, which the transaction replays, in
// order, before the Ready's records (commit). So an attempt whose output
// is larger than memory (a file read in one bundle, every window of a job
// firing at its end) is never held whole, and its transaction stays as
// short as producing it: the bundle runs before the transaction opens, as
// without a spill, well within transaction.timeout.ms.
func (l *Loop) spill(records []step.Record) error {
	if l.spilled == nil {
		l.spilled = &spillFile{dir: l.cfg.SpillDir}
	}
	return l.spilled.add(records)
}

func (l *Loop) produceRecord(r *step.Record) error {
	topic := l.topicNames[r.Topic]
	if topic == nil {
		t := r.Topic
		topic = &t
		if l.topicNames == nil {
			l.topicNames = map[string]*string{}
		}
		l.topicNames[t] = topic
	}
	for {
		err := l.producer.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: topic, Partition: r.Partition}, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, nil)
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
			l.producer.Flush(100)
			continue
		}
		if err != nil {
			return fmt.Errorf("stage %s: produce to %s: %w", l.cfg.Spec.Name, *topic, err)
		}
		return nil
	}
}

// classify turns a fatal producer error into ErrFenced.
func (l *Loop) classify(_ context.Context, what string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.IsFatal() || ke.Code() == kafka.ErrFenced || ke.Code() == kafka.ErrProducerFenced) {
		return fmt.Errorf("%w: stage %s: %s: %w", ErrFenced, l.cfg.Spec.Name, what, err)
	}
	return fmt.Errorf("stage %s: %s: %w", l.cfg.Spec.Name, what, err)
}

// abort aborts the open transaction and returns cause (or ErrFenced if the
// abort itself says the producer is fenced).
func (l *Loop) abort(ctx context.Context, cause error) error {
	if errors.Is(cause, ErrFenced) {
		return cause
	}
	tctx, cancel := context.WithTimeout(ctx, txnCallTimeout)
	defer cancel()
	if err := l.producer.AbortTransaction(tctx); err != nil {
		return errors.Join(cause, l.classify(ctx, "abort", err))
	}
	return cause
}

// callWithin runs f, a blocking transaction call given txnCallTimeout, and
// returns its error; if f has not returned txnCallGrace after that timeout,
// it returns an ErrFenced error and marks the producer abandoned: librdkafka
// was seen to ignore the timeout while its transaction coordinator's broker
// was down (in the broker failover scenario a SendOffsetsToTransaction given
// 30 s blocked for minutes). An abandoned producer is never closed (closing
// would wait for the call): Run restarts the clients, and the new producer's
// InitTransactions fences it and aborts its transaction, unless the call
// completed meanwhile; either way the tasks are restored from what Kafka
// committed.
func (l *Loop) callWithin(what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTimer(txnCallTimeout + txnCallGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		l.abandoned = true
		return fmt.Errorf("%w: stage %s: %s did not return within %v (the Kafka client ignored its timeout): the producer is abandoned", ErrFenced, l.cfg.Spec.Name, what, txnCallTimeout+txnCallGrace)
	}
}

// txnCallGrace is how long callWithin waits past txnCallTimeout.
const txnCallGrace = 15 * time.Second

// txnCallTimeout bounds each blocking transaction call (sending the
// offsets, commit, abort). Without a deadline confluent-kafka-go waits for
// ever: in the broker failover scenario a stage loop waited in
// SendOffsetsToTransaction for minutes after its coordinator's broker died
// (its instance could not even stop). A call that times out fails the
// attempt; the abort and rewind follow, and a Kafka error that recurs
// restarts the clients (Run). Longer than transaction.timeout.ms (10 s), so
// a slow commit is not cut short on a loaded machine.
const txnCallTimeout = 30 * time.Second

// rewind puts every task of the batch back to its committed state: the
// checkpoint in the committed offset's metadata, and the consumer position at
// the committed offset.
func (l *Loop) rewind(batch []*kafka.Message) error {
	parts := map[int32]bool{}
	for _, m := range batch {
		parts[m.TopicPartition.Partition] = true
	}
	for p := range l.woken {
		parts[p] = true
	}
	topic := l.cfg.Spec.InputTopic
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
		return fmt.Errorf("stage %s: rewind: committed offsets: %w", l.cfg.Spec.Name, err)
	}
	for i, tp := range committed {
		md := ""
		if tp.Metadata != nil {
			md = *tp.Metadata
		}
		t, err := step.RestoreTask(tp.Partition, l.cfg.Spec.Upstreams, md)
		if err != nil {
			return err
		}
		l.tasks[tp.Partition] = t
		if tp.Offset < 0 {
			committed[i].Offset = kafka.OffsetBeginning
		}
	}
	if _, err := l.consumer.SeekPartitions(committed); err != nil {
		return fmt.Errorf("stage %s: rewind: seek: %w", l.cfg.Spec.Name, err)
	}
	return nil
}

// align pauses the partitions the head asks to pause (Head.Pause) and
// resumes those it no longer lists.
func (l *Loop) align() error {
	want := map[int32]bool{}
	for _, p := range l.head.Pause() {
		if l.tasks[p] != nil {
			want[p] = true
		}
	}
	topic := l.cfg.Spec.InputTopic
	var pause, resume []kafka.TopicPartition
	for p := range want {
		if !l.aligned[p] {
			pause = append(pause, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	for p := range l.aligned {
		if !want[p] && l.tasks[p] != nil {
			resume = append(resume, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	if len(pause) > 0 {
		if err := l.consumer.Pause(pause); err != nil {
			return fmt.Errorf("stage %s: pause partitions ahead of their alignment group: %w", l.cfg.Spec.Name, err)
		}
		l.log.Info("stage: paused partitions ahead of their watermark alignment group", "partitions", partitionsOf(pause))
	}
	if len(resume) > 0 {
		if err := l.consumer.Resume(resume); err != nil {
			return fmt.Errorf("stage %s: resume aligned partitions: %w", l.cfg.Spec.Name, err)
		}
		l.log.Info("stage: resumed partitions back within their watermark alignment group", "partitions", partitionsOf(resume))
	}
	for p := range l.tasks {
		paused := want[p]
		l.status.update(p, func(s *TaskStatus) { s.Paused = paused })
	}
	l.aligned = want
	return nil
}

// PartitionCheck is how often a stage whose input topic may grow
// (Spec.GrowingInput) asks the broker for the topic's partition count: a
// metadata request for that one topic, sent by a goroutine of the loop's
// (watchPartitions) so that the loop never waits for it. A new partition
// is thus known to the loop within PartitionCheck plus a round trip plus
// one poll (Config.CommitInterval), and its total is in every assigned
// task's next report (issue 21 §4: within 1 s of the partition's creation;
// seed 000: the count travels in-band, so the hold downstream re-opens
// before the group has even assigned the new partition). The consumer's
// own metadata refresh (topic.metadata.refresh.interval.ms, which the
// runner sets to 10 s for source stages; librdkafka's default is 5 min)
// decides when the group rebalances the new partitions in.
const PartitionCheck = 500 * time.Millisecond

// partitionCheckTimeout bounds one metadata request of watchPartitions
// and of an assignment beyond the count (checkPartitions).
const partitionCheckTimeout = 5 * time.Second

// watchPartitions asks for the input topic's partition count every
// PartitionCheck until ctx is done, and keeps the largest count read in
// seenPartitions. A failed request is logged once per failure streak and
// asked again at the next tick. It uses c (the loop's consumer: a
// metadata response also refreshes that consumer's view of the topic);
// the caller stops it before c is closed.
func (l *Loop) watchPartitions(ctx context.Context, c *kafka.Consumer) {
	topic := l.cfg.Spec.InputTopic
	tick := time.NewTicker(PartitionCheck)
	defer tick.Stop()
	failing := false
	for {
		n, err := partitionCount(c, topic)
		switch {
		case err != nil && !failing:
			failing = true
			l.log.Warn("stage: asking the input topic's partition count failed; asking again every PartitionCheck", "topic", topic, "every", PartitionCheck, "err", err)
		case err == nil:
			failing = false
			for {
				old := l.seenPartitions.Load()
				if n <= old || l.seenPartitions.CompareAndSwap(old, n) {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// partitionCount asks the broker how many partitions topic has.
func partitionCount(c *kafka.Consumer, topic string) (int32, error) {
	md, err := c.GetMetadata(&topic, false, int(partitionCheckTimeout.Milliseconds()))
	if err != nil {
		return 0, err
	}
	tm, ok := md.Topics[topic]
	if !ok {
		return 0, fmt.Errorf("stage: no metadata for topic %s", topic)
	}
	if tm.Error.Code() != kafka.ErrNoError {
		return 0, tm.Error
	}
	return int32(len(tm.Partitions)), nil
}

// checkPartitions asks for the input topic's partition count now, on the
// loop's goroutine (an assignment of a partition beyond the count, from the
// rebalance callback), and grows the count to it, or to at least atLeast
// (the assigned partition exists) when the request fails.
func (l *Loop) checkPartitions(c *kafka.Consumer, atLeast int32) {
	n, err := partitionCount(c, l.cfg.Spec.InputTopic)
	if err != nil {
		l.log.Warn("stage: asking the input topic's partition count failed; counting up to the assigned partition", "topic", l.cfg.Spec.InputTopic, "err", err)
	}
	l.grow(max(n, atLeast))
}

// grow makes n the input topic's partition count if it is larger than the
// count the reports carry; then every assigned task reports the new total
// at the next attempt (woken if it has no record: wakeTasks), which
// re-opens the downstream hold until the new partitions have reported
// (seed 000).
func (l *Loop) grow(n int32) {
	if !l.core.SetPartitions(n) {
		return
	}
	l.log.Info("stage: the input topic has more partitions: every task reports the new total (the downstream hold re-opens until the new partitions report)", "topic", l.cfg.Spec.InputTopic, "partitions", n)
	l.reportAll = true
}

// wakeTasks are the assigned tasks the head wants an attempt for
// (Head.Wake: due processing-time timers) that have no record in batch,
// and every assigned task once after the partition count grew.
func (l *Loop) wakeTasks(batch []*kafka.Message) []int32 {
	var out []int32
	wants := l.head.Wake()
	if l.reportAll {
		l.reportAll = false
		wants = wants[:0:0]
		for p, t := range l.tasks {
			t.ReportAgain() // report the new total even if nothing moved
			wants = append(wants, p)
		}
	}
	for _, p := range wants {
		if l.tasks[p] == nil {
			continue
		}
		in := false
		for _, m := range batch {
			if m.TopicPartition.Partition == p {
				in = true
				break
			}
		}
		if !in {
			out = append(out, p)
		}
	}
	return out
}

// positions returns the current offset of each of tasks ps (the
// consumer's position; the committed offset before the first fetch; for a
// partition with neither, the log start, where auto.offset.reset=earliest
// starts it; with "latest" such a task waits for its first fetch): a woken
// task commits it again with its new checkpoint.
func (l *Loop) positions(ps []int32) (map[int32]int64, error) {
	out := map[int32]int64{}
	topic := l.cfg.Spec.InputTopic
	for _, p := range ps {
		tps := []kafka.TopicPartition{{Topic: &topic, Partition: p}}
		pos, err := l.consumer.Position(tps)
		if err == nil && (len(pos) != 1 || pos[0].Offset < 0) {
			pos, err = l.committed(l.consumer, tps)
		}
		if err != nil {
			return nil, fmt.Errorf("stage %s: task %d: position for due timers: %w", l.cfg.Spec.Name, p, err)
		}
		if len(pos) == 1 && pos[0].Offset >= 0 {
			out[p] = int64(pos[0].Offset)
			continue
		}
		if l.cfg.Consumer["auto.offset.reset"] == "latest" || !l.cfg.StartAt.IsZero() {
			continue // where the consumer starts is not known before its first fetch: wait for it
		}
		low, _, err := l.consumer.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil {
			return nil, fmt.Errorf("stage %s: task %d: log start offset for due work: %w", l.cfg.Spec.Name, p, err)
		}
		out[p] = low
	}
	return out, nil
}

package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
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
	// NextWindowEnd, if set, returns the least end of a window of the
	// stage's keyed outputs after wm (Beam: the window's MaxTimestamp + 1,
	// the watermark at which a GroupByKey downstream fires it under the
	// default trigger; mtime.Time, ms), ok false if none ends after wm
	// (runner: fixed and sliding windows, gbk.NextWindowEnd). With a head
	// that implements step.WatermarkAhead (a Kafka source) the poll ends
	// early on the record that carries the lowest watermark of the
	// stage's tasks past it, when that record is the last its partition
	// holds (crossing.go): the window's downstream firing then waits for
	// one commit, not for the commit interval's end.
	NextWindowEnd func(wm mtime.Time) (mtime.Time, bool)
	// SpillDir is where an attempt's spill file lives (Loop.spill: the
	// records of an attempt beyond StepConfig.SpillBytes wait there for
	// the transaction; removed when Run returns). Default os.TempDir().
	SpillDir string
	// MaxBatchRecords bounds the records in one transaction. Default 50 000
	// (runner.Options.MaxBundleSize's).
	MaxBatchRecords int
	// PollDuringCommit turns on the poll during a commit (prefetch.go):
	// while an attempt is decided and committed on a goroutine of its
	// own, the loop's goroutine polls the next attempt's records. Default
	// false: the loop polls only between its attempts. On 2 cores shared
	// with the broker it gained nothing (issue 24: the windowed sum at 3 M
	// and 10 M records took 1.08 and 1.06 times as long with it, the
	// bundles slower by what the polls saved).
	PollDuringCommit bool
	// MaxAttempts is how many times a failing attempt is tried (abort,
	// rewind, read again) before Run returns its error, or, when a
	// bundle failed the user's way (a DoFn's error or panic), before the
	// attempt's input records are taken in smaller attempts (halved, one
	// at a time from oneAtATime down), and then before the one failing
	// alone is handled by ErrorPolicy. Default 4.
	MaxAttempts int
	// ErrorPolicy is what the stage does with an input record whose
	// bundle fails alone in its attempt MaxAttempts times (poison.go).
	// Empty: ErrorPolicyFail.
	ErrorPolicy ErrorPolicy
	// DeadLetterTopic receives the records ErrorPolicyDeadLetter sets
	// aside, in the transaction committing their offsets. It must exist
	// (the stage's producer creates no topic). Required with
	// ErrorPolicyDeadLetter, unused otherwise.
	DeadLetterTopic string
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
	// MaxMessageBytes is the max.message.bytes of topics the stage writes,
	// by topic name, as the broker said it (the runner's: its internal
	// topics and the users' sink and dead-letter topics). A record larger
	// than its topic's limit as a batch of its own
	// (kafkaclient.BatchOfOneBytes) is never produced: the attempt fails
	// and the stage with ErrRecordTooLarge, naming the input record it
	// was made from. A topic not in the map is left to librdkafka's
	// message.max.bytes and the broker; so is every topic when
	// Properties set a compression.type (a compressed batch may fit where
	// the record does not).
	MaxMessageBytes map[string]int
	// PurgeInterval, if positive, is how often the loop deletes the
	// records of its input topic that its committed transactions consumed
	// (purgeCommitted: DeleteRecords up to the committed offsets), like
	// Kafka Streams' repartition.purge.interval.ms (default 30 s there;
	// runner.Options.PurgeInterval). Only for an internal topic that this
	// stage's consumer group alone reads: the runner's decision
	// (plan.Stage.PurgedInput). 0: never purged (a user's topic, or a
	// topic read from outside).
	PurgeInterval time.Duration
	// CommitRecords, if set, returns records to add to every transaction
	// the loop commits, after the step's records (the runner's: the
	// transaction's counts for the application's metrics topic). It is
	// called on the loop's goroutine once the step has decided the attempt
	// (the head's state is the attempt's) and before the transaction
	// begins; the records are aborted with the attempt.
	CommitRecords func(TxnSummary) []step.Record
	// WrittenTopics are the topics the stage writes that neither Spec nor
	// the fields above name: its state changelog (the head's
	// Ready.State) and the topic of CommitRecords' records. The loop
	// watches them as it watches its input, outputs, sinks, ReportTopic
	// and DeadLetterTopic: one deleted stops the stage with ErrTopicGone.
	WrittenTopics []string
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
	// DeadLetters is 1 if the transaction writes a dead letter
	// (ErrorPolicyDeadLetter), else 0.
	DeadLetters uint64
	// Tasks are the tasks (input partitions) the transaction holds work
	// or offsets of, ascending.
	Tasks []int32
}

// Sentinel errors.
var (
	// ErrFenced: another producer with this transactional.id, or a newer
	// group generation, fenced this instance (or a transaction call did
	// not return within its timeout: callWithin). The attempt is not
	// retried with these clients: its tasks stop and Run restarts the
	// stage's clients (restartable), which revokes every task and
	// restores each from what Kafka committed, as a restart of the
	// instance would; Run returns it after maxRestarts restarts within
	// restartWindow.
	ErrFenced = errors.New("stage: producer fenced")
	// ErrBundleFailed: an attempt failed MaxAttempts times; wraps the
	// cause. When the user's code failed (a DoFn's error or panic), the
	// error names the input record that fails alone in its attempt (input
	// topic, partition, offset) under ErrorPolicyFail, or the watermark
	// reports or timers that failed without an input record (poison.go).
	// Not retryable when the user's code failed: the same input fails the
	// same way, so Run does not restart the clients.
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
	// Untrusted counts the input records of an internal topic the loop
	// skipped, committed past (step.Untrusted).
	Untrusted uint64
	// DeadLetters counts the input records written to
	// Config.DeadLetterTopic in committed transactions
	// (ErrorPolicyDeadLetter); each is counted in RecordsIn too (its
	// offset committed), never in ElementsIn.
	DeadLetters uint64
	// TimestampsAhead counts the records written to Kafka sinks in
	// committed transactions with the time of writing as their timestamp
	// because their event time was further ahead than the topic takes
	// (step.Ready.TimestampsAhead).
	TimestampsAhead uint64
	// FirstCommit and LastCommit are the wall-clock times of the first and
	// the last committed transaction (zero if none): RecordsIn / (LastCommit
	// - FirstCommit) is the stage's throughput in input records. (ElementsIn
	// counts what entered the bundles: panes, for a GroupByKey stage.)
	FirstCommit, LastCommit time.Time
	// SidePauses counts the times a task was paused because side inputs
	// held back its next element (sidegate.go), SideRechecks the times a
	// paused task was resumed by sideRecheck (5 s) passing rather than a
	// side input's change: a side input that did not move for 5 s, or a
	// lost wake-up. Not work, and not undone by an abort.
	SidePauses, SideRechecks uint64
	// PolledDuringCommit counts the input records polled while an
	// attempt committed (prefetch.go; Config.PollDuringCommit), whether
	// processed since or dropped as stale. Not work, and not undone by an
	// abort.
	PolledDuringCommit uint64
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
	cfg Config
	// cross is the poll's early commit at a window's end (crossing.go).
	cross    crossing
	log      *slog.Logger
	consumer *kafka.Consumer
	// drainRequested is set by Drain; drained and stopReading are the
	// loop goroutine's record of having applied it.
	drainRequested       atomic.Bool
	drained, stopReading bool
	// next[p] is the offset of task p's next record to process as the
	// loop knows it: the committed offset at the task's assignment or
	// rewind, then the one each commit gave it; with nothing committed,
	// the task's first record polled (absent: nothing committed, no record
	// polled). A woken task commits it again (positions),
	// never the consumer's position, which counts records the consumer
	// delivered and the loop dropped unprocessed: polled after a drain
	// stopped reading, or before their task was revoked and assigned again
	// during the poll.
	next     map[int32]int64
	producer *kafka.Producer
	group    string
	txnID    string
	core     *step.Step
	head     step.Head
	// topicNames holds one *string per topic name for the produced
	// messages (kafka.TopicPartition wants a pointer: one allocation per
	// topic, not per record).
	topicNames map[string]*string

	// tasks are owned by the goroutine running Run (rebalance callbacks run
	// inside Poll, on that goroutine; during a commit, by the commit's
	// goroutine, and the map is only read: prefetch.go).
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
	// topicGone is the ErrTopicGone error watchTopics found (nil: none);
	// written by that goroutine, read by the loop's (checkTopics).
	// gone is closed when it is stored: a transaction call waiting for
	// records of the gone topic returns at once (callWithin).
	topicGone atomic.Pointer[error]
	gone      chan struct{}
	// watch is watchTopics' state, kept across the lives of the clients
	// (reopen): a topic seen by an earlier life and missing now is gone.
	// Only the one watchTopics goroutine of a life touches it (run waits
	// for it before the next life starts).
	watch topicWatch
	// aligned are the partitions paused because the head asked (Pause).
	aligned map[int32]bool
	// admin is the loop's admin client (ownAdmin: nil until first
	// needed; closeAdmin closes it).
	admin *kafka.AdminClient
	// logEnd is askLogEnds' state (logends.go): whether a request is in
	// flight (busy; its answer comes on answers), when it last asked and
	// last logged a failure.
	logEnd struct {
		answers       chan logEndAnswer
		busy          bool
		asked, failed time.Time
	}
	// status is what Tasks returns: written here, read by any goroutine.
	status taskStatuses
	// abortsUncommitted counts the attempts aborted since the last commit
	// (TxnSummary.AbortsBefore).
	abortsUncommitted uint64
	// isolate holds, while the loop looks for the input record that made
	// a record too large for its topic (tooLargeFound) or that fails its
	// bundle (bundleFailed), the last offset of the failed batch of each
	// of its partitions: until every such partition is past it, poll
	// takes one record per attempt. Nil otherwise.
	isolate map[int32]int64
	// isolateMost is how many records poll takes per attempt while
	// isolate is set (0 means 1): 1 for a record too large, half the
	// failed attempt's records for a bundle that fails (bundleFailed
	// halves it at each failure, a bisection).
	isolateMost int
	// compresses says Config.Properties set a compression.type: the
	// size check (checkSize) is left to the broker.
	compresses bool
	// fitsAll is the smallest max.message.bytes of Config.MaxMessageBytes
	// (0: none): checkSize looks up the topic of a record only when its
	// key and value could exceed it.
	fitsAll int
	// purge is purgeCommitted's state (purge.go).
	purge purgeState
	// spilled holds the records the attempt's Decide spilled
	// (StepConfig.Spill) until its transaction produces them; nil until
	// the first spill.
	spilled *spillFile
	// ahead holds the events polled while the last attempt committed
	// (prefetch.go).
	ahead aheadState
	// trace is EnvTraceCommits' state (trace.go).
	trace commitTrace
	// txnTimeout is the transaction timeout of the loop's producer;
	// userTxnTimeout says Config.Properties set it (txntimeout.go).
	txnTimeout     time.Duration
	userTxnTimeout bool

	stats struct {
		recordsIn, elementsIn, elementsOut, reportsOut, commits, aborts, bundles, untrusted, deadLetters atomic.Uint64
		sidePauses, sideRechecks, timestampsAhead, polledDuringCommit                                    atomic.Uint64
		// firstCommit and lastCommit are Unix nanoseconds (0: none yet).
		firstCommit, lastCommit atomic.Int64
		// assigned and firstRecord are Unix nanoseconds (0: none yet).
		assigned, firstRecord atomic.Int64
	}
	closeOnce sync.Once
	// untrustedLogged is when the last line about skipped records was
	// logged, untrustedQuiet how many were skipped since without one
	// (countUntrusted; the loop's goroutine only).
	untrustedLogged time.Time
	untrustedQuiet  int
	// abandoned says a transaction call of the producer did not return
	// (callWithin): the producer is left as it is, never closed.
	abandoned bool
	// stable reads the group's stable committed offsets for a stage whose
	// consumer reads read_uncommitted (stableReader); nil until needed.
	stable *kafka.Consumer
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
		cfg.MaxBatchRecords = 50000
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	switch cfg.ErrorPolicy {
	case "", ErrorPolicyFail:
	case ErrorPolicyDeadLetter:
		if cfg.DeadLetterTopic == "" {
			return nil, fmt.Errorf("stage %s: Config.ErrorPolicy %s needs a DeadLetterTopic", cfg.Spec.Name, cfg.ErrorPolicy)
		}
	default:
		return nil, fmt.Errorf("stage %s: Config.ErrorPolicy %q: want %q or %q", cfg.Spec.Name, cfg.ErrorPolicy, ErrorPolicyFail, ErrorPolicyDeadLetter)
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
		gone:  make(chan struct{}),
		trace: newCommitTrace(),
	}
	l.fitsAll = fitsAll(cfg.MaxMessageBytes)
	l.initTxnTimeout()
	startStallWatch()
	l.purge.asked = time.Now() // the first purge one interval after the start
	for _, k := range []string{"compression.type", "compression.codec"} {
		if v := cfg.Properties[k]; v != "" && v != "none" {
			l.compresses = true
		}
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

// Tasks returns the status of the tasks this instance is assigned, sorted
// by partition. Safe from any goroutine.
func (l *Loop) Tasks() []TaskStatus { return l.status.snapshot() }

// InstanceID is the instance id the loop was configured with.
func (l *Loop) InstanceID() string { return l.cfg.InstanceID }

// Stats returns the committed counters.
func (l *Loop) Stats() Stats {
	return Stats{
		RecordsIn:          l.stats.recordsIn.Load(),
		ElementsIn:         l.stats.elementsIn.Load(),
		ElementsOut:        l.stats.elementsOut.Load(),
		ReportsOut:         l.stats.reportsOut.Load(),
		Untrusted:          l.stats.untrusted.Load(),
		Commits:            l.stats.commits.Load(),
		Bundles:            l.stats.bundles.Load(),
		Aborts:             l.stats.aborts.Load(),
		DeadLetters:        l.stats.deadLetters.Load(),
		TimestampsAhead:    l.stats.timestampsAhead.Load(),
		SidePauses:         l.stats.sidePauses.Load(),
		SideRechecks:       l.stats.sideRechecks.Load(),
		PolledDuringCommit: l.stats.polledDuringCommit.Load(),
		FirstCommit:        unixNanos(l.stats.firstCommit.Load()),
		LastCommit:         unixNanos(l.stats.lastCommit.Load()),
		Assigned:           unixNanos(l.stats.assigned.Load()),
		FirstRecord:        unixNanos(l.stats.firstRecord.Load()),
	}
}

func unixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Run consumes until ctx is done (nil), a bundle fails MaxAttempts times
// (ErrBundleFailed), the local state cannot take a committed attempt
// (ErrLocalState), or a Kafka error recurs. A bundle that fails the
// user's way (a DoFn's error or panic) MaxAttempts times has the attempt's
// records taken in smaller attempts (halved); the one failing alone MaxAttempts times
// fails the stage naming it, or is written to the dead-letter topic
// (Config.ErrorPolicy, poison.go). A Kafka error (the producer
// fenced or fatal, the consumer fatal, a coordinator gone while the rewind
// asked for committed offsets, a transaction that timed out: what a
// broker's failover gives) restarts the loop's clients, as a restart of the
// instance would: every task is revoked, the consumer leaves the group, new
// clients join it (InitTransactions aborts the open transaction) and get
// tasks assigned, each restored from its committed offset and checkpoint.
// Exactly once holds as for any restart. After maxRestarts restarts within
// restartWindow the error is returned. A record too large for its topic
// (ErrRecordTooLarge) is returned at once, once the input record it was
// made from is found. Run closes the clients before returning.
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
		if o := (*txnOutlived)(nil); errors.As(err, &o) {
			if oerr := l.afterOutlived(o); oerr != nil {
				return oerr
			}
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

// run is one life of the loop's clients (see Run).
func (l *Loop) run(ctx context.Context) error {
	if err := l.consumer.SubscribeTopics([]string{l.cfg.Spec.InputTopic}, l.rebalance); err != nil {
		return fmt.Errorf("stage %s: subscribe %s: %w", l.cfg.Spec.Name, l.cfg.Spec.InputTopic, err)
	}
	admin, err := l.ownAdmin()
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	// The topic watch outlives ctx until run returns: a transaction call
	// under way when the job stops (another stage failed, a SIGTERM) may
	// wait for records of a topic deleted meanwhile, and only the watch
	// ends that wait (callWithin) before librdkafka fails the records at
	// message.timeout.ms (capped by transaction.timeout.ms, 10 s). Before,
	// it stopped with ctx: a stage failing on a deleted internal topic
	// ended the job 10.2 s after the delete, its upstream stage committing.
	tctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	// Before the admin client is closed (Close): the watchers use it.
	defer wg.Wait()
	defer stop()
	defer stopWatch()
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.watchTopics(tctx, admin)
	}()
	if l.cfg.Spec.GrowingInput {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.watchPartitions(wctx, admin)
		}()
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
		// Each iteration, not only after a commit: the offsets of the last
		// commits of a stream that stopped are purged too.
		l.purgeCommitted(ctx)
		batch, err := l.poll(ctx)
		if err != nil {
			return err
		}
		if l.stopReading && len(batch) > 0 {
			// Drained: records fetched before the pause stay unprocessed
			// and uncommitted (a rerun of the application reads them).
			l.leaveUnread(batch)
			batch = nil
		}
		wake := l.wakeTasks(batch)
		if len(batch) == 0 && len(wake) == 0 {
			if err := l.checkTopics(); err != nil {
				return err
			}
			continue
		}
		// Before the attempt: nothing is committed past a topic gone.
		if err := l.checkTopics(); err != nil {
			return err
		}
		var blocked map[int32]int64
		blocked, err = l.commitPolling(ctx, batch, wake)
		if err == nil {
			err = l.holdBlocked(blocked)
		}
		var tl *tooLarge
		switch {
		case err == nil:
			attempts = 0
			l.isolated()
		case errors.Is(err, ErrFenced), errors.Is(err, ErrLocalState), errors.Is(err, ErrTopicGone), errors.As(err, new(*txnOutlived)):
			// An outlived transaction is not retried as it is: the same
			// attempt would outlive the same timeout (txntimeout.go).
			return err
		case errors.As(err, &tl):
			// Aborted already. Not retried as it is: the same records
			// make the same record again.
			done, ferr := l.tooLargeFound(tl, batch, wake)
			if done || ferr != nil {
				return ferr
			}
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
			// A record the stage cannot decode fails every attempt the
			// same way: not retried, found at once (bundleFailed).
			if attempts >= l.cfg.MaxAttempts || errors.Is(err, step.ErrUndecodable) {
				// The user's code: the record taken alone, then set
				// aside or named (poison.go); otherwise the error.
				if ferr := l.bundleFailed(ctx, err, attempts, batch, wake); ferr != nil {
					return ferr
				}
				attempts = 0
				continue
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

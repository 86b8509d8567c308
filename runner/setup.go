package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/runner/plantopic"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// createTopics creates every topic of the plan, the report topic, the plan
// topic and the state changelog topics (cp.changelogs), the metrics topic
// and the control topic, each with max.message.bytes
// kafkaclient.InternalTopicMaxMessageBytes and the settings of its kind:
// the plan's topics (the data topics: stages' input topics and side input
// topics) kafkaclient.DataTopicConfig: no deletion by time or size (they
// are purged instead: stage.Config.PurgeInterval), 64 MiB segments; the
// metrics and control topics kafkaclient.KeptTopicConfig: every record
// kept (issue 23: with the broker's 7 days the application-wide totals
// undercounted and a drain request could be deleted); the report and plan
// topics and the changelogs kafkaclient.CompactedTopicConfig. A topic
// that exists already must have the planned partition count; otherwise
// the error names the topic and both counts; its max.message.bytes, if
// lower, is raised, and a setting of its kind with another value set
// (IncrementalAlterConfigs, internalLimits; a refusal, an ACL's, is
// logged and the topic keeps its setting).
// planCreated says this call created the plan topic (its CreateTopics
// answered no error for it, not TOPIC_ALREADY_EXISTS): it was empty then.
// limits are the topics' max.message.bytes as the broker says them, by
// topic (maxMessageBytes), for the loops' size check.
func createTopics(ctx context.Context, bootstrap string, props map[string]string, p *plan.Plan, cp *checkedPlan) (planCreated bool, limits map[string]int, err error) {
	admin, err := newStartAdmin(bootstrap, props)
	if err != nil {
		return false, nil, err
	}
	defer admin.close()
	want := p.Topics()
	// settings are each topic's settings beyond max.message.bytes.
	settings := map[string]map[string]string{}
	for t := range want {
		settings[t] = kafkaclient.DataTopicConfig()
	}
	for _, t := range []string{kafkaclient.ReportTopic(p.ApplicationID), kafkaclient.PlanTopic(p.ApplicationID)} {
		want[t], settings[t] = 1, kafkaclient.CompactedTopicConfig()
	}
	for _, t := range []string{kafkaclient.MetricsTopic(p.ApplicationID), kafkaclient.ControlTopic(p.ApplicationID)} {
		want[t], settings[t] = 1, kafkaclient.KeptTopicConfig()
	}
	for t, n := range cp.changelogs {
		want[t], settings[t] = n, kafkaclient.CompactedTopicConfig()
	}

	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	// The topics recordPlan writes (the plan topic, the input topics of
	// the stages with records, cp.records) are asked for in a request of
	// their own, before the others: a broker answers CreateTopics before
	// its partitions can be read or written (NOT_LEADER_OR_FOLLOWER until
	// it has created their logs, in the order it was asked), and with the
	// plan's 20-odd topics in one request the plan topic's first
	// ListOffsets waited 0.3-2 s for partitions the plan does not use.
	early := map[string]bool{kafkaclient.PlanTopic(p.ApplicationID): true}
	for t := range cp.records {
		early[t] = true
	}
	var first, rest []kafka.TopicSpecification
	for _, n := range names {
		// Every record a user's topic holds crosses every stage in an
		// Envelope a few bytes larger (kafkaclient.InternalTopicMaxMessageBytes).
		s := kafka.TopicSpecification{Topic: n, NumPartitions: int(want[n]), ReplicationFactor: -1,
			Config: map[string]string{"max.message.bytes": strconv.Itoa(kafkaclient.InternalTopicMaxMessageBytes)}}
		for k, v := range settings[n] {
			s.Config[k] = v
		}
		if early[n] {
			first = append(first, s)
		} else {
			rest = append(rest, s)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var res []kafka.TopicResult
	for _, specs := range [][]kafka.TopicSpecification{first, rest} {
		if len(specs) == 0 {
			continue
		}
		r, err := admin.createTopics(cctx, specs)
		if err != nil {
			return false, nil, fmt.Errorf("kafkastreams: create topics at %s: %w", bootstrap, err)
		}
		// Nothing is written to a partition before its log exists
		// (waitServed: records lost otherwise).
		if err := admin.waitServed(cctx, specs, r); err != nil {
			return false, nil, err
		}
		res = append(res, r...)
	}
	var existing []string
	for _, r := range res {
		switch r.Error.Code() {
		case kafka.ErrNoError:
			planCreated = planCreated || r.Topic == kafkaclient.PlanTopic(p.ApplicationID)
		case kafka.ErrTopicAlreadyExists:
			existing = append(existing, r.Topic)
		default:
			return false, nil, fmt.Errorf("kafkastreams: create topic %s: %w", r.Topic, r.Error)
		}
	}
	if len(existing) == 0 {
		return planCreated, internalLimits(cctx, admin, names, nil, settings), nil
	}
	// A topic another instance created a moment ago (CreateTopics said it
	// exists) may not be in the metadata the describe is answered from yet
	// (UNKNOWN_TOPIC_OR_PARTITION): ask again until cctx ends. Seen when
	// copies start together (1 start in 75 under load).
	for {
		md, err := admin.describeTopics(cctx, "describing the internal topics made before", existing)
		if err != nil {
			return false, nil, fmt.Errorf("kafkastreams: describe topics: %w", err)
		}
		unknown := ""
		for _, d := range md.TopicDescriptions {
			if d.Error.Code() == kafka.ErrUnknownTopicOrPart {
				unknown = d.Name
				continue
			}
			if d.Error.Code() != kafka.ErrNoError {
				return false, nil, fmt.Errorf("kafkastreams: describe topic %s: %w", d.Name, d.Error)
			}
			if int32(len(d.Partitions)) != want[d.Name] {
				return false, nil, fmt.Errorf("kafkastreams: topic %s exists with %d partitions, the plan needs %d: delete it or use another --application_id", d.Name, len(d.Partitions), want[d.Name])
			}
		}
		if unknown == "" {
			return planCreated, internalLimits(cctx, admin, names, existing, settings), nil
		}
		select {
		case <-cctx.Done():
			return false, nil, fmt.Errorf("kafkastreams: topic %s exists (CreateTopics says) but is still unknown to the broker's metadata: %w", unknown, cctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// internalLimits returns the max.message.bytes of the internal topics
// names (maxMessageBytes) after fixing, on those of existing (topics that
// were there before createTopics, made by an earlier version of the
// runner with the broker's defaults, or altered since), what differs from
// what createTopics gives a new topic (internalFixes): a max.message.bytes
// below kafkaclient.InternalTopicMaxMessageBytes is raised, and a data
// topic's (data) retention.ms, retention.bytes and segment.bytes set to
// kafkaclient.DataTopicConfig's (a finite retention made -1; Kafka
// Streams' validation of an existing repartition topic names the same two
// retention settings, KIP-698, but only reports them). A fix
// the broker refuses (no ALTER_CONFIGS permission) is logged: the topic
// keeps its limit, which the loops check records against, or its
// retention, under which the broker may delete records a stage has not
// read (the stage then fails with stage.ErrOffsetOutOfRange, never skips
// them). A describe the broker refuses is logged too, and the limits are
// then unknown (empty: the broker alone checks).
func internalLimits(ctx context.Context, admin *startAdmin, names, existing []string, settings map[string]map[string]string) map[string]int {
	log := slog.Default().With("runner", Name)
	cfgs, err := topicConfigs(ctx, admin, names)
	if err != nil {
		log.Warn("kafkastreams: could not read the max.message.bytes of the internal topics: a record too large for one is refused by the broker, not before", "err", err)
		return map[string]int{}
	}
	limits := limitsOf(cfgs)
	fixes := internalFixes(cfgs, existing, settings)
	if len(fixes) == 0 {
		return limits
	}
	var alter []kafka.ConfigResource
	for _, t := range slices.Sorted(maps.Keys(fixes)) {
		r := kafka.ConfigResource{Type: kafka.ResourceTopic, Name: t}
		for _, k := range slices.Sorted(maps.Keys(fixes[t])) {
			r.Config = append(r.Config, kafka.ConfigEntry{Name: k, Value: fixes[t][k], IncrementalOperation: kafka.AlterConfigOpTypeSet})
		}
		alter = append(alter, r)
	}
	var res []kafka.ConfigResourceResult
	err = admin.do(ctx, "altering the internal topics' settings", func(actx context.Context, a *kafka.AdminClient) error {
		var err error
		res, err = a.IncrementalAlterConfigs(actx, alter)
		return err
	})
	if err != nil {
		log.Warn("kafkastreams: could not alter the settings of internal topics made before: a record larger than their max.message.bytes fails its stage, and records their retention deletes before a stage reads them fail it (stage.ErrOffsetOutOfRange)", "topics", len(alter), "err", err)
		return limits
	}
	for _, r := range res {
		was := map[string]string{}
		for k := range fixes[r.Name] {
			was[k] = cfgs[r.Name][k]
		}
		if r.Error.Code() != kafka.ErrNoError {
			log.Warn("kafkastreams: could not alter the settings of an internal topic made before: a record larger than its max.message.bytes fails its stage, and records its retention deletes before a stage reads them fail it (stage.ErrOffsetOutOfRange)", "topic", r.Name, "settings", was, "wanted", fixes[r.Name], "err", r.Error)
			continue
		}
		log.Info("kafkastreams: altered the settings of an internal topic made before", "topic", r.Name, "from", was, "to", fixes[r.Name])
		if _, ok := fixes[r.Name]["max.message.bytes"]; ok {
			limits[r.Name] = kafkaclient.InternalTopicMaxMessageBytes
		}
	}
	return limits
}

// internalFixes returns, by topic, the settings of the topics of existing
// that differ from a new internal topic's, with the value to set: a
// max.message.bytes below kafkaclient.InternalTopicMaxMessageBytes (a
// topic whose configs cfgs lacks, or whose value is not a number, is
// left as it is), and any of the topic's settings (settings[topic]:
// kafkaclient.DataTopicConfig for a data topic, KeptTopicConfig for the
// metrics and control topics, CompactedTopicConfig for the report and
// plan topics and the changelogs) with another value.
func internalFixes(cfgs map[string]map[string]string, existing []string, settings map[string]map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{}
	set := func(t, k, v string) {
		if out[t] == nil {
			out[t] = map[string]string{}
		}
		out[t][k] = v
	}
	for _, t := range existing {
		c, ok := cfgs[t]
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(c["max.message.bytes"]); err == nil && n < kafkaclient.InternalTopicMaxMessageBytes {
			set(t, "max.message.bytes", strconv.Itoa(kafkaclient.InternalTopicMaxMessageBytes))
		}
		for k, v := range settings[t] {
			if got, ok := c[k]; ok && got != v {
				set(t, k, v)
			}
		}
	}
	return out
}

// recordPlan makes the plan the application's plan, or checks it against the
// one recorded. In one transaction under the transactional.id
// "<application_id>-plan" it writes the encoded plan to the plan topic
// and sources[topic], in order, to partition 0 of each such source topic
// (checkedPlan.records: an Impulse stage's one record, which it turns into
// its element exactly once; a TestStream stage's segment records,
// teststream.Records). Instances racing here
// fence each other: InitTransactions aborts a rival's open transaction, and
// each reads the plan topic (read_committed) after its own InitTransactions,
// so exactly one plan is ever committed. Returns ErrPlanMismatch (wrapped,
// naming every difference) if another plan was recorded.
//
// first, if not nil, is the producer of the first attempt, started ahead
// (startPlanProducer); mark, if not nil, is called as each step of an
// attempt ends ("plan producer ready", "plan read", "plan committed").
// An attempt that fails and is made again (planRetriable, at most 5 in
// all) is logged to log at Info: a rival's fencing (fenced=true) is
// expected when instances start together.
func recordPlan(ctx context.Context, log *slog.Logger, bootstrap string, props map[string]string, p *plan.Plan, sources map[string][][]byte, first *planProducer, mark func(string)) (recorded bool, err error) {
	if mark == nil {
		mark = func(string) {}
	}
	enc, err := p.Encode()
	if err != nil {
		return false, err
	}
	for attempt := 1; ; attempt++ {
		pp := first
		if attempt > 1 || pp == nil {
			pp = startPlanProducer(ctx, bootstrap, props, p)
		}
		recorded, err = tryRecordPlan(ctx, bootstrap, props, p, enc, sources, pp, mark)
		if err == nil {
			closeLater(pp.close)
		} else {
			pp.close() // before the next attempt's InitTransactions
		}
		if err == nil || errors.Is(err, plan.ErrPlanMismatch) || attempt >= 5 || !planRetriable(ctx, err) {
			return recorded, err
		}
		log.Info("kafkastreams: recording the plan: attempt failed, trying again with a new producer", "attempt", attempt, "err", err, "fenced", kafkaclient.IsFenced(err), "transactional_id", kafkaclient.PlanTopic(p.ApplicationID))
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		// Jittered: instances that fenced each other in step would
		// otherwise fence each other again at the same moments.
		case <-time.After(time.Duration(attempt)*300*time.Millisecond + rand.N(300*time.Millisecond)):
		}
	}
}

// planRetriable reports whether recordPlan's attempt that failed with err
// is one to make again, with a new producer and reader: a Kafka error that
// is retriable, asks for an abort, fenced the producer or is fatal to it;
// or one of the attempt's own deadlines (its InitTransactions, plan read
// or commit, 30 s each) while ctx is still live: a client whose metadata
// named a node that went away can wait out a deadline that a new client
// meets (issue 23's soak; startAdmin.do is the admin requests' remedy).
func planRetriable(ctx context.Context, err error) bool {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return true
	}
	if kafkaclient.IsFenced(err) {
		return true
	}
	var ke kafka.Error
	return errors.As(err, &ke) && (ke.IsRetriable() || ke.TxnRequiresAbort())
}

// planProducer is the producer recordPlan writes with (transactional.id
// "<application_id>-plan"), its InitTransactions started in the background
// by startPlanProducer, and the consumer the same attempt reads the plan
// topic with (readPlan), created with it.
type planProducer struct {
	p *kafka.Producer
	// done is closed when InitTransactions has returned; err is its error.
	done chan struct{}
	err  error
	// reader is the plan topic's reader (group "<application_id>-plan-reader",
	// never joined), or nil if it could not be created (readPlan then
	// creates one and says why it cannot). Created at once: its bootstrap
	// connection and metadata are ready by the time the plan is read, and
	// its group coordinator lookup (FindCoordinator, sent by librdkafka as
	// soon as a consumer has a group.id, subscribed or not) makes a fresh
	// broker create __consumer_offsets now, while the topics and the plan
	// are set up, not when the stages' consumers first join their groups.
	// On a fresh local broker that creation cost the first join 1.1-1.2 s
	// (librdkafka asks for a coordinator again once a second).
	reader *kafka.Consumer
	// empty says the plan topic holds no committed plan this producer
	// could miss, so its attempt writes without reading it first (set by
	// execute, before recordPlan): this instance created the topic after
	// the producer's InitTransactions had returned. A rival can commit a
	// plan only after the topic exists, so after that InitTransactions:
	// with a producer initialised before it, fenced by it (its commit
	// fails); with one initialised after it, which fences this one (this
	// commit fails and the next attempt reads the rival's plan, as every
	// attempt but such a first one does). Skipping the read saved its
	// ListOffsets round trip on the new topic (0.06-0.37 s measured).
	empty     bool
	closeOnce sync.Once
}

// initialised reports whether pp's InitTransactions has returned without
// error, without waiting for it.
func (pp *planProducer) initialised() bool {
	select {
	case <-pp.done:
		return pp.err == nil
	default:
		return false
	}
}

// startPlanProducer creates the plan producer of p's application and
// runs its InitTransactions (bounded by ctx and 30 s), both in the
// background; its error is the first attempt's. It creates the attempt's
// plan reader (planProducer.reader) at once.
func startPlanProducer(ctx context.Context, bootstrap string, props map[string]string, p *plan.Plan) *planProducer {
	pp := &planProducer{done: make(chan struct{})}
	rc := planReaderConfig(bootstrap, props, p.ApplicationID)
	if c, err := kafkaclient.NewConsumer(rc); err == nil {
		pp.reader = c
	}
	go func() {
		defer close(pp.done)
		pc := kafkaclient.LeanProducerConfig(bootstrap, props)
		pc["transactional.id"] = kafkaclient.PlanTopic(p.ApplicationID)
		prod, err := kafka.NewProducer(&pc)
		if err != nil {
			pp.err = fmt.Errorf("kafkastreams: plan producer: %w", err)
			return
		}
		pp.p = prod
		go func() {
			for range prod.Events() {
			}
		}()
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		pp.err = kafkaclient.InitTransactions(ictx, prod)
	}()
	return pp
}

// close closes the producer at once if its InitTransactions has returned,
// else in the background once it has (InitTransactions observes no
// cancellation, only its timeout: a start that failed early returns
// without waiting for it). Safe to call twice.
func (pp *planProducer) close() {
	select {
	case <-pp.done:
		pp.closeNow()
	default:
		go func() {
			<-pp.done
			pp.closeNow()
		}()
	}
}

func (pp *planProducer) closeNow() {
	pp.closeOnce.Do(func() {
		if pp.p != nil {
			pp.p.Close()
		}
		if pp.reader != nil {
			_ = pp.reader.Close()
		}
	})
}

func tryRecordPlan(ctx context.Context, bootstrap string, props map[string]string, p *plan.Plan, enc []byte, sources map[string][][]byte, pp *planProducer, mark func(string)) (bool, error) {
	select {
	case <-pp.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if pp.err != nil {
		return false, pp.err
	}
	mark("plan producer ready")
	prod := pp.p
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !pp.empty {
		prev, err := readPlan(ctx, bootstrap, props, p.ApplicationID, pp.reader)
		if err != nil {
			return false, err
		}
		mark("plan read")
		if prev != nil {
			return false, plan.Diff(prev, p)
		}
	}
	if err := prod.BeginTransaction(); err != nil {
		return false, err
	}
	topic := kafkaclient.PlanTopic(p.ApplicationID)
	msgs := []*kafka.Message{{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte("plan"), Value: enc}}
	for _, t := range slices.Sorted(maps.Keys(sources)) {
		for _, v := range sources[t] {
			msgs = append(msgs, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &t, Partition: 0}, Value: v})
		}
	}
	for _, m := range msgs {
		if err := kafkaclient.Produce(prod, m, nil, nil); err != nil {
			_ = prod.AbortTransaction(ctx)
			return false, err
		}
	}
	if err := prod.CommitTransaction(ictx); err != nil {
		_ = prod.AbortTransaction(ctx)
		return false, err
	}
	mark("plan committed")
	return true, nil
}

// readPlan returns the application's committed plan, or nil if none
// (plantopic.Read: up to the plan topic's log end offset as it was when it
// began, so a plan another instance committed a moment ago is waited for
// rather than read as absent), bounded by ctx and 30 s. c is the consumer
// to read with (planReaderConfig, assigned nothing yet; the caller closes
// it), or nil for a new one, closed before readPlan returns.
func readPlan(ctx context.Context, bootstrap string, props map[string]string, appID string, c *kafka.Consumer) (*plan.Plan, error) {
	if c == nil {
		cc := planReaderConfig(bootstrap, props, appID)
		var err error
		if c, err = kafkaclient.NewConsumer(cc); err != nil {
			return nil, err
		}
		defer closeLater(func() { _ = c.Close() })
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := plantopic.Read(rctx, c, appID)
	if err != nil {
		return nil, fmt.Errorf("kafkastreams: reading %w", err)
	}
	return p, nil
}

// planReaderConfig is the config of an application's plan reader: a
// reader to the log end (kafkaclient.EndReaderConfig) in the group
// "<application_id>-plan-reader", which it never joins.
func planReaderConfig(bootstrap string, props map[string]string, appID string) kafka.ConfigMap {
	return kafkaclient.EndReaderConfig(kafkaclient.Base(bootstrap, props), appID+"-plan-reader")
}

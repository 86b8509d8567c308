// Package standby keeps warm standby copies of a stateful stage's task
// stores (--standby_replicas, Kafka Streams' num.standby.replicas): a
// follower reads, read_committed, the changelog partitions of tasks this
// instance does not own and applies them to kept stores
// (state.Manager.Follow, state.Copy.Apply), so that when the group moves
// such a task here (a SIGKILLed owner's), Restore finds a store current up
// to a moment ago and reads only the changelog's tail.
//
// Placement is deterministic: the follower describes the stage's consumer
// group (DescribeConsumerGroups), orders its members by client.id (each
// instance's stage consumer has the client.id ClientID(…, instance slot))
// and keeps copies of the tasks owned by the N members after this one in
// that order (Standbys), re-checked every Config.Every. A member that
// leaves the group has its stage producer's transactional id fenced
// (Config.TransactionalIDOf), so that a transaction a SIGKILLed member
// left open no longer holds its tasks' offsets until the broker's
// timeout.
//
// Limitation: Kafka Streams' HighAvailabilityTaskAssignor (KIP-441) gives
// an active task to the instance whose copy is closest. librdkafka's
// assignors (here cooperative-sticky) cannot be told: a killed member's
// tasks go to some survivors. With two instances the survivor is the one
// that kept the copies; with more, a task lands on its standby with
// probability about N/(members-1), and elsewhere it is a full restore.
//
// It may import stage/state and stage/kafkaclient; the stage loop does not
// know it. One goroutine (Run) per stateful stage; it shares with the
// loop's goroutine only the state.Manager (whose Follow/Copy and Restore
// hand a task's directory over: Restore releases the copy before it opens
// the store, and the copy's Apply then returns state.ErrActive).
package standby

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// Config configures one stage's follower.
type Config struct {
	BootstrapServers string
	// Properties are the user's client properties (--kafka_property).
	Properties map[string]string
	// Group is the stage's consumer group ("<application_id>.<stage>").
	Group string
	// ClientID is this instance's stage consumer's client.id (ClientID).
	ClientID string
	// InputTopic is the stage's input topic: a member's partitions of it
	// are its tasks.
	InputTopic string
	// Topic is the stage's changelog topic.
	Topic string
	// Replicas is N (--standby_replicas), at least 1.
	Replicas int
	// Stores are the stage's task stores.
	Stores *state.Manager
	// Every is how often the group is described again. Default 1 s.
	Every time.Duration
	// TransactionalIDOf returns the transactional.id of the stage's
	// producer in the instance whose stage consumer has client.id
	// clientID ("" if not known): when a member leaves the group without
	// this instance, the follower fences that id (InitTransactions),
	// which aborts a transaction the member left open at once, as a copy
	// restarted in its instance slot does, instead of the broker at its
	// transaction.timeout.ms. Nil: no fencing.
	TransactionalIDOf func(clientID string) string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ClientID is the client.id of an instance's stage consumers when
// standbys are on: base (the user's client.id; "kafkastreams" if empty),
// "-", the instance slot's id. Unique per live instance (slots are), and
// the order Standbys places copies by.
func ClientID(base, instanceID string) string {
	if base == "" {
		base = "kafkastreams"
	}
	return base + "-" + instanceID
}

// Member is one member of the stage's group as DescribeConsumerGroups
// says it: its client.id and its tasks (partitions of the input topic).
type Member struct {
	ClientID string
	Tasks    []int32
}

// Standbys returns the tasks this member (client.id self) keeps copies
// of: those of the n members after it in client.id order (wrapping
// around, never itself), less its own; sorted. None if self is not a
// member (its consumer has not joined yet). Pure.
func Standbys(members []Member, self string, n int) []int32 {
	ms := slices.Clone(members)
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].ClientID < ms[j].ClientID })
	at := -1
	for i, m := range ms {
		if m.ClientID == self {
			at = i
		}
	}
	if at < 0 {
		return nil
	}
	own := map[int32]bool{}
	for _, p := range ms[at].Tasks {
		own[p] = true
	}
	set := map[int32]bool{}
	for k := 1; k <= n && k < len(ms); k++ {
		for _, p := range ms[(at+k)%len(ms)].Tasks {
			if !own[p] {
				set[p] = true
			}
		}
	}
	out := make([]int32, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Run follows until ctx is done; it returns nil then. A failure of the
// follower's clients is logged and they are made again after a second:
// standbys are an optimisation, never a reason to stop the stage.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &follower{cfg: cfg, log: cfg.Logger.With("stage_group", cfg.Group, "changelog", cfg.Topic)}
	f.log.Info("standby: following the changelogs of the tasks of the next members of the group", "replicas", cfg.Replicas, "client_id", cfg.ClientID)
	for {
		err := f.run(ctx)
		f.closeAll()
		if ctx.Err() != nil {
			return nil
		}
		f.log.Warn("standby: follower failed; starting again in 1s", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// follower is Run's state; one goroutine.
type follower struct {
	cfg    Config
	log    *slog.Logger
	c      *kafka.Consumer
	admin  *kafka.AdminClient
	copies map[int32]*state.Copy
	// members are the client.ids of the group's members at the last
	// description (nil before the first); absent counts, for a member
	// seen before, the descriptions in a row it has been missing from.
	members map[string]bool
	absent  map[string]int
	// buf are records read and not yet applied, by task; next the offset
	// after the last of them.
	buf  map[int32][]state.Record
	next map[int32]int64
	size int
	// gone are the tasks stop stopped whose partitions unassign has not
	// unassigned yet.
	gone []int32
}

// applyEvery bounds how long read records wait before Apply; applyBytes
// how many bytes.
const (
	applyEvery = 100 * time.Millisecond
	applyBytes = 8 << 20
)

func (f *follower) run(ctx context.Context) error {
	cc := kafkaclient.AssignedReaderConfig(f.cfg.BootstrapServers, f.cfg.Properties, f.cfg.Topic+"-standby")
	cc["auto.offset.reset"] = kafkaclient.InternalOffsetReset
	c, err := kafkaclient.NewConsumer(cc)
	if err != nil {
		return err
	}
	f.c = c
	// An admin client with connections of its own: on c's, a request
	// waits behind c's fetch of the changelogs (fetch.wait.max.ms), as the
	// stage loop's did (stage.Loop's ownAdmin).
	ac := kafkaclient.Base(f.cfg.BootstrapServers, f.cfg.Properties)
	if f.admin, err = kafka.NewAdminClient(&ac); err != nil {
		return err
	}
	f.copies, f.buf, f.next = map[int32]*state.Copy{}, map[int32][]state.Record{}, map[int32]int64{}
	f.gone = nil
	check := time.NewTicker(f.cfg.Every)
	defer check.Stop()
	flush := time.NewTicker(applyEvery)
	defer flush.Stop()
	if err := f.place(ctx); err != nil {
		f.log.Warn("standby: placing the copies failed; trying again", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-check.C:
			f.apply()
			if err := f.place(ctx); err != nil {
				f.log.Warn("standby: placing the copies failed; trying again", "err", err)
			}
			continue
		case <-flush.C:
			f.apply()
			continue
		default:
		}
		if len(f.copies) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		switch e := c.Poll(50).(type) {
		case *kafka.Message:
			p := e.TopicPartition.Partition
			// Only a followed task's records, in offset order from its
			// copy's Next on (a fetch of an earlier assignment may
			// still deliver older ones).
			if e.TopicPartition.Error != nil || f.copies[p] == nil || int64(e.TopicPartition.Offset) < f.next[p] {
				continue
			}
			f.buf[p] = append(f.buf[p], state.Record{Key: e.Key, Value: e.Value})
			f.next[p] = int64(e.TopicPartition.Offset) + 1
			if f.size += len(e.Key) + len(e.Value); f.size > applyBytes {
				f.apply()
			}
		case kafka.Error:
			if e.IsFatal() {
				return e
			}
			if e.Code() == kafka.ErrAutoOffsetReset {
				// A copy's offset below the log start: let the next
				// placement Follow it again (decide then wipes it).
				f.log.Warn("standby: a copy's offset is no longer in the changelog; dropping the copies", "err", e)
				f.apply()
				for p := range f.copies {
					f.stop(p)
				}
				f.unassign()
			}
		}
	}
}

// apply writes every task's buffered records to its copy; a copy taken
// over (state.ErrActive) or failing is dropped.
func (f *follower) apply() {
	for p, rs := range f.buf {
		c := f.copies[p]
		if c == nil {
			delete(f.buf, p)
			continue
		}
		err := c.Apply(rs, f.next[p])
		delete(f.buf, p)
		if err != nil {
			if !errors.Is(err, state.ErrActive) {
				f.log.Warn("standby: applying to a copy failed; dropping it", "task", p, "err", err)
			}
			f.stop(p)
		}
	}
	f.size = 0
	f.unassign()
}

// stop stops following task p: its copy closed (kept on disk), its
// partition to be unassigned (unassign).
func (f *follower) stop(p int32) {
	c := f.copies[p]
	if c == nil {
		return
	}
	c.Close()
	delete(f.copies, p)
	delete(f.buf, p)
	delete(f.next, p)
	f.gone = append(f.gone, p)
}

// unassign unassigns the partitions of the tasks stop stopped, in one
// IncrementalUnassign. Incremental (un)assignments only: a full Assign
// after each change stops and starts every other partition too, and two
// in quick succession (two tasks taken over by Restore at once) crashed
// the process in librdkafka 2.11.1 (rd_kafka_assignment_partition_stopped:
// Assertion `rktp->rktp_started' failed).
func (f *follower) unassign() {
	if len(f.gone) == 0 {
		return
	}
	topic := f.cfg.Topic
	tps := make([]kafka.TopicPartition, len(f.gone))
	for i, p := range f.gone {
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: p}
	}
	f.gone = f.gone[:0]
	if err := f.c.IncrementalUnassign(tps); err != nil {
		f.log.Warn("standby: unassigning changelog partitions failed", "err", err)
	}
}

// closeAll stops following every task and closes the clients.
func (f *follower) closeAll() {
	for p, c := range f.copies {
		c.Close()
		delete(f.copies, p)
	}
	if f.admin != nil {
		f.admin.Close()
		f.admin = nil
	}
	if f.c != nil {
		_ = f.c.Close()
		f.c = nil
	}
}

// place describes the group, computes Standbys, and starts and stops
// following tasks to match.
func (f *follower) place(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := f.admin.DescribeConsumerGroups(rctx, []string{f.cfg.Group})
	if err != nil {
		return fmt.Errorf("describe group %s: %w", f.cfg.Group, err)
	}
	var members []Member
	for _, g := range res.ConsumerGroupDescriptions {
		if g.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("describe group %s: %w", f.cfg.Group, g.Error)
		}
		for _, m := range g.Members {
			mb := Member{ClientID: m.ClientID}
			for _, tp := range m.Assignment.TopicPartitions {
				if tp.Topic != nil && *tp.Topic == f.cfg.InputTopic {
					mb.Tasks = append(mb.Tasks, tp.Partition)
				}
			}
			members = append(members, mb)
		}
	}
	f.fenceGone(ctx, members)
	want := Standbys(members, f.cfg.ClientID, f.cfg.Replicas)
	owned := map[int32]bool{}
	for _, m := range members {
		for _, p := range m.Tasks {
			owned[p] = true
		}
	}
	wanted := map[int32]bool{}
	var start []int32
	for _, p := range want {
		wanted[p] = true
		if f.copies[p] == nil {
			start = append(start, p)
		}
	}
	for p := range f.copies {
		// A task no member owns is between owners (a dead member's,
		// after its session timed out, before the rebalance gives it to
		// one): its copy is kept current, for this instance may be next.
		if !wanted[p] && owned[p] {
			f.log.Info("standby: copy no longer followed", "task", p)
			f.apply()
			f.stop(p)
		}
	}
	f.unassign()
	if len(start) == 0 {
		return nil
	}
	infos, err := f.infos(rctx, start)
	if err != nil {
		return err
	}
	f.apply()
	topic := f.cfg.Topic
	var added []kafka.TopicPartition
	for _, p := range start {
		c, err := f.cfg.Stores.Follow(p, infos[p])
		if errors.Is(err, state.ErrActive) {
			continue // taken over here since the description
		}
		if err != nil {
			f.log.Warn("standby: no copy of a task", "task", p, "err", err)
			continue
		}
		f.copies[p] = c
		f.next[p] = c.Next()
		added = append(added, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(c.Next())})
		f.log.Info("standby: following a task's changelog", "task", p, "from", c.Next(), "changelog_end", infos[p].End)
	}
	if len(added) > 0 {
		if err := f.c.IncrementalAssign(added); err != nil {
			for _, tp := range added {
				f.copies[tp.Partition].Close()
				delete(f.copies, tp.Partition)
				delete(f.next, tp.Partition)
			}
			return fmt.Errorf("assign %s: %w", topic, err)
		}
	}
	return nil
}

// infosTimeout bounds each of infos' requests, in librdkafka too (its
// own default is 60 s).
const infosTimeout = 30 * time.Second

// infos asks the changelog's topic id (kafkaclient.TopicID) and the log
// start and end offsets of partitions ps (kafkaclient.StartsAndEnds),
// each request bounded by infosTimeout. A controller or leader that
// refuses connections is not asked and fails the call (retriable): the
// follower asks again later.
func (f *follower) infos(ctx context.Context, ps []int32) (map[int32]state.ChangelogInfo, error) {
	topic := f.cfg.Topic
	id, err := kafkaclient.TopicID(ctx, f.admin, topic, infosTimeout)
	if err != nil {
		return nil, err
	}
	starts, ends, err := kafkaclient.StartsAndEnds(ctx, f.admin, topic, ps, infosTimeout)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]state.ChangelogInfo, len(ps))
	for _, p := range ps {
		out[p] = state.ChangelogInfo{TopicID: id, Start: starts[p], End: ends[p]}
	}
	return out, nil
}

// fenceGone fences (fence, on a goroutine of its own) the transactional
// id of a member seen before that has been missing from fenceAfter
// descriptions in a row (members is the newest) and is not this instance:
// a member that left without a clean shutdown (its session timed out:
// SIGKILL) may have left a transaction open, which holds its tasks'
// committed offsets (the new owners wait for stable offsets) until the
// broker aborts it at transaction.timeout.ms, checked every
// transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s each
// by default). A member that left cleanly has nothing open, and the fence
// costs one InitTransactions. A member missing from one description only
// is not fenced: a stage restarting its Kafka clients (stage.Loop.Run)
// leaves and joins again within about a second. A member alive after all
// (a pause longer than its session) has lost its tasks already; its
// producer is fenced, as the group's generation fences its offsets, and
// its stage restarts its clients.
func (f *follower) fenceGone(ctx context.Context, members []Member) {
	for _, id := range f.departed(members) {
		if f.cfg.TransactionalIDOf == nil {
			continue
		}
		if txnID := f.cfg.TransactionalIDOf(id); txnID != "" {
			go f.fence(ctx, id, txnID)
		}
	}
}

// departed takes the newest description's members and returns the
// client.ids to fence now: seen in an earlier description, missing from
// the last fenceAfter in a row, not this instance's; each once per
// departure. No I/O.
func (f *follower) departed(members []Member) []string {
	now := map[string]bool{}
	for _, m := range members {
		now[m.ClientID] = true
		delete(f.absent, m.ClientID)
	}
	if f.absent == nil {
		f.absent = map[string]int{}
	}
	for id := range f.members {
		if !now[id] && id != f.cfg.ClientID {
			if _, ok := f.absent[id]; !ok {
				f.absent[id] = 0
			}
		}
	}
	f.members = now
	var out []string
	for id := range f.absent {
		if f.absent[id]++; f.absent[id] >= fenceAfter {
			delete(f.absent, id)
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// fenceAfter is how many descriptions in a row a departed member must be
// missing from before its transactional id is fenced.
const fenceAfter = 2

// fence runs InitTransactions for transactional id txnID (bounded by 30
// s and ctx) and closes the producer.
func (f *follower) fence(ctx context.Context, clientID, txnID string) {
	start := time.Now()
	cfg := kafkaclient.TransactionalProducerConfig(f.cfg.BootstrapServers, f.cfg.Properties, txnID)
	p, err := kafka.NewProducer(&cfg)
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = p.InitTransactions(rctx)
		cancel()
		p.Close()
	}
	if err != nil {
		f.log.Warn("standby: fencing a departed member's transactional id failed (its open transaction, if any, ends at its timeout)", "client_id", clientID, "transactional_id", txnID, "err", err)
		return
	}
	f.log.Info("standby: fenced a departed member's transactional id: a transaction it left open is aborted now", "client_id", clientID, "transactional_id", txnID, "took", time.Since(start).Round(time.Millisecond))
}

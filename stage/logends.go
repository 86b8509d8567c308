package stage

import (
	"github.com/kafkastreams/kafkastreams/stage/step"

	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// logEndTimeout bounds one ListOffsets round trip of askLogEnds: a
// partition whose answer does not come stays as it is (not idle).
const logEndTimeout = 10 * time.Second

// logEndAnswer is one round trip's result: per partition its high
// watermark and last stable offset, asked at asked.
type logEndAnswer struct {
	asked        time.Time
	high, stable map[int32]int64
	err          error
}

// askLogEnds applies the answers that came since the last call and asks
// the broker again, at most every LogEndInterval and one request at a
// time, for the log ends of the partitions the head wants
// (LogEnds.LogEndsWanted): ListOffsets latest twice, read_uncommitted (the
// high watermark) and read_committed (the last stable offset). Each
// partition's answer goes to the head with the instant the requests were
// sent. The requests run on a goroutine of their own, through the loop's
// admin client (ownAdmin: connections of its own, not the consumer's);
// the answers are applied here, on the loop's goroutine. A
// failed request is logged (at most every 30 s) and changes nothing: a
// partition without a fresh answer is not idle.
func (l *Loop) askLogEnds(ctx context.Context) {
	le, ok := l.head.(step.LogEnds)
	if !ok {
		return
	}
	if l.logEnd.busy {
		select {
		case a := <-l.logEnd.answers:
			l.logEnd.busy = false
			l.applyLogEnds(le, a)
		default:
		}
	}
	if l.logEnd.busy || time.Since(l.logEnd.asked) < step.LogEndInterval {
		return
	}
	want := le.LogEndsWanted()
	if len(want) == 0 {
		return
	}
	admin, err := l.ownAdmin()
	if err != nil {
		l.applyLogEnds(le, logEndAnswer{err: err})
		return
	}
	if l.logEnd.answers == nil {
		l.logEnd.answers = make(chan logEndAnswer, 1)
	}
	topic := l.cfg.Spec.InputTopic
	asked := time.Now()
	l.logEnd.asked, l.logEnd.busy = asked, true
	answers := l.logEnd.answers
	go func() {
		a := logEndAnswer{asked: asked}
		a.high, a.stable, a.err = kafkaclient.HighAndStable(ctx, admin, topic, want, logEndTimeout)
		answers <- a
	}()
}

// ownAdmin returns the loop's admin client, made by run before it starts
// its watchers (so the commit goroutine of PollDuringCommit never makes
// it) and closed by closeAdmin when the loop closes; it outlives a
// restart of the consumer and producer (reopen). Its
// connections are its own, not the consumer's: a broker answers one
// request at a time per connection, and on the consumer's a request waits
// behind the fetch in flight, up to fetch.wait.max.ms, and through a
// quota's throttle. So every question the loop asks a leader or any
// broker goes through it: askLogEnds' and positions' ListOffsets,
// outOfRange's, startAt's, watchTopics' DescribeTopics, the partition
// count (partitionCount); the committed offsets (OffsetFetch) go to the
// group coordinator, on the consumer's coordinator connection, which no
// fetch uses, and the purge's DeleteRecords has an admin client of its
// own (purge.go: its requests run off the loop's path). On
// the consumer's connection a woken task's log start once waited 8.9 s
// behind a fetch (fetch.wait.max.ms 9 s; TestKafkaSourceIdleDuringLongPoll)
// and watchTopics' requests timed out.
func (l *Loop) ownAdmin() (*kafka.AdminClient, error) {
	if l.admin == nil {
		cm := kafkaclient.Base(l.cfg.BootstrapServers, l.cfg.Properties)
		a, err := kafka.NewAdminClient(&cm)
		if err != nil {
			return nil, fmt.Errorf("stage %s: admin client: %w", l.cfg.Spec.Name, err)
		}
		l.admin = a
	}
	return l.admin, nil
}

// applyLogEnds hands answer a to the head, for the partitions still
// assigned that both requests answered.
func (l *Loop) applyLogEnds(le step.LogEnds, a logEndAnswer) {
	if a.err != nil {
		if time.Since(l.logEnd.failed) >= 30*time.Second {
			l.logEnd.failed = time.Now()
			l.log.Warn("stage: asking the broker for partitions' log ends failed: they stay non-idle until it answers", "err", a.err)
		}
		return
	}
	for p, high := range a.high {
		if stable, ok := a.stable[p]; ok && l.tasks[p] != nil {
			le.SetLogEnd(p, high, stable, a.asked)
		}
	}
}

// closeAdmin waits (at most 2 logEndTimeout: HighAndStable's two
// requests) for askLogEnds' requests in flight and closes the loop's
// admin client (ownAdmin). The loop's goroutines that use it
// (watchTopics, watchPartitions) have returned: run waits for them.
func (l *Loop) closeAdmin() {
	if l.admin == nil {
		return
	}
	if l.logEnd.busy {
		select {
		case <-l.logEnd.answers:
		case <-time.After(2 * logEndTimeout):
			// Never closed under a call: left open (its handle and
			// threads leak), which each request's own timeout makes
			// unlikely.
			return
		}
	}
	l.admin.Close()
	l.admin, l.logEnd.busy = nil, false
}

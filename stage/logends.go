package stage

import (
	"github.com/kafkastreams/kafkastreams/stage/step"

	"context"
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
// sent. The requests run on a goroutine of their own with an admin client
// of their own (its own connections: a broker answers one request at a
// time per connection, and the consumer's may wait up to fetch.wait.max.ms
// on a fetch); the answers are applied here, on the loop's goroutine. A
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
	if l.logEnd.admin == nil {
		cm := kafkaclient.Base(l.cfg.BootstrapServers, l.cfg.Properties)
		a, err := kafka.NewAdminClient(&cm)
		if err != nil {
			l.applyLogEnds(le, logEndAnswer{err: err})
			return
		}
		l.logEnd.admin = a
		l.logEnd.answers = make(chan logEndAnswer, 1)
	}
	topic := l.cfg.Spec.InputTopic
	asked := time.Now()
	l.logEnd.asked, l.logEnd.busy = asked, true
	admin, answers := l.logEnd.admin, l.logEnd.answers
	go func() {
		a := logEndAnswer{asked: asked}
		a.high, a.stable, a.err = kafkaclient.HighAndStable(ctx, admin, topic, want, logEndTimeout)
		answers <- a
	}()
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

// closeLogEnds waits (at most logEndTimeout) for a request in flight and
// closes the admin client of askLogEnds.
func (l *Loop) closeLogEnds() {
	if l.logEnd.admin == nil {
		return
	}
	if l.logEnd.busy {
		select {
		case <-l.logEnd.answers:
		case <-time.After(logEndTimeout):
			return // left to its goroutine: never closed under it
		}
	}
	l.logEnd.admin.Close()
	l.logEnd.admin, l.logEnd.busy = nil, false
}

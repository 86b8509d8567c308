package stage

import (
	"context"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// logEndTimeout bounds one ListOffsets round trip of askLogEnds: a
// partition whose answer does not come stays as it is (not idle).
const logEndTimeout = 2 * time.Second

// askLogEnds asks the broker, at most every LogEndInterval, for the log
// ends of the partitions the head wants (LogEnds.LogEndsWanted): ListOffsets
// latest twice, read_uncommitted (the high watermark) and read_committed
// (the last stable offset), and hands each partition's answer to the head
// with the instant the requests were sent. A failed request is logged (at
// most every 30 s) and changes nothing: a partition without a fresh answer
// is not idle. Runs on the loop's goroutine; blocks it for one round trip
// when a partition is at its idleness deadline or idle.
func (l *Loop) askLogEnds(ctx context.Context) {
	le, ok := l.head.(LogEnds)
	if !ok || time.Since(l.logEndAsked) < LogEndInterval {
		return
	}
	want := le.LogEndsWanted()
	if len(want) == 0 {
		return
	}
	asked := time.Now()
	l.logEndAsked = asked
	fail := func(err error) {
		if time.Since(l.logEndFailed) >= 30*time.Second {
			l.logEndFailed = time.Now()
			l.log.Warn("stage: asking the broker for partitions' log ends failed: they stay non-idle until it answers", "partitions", want, "err", err)
		}
	}
	if l.admin == nil {
		a, err := kafka.NewAdminClientFromConsumer(l.consumer)
		if err != nil {
			fail(err)
			return
		}
		l.admin = a
	}
	topic := l.cfg.Spec.InputTopic
	spec := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(want))
	for _, p := range want {
		spec[kafka.TopicPartition{Topic: &topic, Partition: p}] = kafka.LatestOffsetSpec
	}
	ends := [2]map[int32]int64{}
	for i, iso := range []kafka.IsolationLevel{kafka.IsolationLevelReadUncommitted, kafka.IsolationLevelReadCommitted} {
		rctx, cancel := context.WithTimeout(ctx, logEndTimeout)
		res, err := l.admin.ListOffsets(rctx, spec, kafka.SetAdminIsolationLevel(iso))
		cancel()
		if err != nil {
			fail(err)
			return
		}
		ends[i] = map[int32]int64{}
		for tp, info := range res.ResultInfos {
			if info.Error.Code() == kafka.ErrNoError && info.Offset >= 0 {
				ends[i][tp.Partition] = int64(info.Offset)
			}
		}
	}
	for _, p := range want {
		high, okH := ends[0][p]
		stable, okS := ends[1][p]
		if okH && okS && l.tasks[p] != nil {
			le.SetLogEnd(p, high, stable, asked)
		}
	}
}

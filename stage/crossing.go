package stage

import (
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/step"
)

// This file is the early commit of a source stage at a window's end
// (Config.NextWindowEnd, step.WatermarkAhead; issue 24's steady run).
//
// A GroupByKey downstream fires a window once its input watermark, the
// minimum over this stage's tasks' reports, passes the window's end; this
// stage reports at its commits, which come every CommitInterval. The
// record that carries that minimum past the end would wait for the rest
// of the interval (50 ms on average at the default 100 ms) before the
// firing could even begin. So a poll ends early, taking only what the
// consumer holds already, on the record after which
//
//	min over the poll's tasks of WatermarkWith(task, its highest timestamp polled)
//	  ≥ d = NextWindowEnd(min over the same tasks of their committed output watermarks)
//
// when that record is the last its partition holds (its offset + 1 is the
// high watermark of the consumer's last fetch): at the head of the
// stream, where the latency is. A stage reading a backlog is not there
// and commits at its interval as before, whatever windows its records
// pass. The poll's tasks are the assigned ones whose last report did not
// say idle (an idle task is left out of the minimum downstream, as here;
// the head's Idle is not asked: it announces the idleness it finds). At most
// one early end per window end (the commit reports past d, so the next d
// is the next window's), and at most one per CommitInterval (windows
// shorter than the interval: every commit passes an end anyway).

// crossing is one poll's state for the early commit; its zero value is
// off (the stage has no NextWindowEnd, no WatermarkAhead head, or no task
// below a window's end).
type crossing struct {
	on    bool
	ahead step.WatermarkAhead
	// due is d above.
	due mtime.Time
	// below are the poll's tasks whose watermark has not reached due yet,
	// with the highest Kafka timestamp polled for each (0: none).
	below map[int32]int64
	// high[p] is partition p's high watermark as the consumer last
	// fetched it (kafka.Consumer.GetWatermarkOffsets), asked again only
	// once a record reaches it.
	high map[int32]int64
	// last is when a poll last ended early (the loop's, kept across polls).
	last time.Time
}

// startCrossing begins a poll's crossing state.
func (l *Loop) startCrossing() {
	c := &l.cross
	c.on = false
	ahead, ok := l.head.(step.WatermarkAhead)
	if !ok || l.cfg.NextWindowEnd == nil || !l.cfg.Spec.RawInput || time.Since(c.last) < l.cfg.CommitInterval {
		return
	}
	lo := mtime.MaxTimestamp
	for _, t := range l.tasks {
		if t != nil && !t.ReportedIdle() {
			lo = min(lo, t.OutputWatermark())
		}
	}
	if lo == mtime.MaxTimestamp {
		return
	}
	due, ok := l.cfg.NextWindowEnd(lo)
	if !ok {
		return
	}
	clear(c.below)
	if c.below == nil {
		c.below = map[int32]int64{}
	}
	for p, t := range l.tasks {
		if t != nil && !t.ReportedIdle() && t.OutputWatermark() < due {
			c.below[p] = 0
		}
	}
	c.on, c.ahead, c.due = true, ahead, due
}

// crossesWindowEnd reports whether polled record m ends the poll early
// (see the file's comment). O(1) per record but for the consumer's cached
// high watermark, asked at most once per fetch reaching it.
func (l *Loop) crossesWindowEnd(m *kafka.Message) bool {
	c := &l.cross
	if !c.on || m.TimestampType == kafka.TimestampNotAvailable {
		return false
	}
	p := m.TopicPartition.Partition
	if ts, ok := c.below[p]; ok {
		ts = max(ts, m.Timestamp.UnixMilli())
		c.below[p] = ts
		if wm, ok := c.ahead.WatermarkWith(p, ts); !ok || wm < c.due {
			return false
		}
		delete(c.below, p)
	}
	if len(c.below) > 0 || !l.atHighWatermark(m) {
		return false
	}
	c.on, c.last = false, time.Now()
	return true
}

// atHighWatermark reports whether m is the last record its partition held
// at the consumer's last fetch of it.
func (l *Loop) atHighWatermark(m *kafka.Message) bool {
	c := &l.cross
	p, next := m.TopicPartition.Partition, int64(m.TopicPartition.Offset)+1
	if h, ok := c.high[p]; ok && next < h {
		return false
	}
	_, h, err := l.consumer.GetWatermarkOffsets(l.cfg.Spec.InputTopic, p)
	if err != nil {
		return false
	}
	if c.high == nil {
		c.high = map[int32]int64{}
	}
	c.high[p] = h
	return next >= h
}

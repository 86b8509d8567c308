package stage

import (
	"fmt"
	"slices"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/step"
)

// aheadMsg is a prefetched record of partition p at offset off, owned by
// owner.
func aheadMsg(p int32, off int64, owner *step.Task) aheadEvent {
	topic := "in"
	return aheadEvent{ev: &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(off)}}, owner: owner}
}

// takeAhead lists what poll takes from l.ahead, as "p@offset" for a
// record and "eof p@offset" for an end of partition.
func takeAhead(l *Loop) []string {
	var out []string
	for {
		ev, _, ok := l.nextAhead()
		if !ok {
			return out
		}
		switch e := ev.(type) {
		case *kafka.Message:
			out = append(out, fmt.Sprintf("%d@%d", e.TopicPartition.Partition, e.TopicPartition.Offset))
		case kafka.PartitionEOF:
			out = append(out, fmt.Sprintf("eof %d@%d", e.Partition, e.Offset))
		default:
			out = append(out, fmt.Sprintf("%T", e))
		}
	}
}

// TestAheadDropsStaleEvents: poll takes the events polled during a commit
// in order, except those of a partition whose task changed since (a
// rewind after the commit failed, a rebalance that revoked and assigned it
// again) or that the loop sought back (dropAhead: side inputs hold it):
// the consumer delivers those again from where the partition restarts,
// and taking both would process records twice.
func TestAheadDropsStaleEvents(t *testing.T) {
	t0, t1, t2 := &step.Task{}, &step.Task{}, &step.Task{}
	topic := "in"
	events := func() []aheadEvent {
		return []aheadEvent{
			aheadMsg(0, 10, t0),
			aheadMsg(1, 20, t1),
			{ev: kafka.PartitionEOF{Topic: &topic, Partition: 1, Offset: 21}, owner: t1},
			{ev: kafka.NewError(kafka.ErrTransport, "broker down", false)},
			aheadMsg(2, 30, t2),
			aheadMsg(0, 11, t0),
			aheadMsg(3, 40, nil), // polled while 3 had no task
		}
	}
	for _, c := range []struct {
		name    string
		change  func(l *Loop)
		want    []string
		records int
	}{
		{"unchanged", func(*Loop) {}, []string{"0@10", "1@20", "eof 1@21", "kafka.Error", "2@30", "0@11"}, 0},
		{"rewound", func(l *Loop) { l.tasks[0] = &step.Task{} }, []string{"1@20", "eof 1@21", "kafka.Error", "2@30"}, 0},
		{"revoked", func(l *Loop) { delete(l.tasks, 1) }, []string{"0@10", "kafka.Error", "2@30", "0@11"}, 0},
		{"held", func(l *Loop) { l.dropAhead(1, 2) }, []string{"0@10", "kafka.Error", "0@11"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &Loop{tasks: map[int32]*step.Task{0: t0, 1: t1, 2: t2, 3: {}}}
			l.ahead.events, l.ahead.records = events(), 5
			c.change(l)
			if got := takeAhead(l); !slices.Equal(got, c.want) {
				t.Errorf("taken %q, want %q", got, c.want)
			}
			if l.ahead.records != c.records {
				t.Errorf("%d records left counted, want %d", l.ahead.records, c.records)
			}
		})
	}
}

// TestAheadOffset: a woken task without a committed offset commits the
// offset of its first prefetched record, not the consumer's position
// past it (positions).
func TestAheadOffset(t *testing.T) {
	t0 := &step.Task{}
	l := &Loop{tasks: map[int32]*step.Task{0: t0, 1: {}}}
	l.ahead.events = []aheadEvent{aheadMsg(1, 7, nil), aheadMsg(0, 12, t0), aheadMsg(0, 13, t0)}
	if off, ok := l.aheadOffset(0); !ok || off != 12 {
		t.Errorf("aheadOffset(0) = %d, %v; want 12, true", off, ok)
	}
	if off, ok := l.aheadOffset(1); ok {
		t.Errorf("aheadOffset(1) = %d, true; want none (its record's task is gone)", off)
	}
}

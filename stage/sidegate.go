package stage

import (
	"github.com/kafkastreams/kafkastreams/stage/step"

	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// sideGate is the Loop's state for holding back main input: the tasks
// stopped at an element whose side inputs are not ready. Owned by the
// goroutine running Run.
//
// Step.Decide applies the gate and returns the blocked tasks (Ready.Blocked).
//
// The rule (exactly once, never early, never dropped): a task processes its
// partition's records in offset order up to, not including, the first
// element record that is not Ready. That record and every later one of the
// partition (elements and reports alike: a report after it covers it) stay
// unconsumed in this transaction: the committed offset is the held record's
// offset, the partition is sought back to it and paused, and resumed when
// the gate's Changed fires (or after sideRecheck), to be read again.
type sideGate struct {
	// paused[p] is when partition p was paused.
	paused map[int32]time.Time
	// wake is the gate's Changed channel as of the last pause.
	wake <-chan struct{}
	// logged is when the loop last logged what it waits for.
	logged time.Time
}

// sideRecheck is how long a paused partition waits at most before it is
// resumed and its held element checked again, even without a Changed
// signal: a safety net, not the mechanism.
const sideRecheck = 5 * time.Second

// holdBlocked seeks every task blocked in the attempt just committed
// (Ready.Blocked: task -> offset of its held record) back to its held
// record and pauses it.
func (l *Loop) holdBlocked(blocked map[int32]int64) error {
	if len(blocked) == 0 {
		return nil
	}
	topic := l.cfg.Spec.InputTopic
	var tps []kafka.TopicPartition
	for _, p := range slices.Sorted(maps.Keys(blocked)) {
		if l.tasks[p] == nil {
			continue
		}
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(blocked[p])})
	}
	if len(tps) == 0 {
		return nil
	}
	l.side.wake = l.cfg.SideInputs.Changed()
	if err := l.consumer.Pause(tps); err != nil {
		return fmt.Errorf("stage %s: pause tasks held by side inputs: %w", l.cfg.Spec.Name, err)
	}
	sought, err := l.consumer.SeekPartitions(tps)
	if err != nil {
		return fmt.Errorf("stage %s: seek tasks held by side inputs: %w", l.cfg.Spec.Name, err)
	}
	if err := partitionErrors(sought); err != nil {
		l.log.Warn("stage: tasks held by side inputs not sought back", "err", err)
	}
	if le, ok := l.head.(step.LogEnds); ok {
		// Sought back before records the EOF was past: not caught up
		// (issue 21, section 2: a paused partition with records is not idle).
		for _, tp := range tps {
			le.Rewound(tp.Partition)
		}
	}
	if l.side.paused == nil {
		l.side.paused = map[int32]time.Time{}
	}
	now := time.Now()
	for _, tp := range tps {
		if _, ok := l.side.paused[tp.Partition]; !ok {
			l.side.paused[tp.Partition] = now
		}
	}
	if now.Sub(l.side.logged) > 10*time.Second {
		l.side.logged = now
		l.log.Info("stage: tasks wait for side inputs", "partitions", partitionsOf(tps), "side_inputs", l.cfg.SideInputs.Waiting())
	}
	return nil
}

// resumeHeld resumes the paused tasks when the gate signalled a change or
// sideRecheck passed; their held records are read and checked again.
func (l *Loop) resumeHeld() error {
	if len(l.side.paused) == 0 {
		return nil
	}
	wake := false
	select {
	case <-l.side.wake:
		wake = true
	default:
	}
	topic := l.cfg.Spec.InputTopic
	var tps []kafka.TopicPartition
	for _, p := range slices.Sorted(maps.Keys(l.side.paused)) {
		if wake || time.Since(l.side.paused[p]) > sideRecheck {
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
			delete(l.side.paused, p)
		}
	}
	if len(tps) == 0 {
		return nil
	}
	if err := l.consumer.Resume(tps); err != nil {
		return fmt.Errorf("stage %s: resume tasks held by side inputs: %w", l.cfg.Spec.Name, err)
	}
	return nil
}

package stage

import (
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
)

// SideInputGate says whether an element of a stage's head output may enter a
// bundle: every side input window it reads is complete (see package
// stage/sideinput, whose Set implements it). Safe for concurrent use.
type SideInputGate interface {
	// Ready reports whether element (encoded with the head output's wire
	// coder) may be processed now. An error is the stage's error.
	Ready(element []byte) (bool, error)
	// Changed returns a channel closed the next time readiness may have
	// changed (a side watermark moved).
	Changed() <-chan struct{}
	// Waiting describes what the side inputs wait for, for logs.
	Waiting() string
}

// sideGate is the Loop's state for holding back main input: the tasks
// stopped at an element whose side inputs are not ready. Owned by the
// goroutine running Run.
//
// The rule (exactly once, never early, never dropped): a task processes its
// partition's records in offset order up to, not including, the first
// element record that is not Ready. That record and every later one of the
// partition (elements and reports alike: a report after it covers it) stay
// unconsumed in this transaction: the committed offset is the held record's
// offset, the partition is sought back to it and paused, and resumed when
// the gate's Changed fires (or after sideRecheck), to be read again.
type sideGate struct {
	// blocked[p] is the offset task p stopped at in the current attempt.
	blocked map[int32]kafka.Offset
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

// sideReady says whether record m of task p may be processed now, given
// the gate; false records the block. Without a gate, or for a report, it is
// true. An Impulse record stands for the impulse element.
func (l *Loop) sideReady(m *kafka.Message, impulse bool) (bool, error) {
	if l.cfg.SideInputs == nil {
		return true, nil
	}
	p := m.TopicPartition.Partition
	if _, held := l.side.blocked[p]; held {
		return false, nil // behind a held record of the same partition
	}
	elm := l.cfg.ImpulseElement
	if !impulse {
		env := &pb.Envelope{}
		if err := proto.Unmarshal(m.Value, env); err != nil {
			return true, nil // commitBatch reports it
		}
		e, ok := env.Payload.(*pb.Envelope_Element)
		if !ok {
			return true, nil
		}
		elm = e.Element
	}
	ok, err := l.cfg.SideInputs.Ready(elm)
	if err != nil {
		return false, fmt.Errorf("stage %s: side inputs: %w", l.cfg.Stage.Name, err)
	}
	if !ok {
		if l.side.blocked == nil {
			l.side.blocked = map[int32]kafka.Offset{}
		}
		l.side.blocked[p] = m.TopicPartition.Offset
	}
	return ok, nil
}

// holdBlocked seeks every task blocked in the attempt just committed back to
// its held record and pauses it.
func (l *Loop) holdBlocked() error {
	if len(l.side.blocked) == 0 {
		return nil
	}
	topic := l.cfg.Stage.InputTopic
	var tps []kafka.TopicPartition
	for _, p := range sortedInt32Keys(l.side.blocked) {
		if l.tasks[p] == nil {
			continue
		}
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: l.side.blocked[p]})
	}
	l.side.blocked = nil
	if len(tps) == 0 {
		return nil
	}
	l.side.wake = l.cfg.SideInputs.Changed()
	if err := l.consumer.Pause(tps); err != nil {
		return fmt.Errorf("stage %s: pause tasks held by side inputs: %w", l.cfg.Stage.Name, err)
	}
	if _, err := l.consumer.SeekPartitions(tps); err != nil {
		return fmt.Errorf("stage %s: seek tasks held by side inputs: %w", l.cfg.Stage.Name, err)
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
	topic := l.cfg.Stage.InputTopic
	var tps []kafka.TopicPartition
	for _, p := range sortedInt32Keys(l.side.paused) {
		if wake || time.Since(l.side.paused[p]) > sideRecheck {
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
			delete(l.side.paused, p)
		}
	}
	if len(tps) == 0 {
		return nil
	}
	if err := l.consumer.Resume(tps); err != nil {
		return fmt.Errorf("stage %s: resume tasks held by side inputs: %w", l.cfg.Stage.Name, err)
	}
	return nil
}

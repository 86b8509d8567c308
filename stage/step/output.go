package step

import (
	"fmt"
	"hash/fnv"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/recordtime"
)

// This file is where an attempt's records come from: a bundle's outputs
// routed to their topics (keyed or round-robin), its sinks' plain
// records, and the reports fanned out to every output partition.

// emit is the Emit a bundle streams its outputs to: their records, as
// appendOutputs and appendSinks make them, then a Spill if they fill one.
func (a *attempt) emit(pcollection string, es [][]byte) error {
	for _, o := range a.s.spec.Outputs {
		if o.PCollection == pcollection {
			if err := a.appendOutputElements(o, es); err != nil {
				return err
			}
		}
	}
	for _, k := range a.s.spec.Sinks {
		if k.PCollection == pcollection {
			if err := a.appendSinkElements(k, es); err != nil {
				return err
			}
		}
	}
	return a.spillIfFull()
}

// append appends r to the attempt's records.
func (a *attempt) append(r Record) {
	a.ready.Records = append(a.ready.Records, r)
	a.held += len(r.Key) + len(r.Value)
}

// spillIfFull hands the records to Config.Spill once they hold
// SpillBytes, then reuses their slice and the envelope arena: Spill keeps
// neither.
func (a *attempt) spillIfFull() error {
	if a.s.spill == nil || a.held < a.s.spillBytes {
		return nil
	}
	if err := a.s.spill(a.ready.Records); err != nil {
		return fmt.Errorf("stage %s: %w", a.s.spec.Name, err)
	}
	a.ready.Spilled += len(a.ready.Records)
	clear(a.ready.Records)
	a.ready.Records = a.ready.Records[:0]
	a.arena = a.arena[:0]
	a.held = 0
	return nil
}

// appendOutputs routes a bundle's outputs to their topics: a keyed topic
// by the element's key, others round-robin.
func (a *attempt) appendOutputs(b *Bundle) error {
	for _, o := range a.s.spec.Outputs {
		if err := a.appendOutputElements(o, b.Outputs[o.PCollection]); err != nil {
			return err
		}
	}
	return nil
}

// appendOutputElements appends elements es of output o (one per window of
// an interval-window PCollection: ExplodeWindows).
func (a *attempt) appendOutputElements(o Output, es [][]byte) error {
	for _, e := range es {
		if !o.IntervalWindows {
			if err := a.appendOutput(o, e); err != nil {
				return err
			}
			continue
		}
		ws, err := ExplodeWindows(e)
		if err != nil {
			return fmt.Errorf("stage %s: an element of %s: %w", a.s.spec.Name, o.PCollection, err)
		}
		for _, e := range ws {
			if err := a.appendOutput(o, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendOutput appends element e of output o to each of o's topics.
func (a *attempt) appendOutput(o Output, e []byte) error {
	v := envelope.AppendElement(&a.arena, e)
	var key []byte
	var err error
	for _, t := range o.Topics {
		if t.Keyed && key == nil {
			if key, err = a.s.keyOf[o.PCollection](e); err != nil {
				return fmt.Errorf("stage %s: key of an element of %s: %w", a.s.spec.Name, o.PCollection, err)
			}
		}
		for c := 0; c < t.Copies; c++ {
			a.flushReports() // the reports before it cover less
			r := Record{Topic: t.Name, Value: v}
			if t.Keyed {
				r.Key, r.Partition = key, keyPartition(key, t.Partitions)
			} else {
				r.Partition = a.s.rr[t.Name]
				a.s.rr[t.Name] = (r.Partition + 1) % t.Partitions
			}
			a.append(r)
			a.ready.ElementsOut++
		}
	}
	return nil
}

// appendSinks appends a bundle's elements of the sinks' PCollections as
// plain records to their topics: the key the Java client would partition by
// (javapartition.ForKey), the event time as the record's timestamp when Kafka can
// hold it (an event time at or before the epoch, such as Beam's start of
// time, leaves the timestamp to the producer: the time of writing;
// librdkafka reads a timestamp of 0 as "now" too).
func (a *attempt) appendSinks(b *Bundle) error {
	for _, k := range a.s.spec.Sinks {
		if err := a.appendSinkElements(k, b.Outputs[k.PCollection]); err != nil {
			return err
		}
	}
	return nil
}

// appendSinkElements appends elements es of sink k's PCollection. An
// element the sink cannot decode is ErrUndecodable: in a stage without
// SDK transforms it is an input record's element as read (a garbage
// Envelope), and in one with them it was made from the attempt's input;
// either way the same records fail the same way, and the loop finds the
// one (stage.Config.ErrorPolicy).
func (a *attempt) appendSinkElements(k Sink, es [][]byte) error {
	for _, e := range es {
		sr, err := k.Decode(e)
		if err != nil {
			return fmt.Errorf("%w: stage %s: an element of %s for topic %s: %w", ErrUndecodable, a.s.spec.Name, k.PCollection, k.Topic, err)
		}
		r := Record{Topic: k.Topic, Partition: AnyPartition, Key: sr.Key, Value: sr.Value, Headers: sr.Headers}
		if sr.Key != nil {
			r.Partition = javapartition.ForKey(sr.Key, k.Partitions)
		}
		var ahead bool
		if r.Timestamp, ahead = recordtime.For(sr.EventTime, a.s.now(), k.TimestampAfterMax); ahead {
			a.ready.TimestampsAhead++
		}
		a.append(r)
		a.ready.ElementsOut++
	}
	return nil
}

// AnyPartition as a Record's Partition lets the producer's partitioner
// choose (Kafka's RD_KAFKA_PARTITION_UA).
const AnyPartition int32 = -1

// appendReports makes task p's report: appended to the report topic now,
// and to every partition of every output topic with the other reports of
// its run at the next flushReports (before the next output record, or at
// the end of the attempt), so it sits after the data it covers in every
// partition, in the transaction (seed 000).
func (a *attempt) appendReports(p int32, t *Task, wm mtime.Time, idle bool) {
	r := &pb.WatermarkReport{
		Stage:                    a.s.spec.Name,
		SourcePartition:          p,
		CommittedWatermarkMillis: int64(wm),
		TotalSourcePartitions:    a.s.spec.Partitions,
		Idle:                     idle,
		Source:                   a.s.head.Source(p),
		Instance:                 a.s.instance,
	}
	if ms, ok := a.clock(p, t); ok {
		r.ProcessingTimeMillis = proto.Int64(ms)
		t.clockOut, t.hasClockOut = ms, true
	}
	a.reports = append(a.reports, r)
	raw, _ := proto.Marshal(r)
	a.append(Record{Topic: a.s.report, Partition: AnyPartition, Key: []byte(fmt.Sprintf("%s/%d", a.s.spec.Name, p)), Value: raw, Headers: a.s.writer})
	a.ready.ReportsOut++
}

// flushReports appends the reports made since the last output record to
// every partition of every output topic: one Envelope per partition
// holding them all, in the order made (Envelope.reports). So a run of
// reports of P tasks into Q partitions costs Q records, not P x Q, and no
// report moves past an output record: downstream, each sits between the
// same records as if every task had written its own.
func (a *attempt) flushReports() {
	if len(a.reports) == 0 {
		return
	}
	env := envelope.EncodeReports(a.reports)
	a.reports = nil
	seen := map[string]bool{}
	for _, o := range a.s.spec.Outputs {
		for _, t := range o.Topics {
			if seen[t.Name] {
				continue
			}
			seen[t.Name] = true
			for q := int32(0); q < t.Partitions; q++ {
				a.append(Record{Topic: t.Name, Partition: q, Value: env, Headers: a.s.writer})
				a.ready.ReportsOut++
			}
		}
	}
}

// keyPartition is the partition of a record keyed by an encoded Beam key:
// FNV-1a of the key bytes modulo the partition count. Every instance computes
// the same partition for the same key.
func keyPartition(key []byte, partitions int32) int32 {
	h := fnv.New32a()
	h.Write(key)
	return int32(h.Sum32() % uint32(partitions))
}

// KeyPartition is the partition (task) of a record keyed by an encoded Beam
// key on a keyed topic (a GroupByKey's or a stateful ParDo's input): FNV-1a
// of the key bytes modulo the partition count. A stateful head finds the
// task of a state request or a timer by the key bytes the SDK sends.
func KeyPartition(key []byte, partitions int32) int32 { return keyPartition(key, partitions) }

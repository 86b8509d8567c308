package step

import "fmt"

// Ready is one attempt's decision, for the Loop to carry out in one Kafka
// transaction, in this order: the spilled records (Config.Spill), Records,
// State, then Offsets with the consumer group's metadata; then, once the
// transaction committed, Step.Advance(rd), the one acknowledgement (the
// head applies its state to its local stores, the bundles' Committed
// callbacks run). If anything before the commit fails, the Loop aborts
// the transaction and calls Step.Abort for the attempt's tasks instead.
// Like raft's Ready, it says what must happen and in what order; the step
// did no Kafka I/O to make it.
type Ready struct {
	// Records are the attempt's records in produce order: every bundle's
	// outputs, then its Extra records; each task's reports after the
	// outputs they cover and before the outputs of its later records. On
	// the output topics, every run of reports with no output record
	// between them (the tasks' reports at the end of the attempt, above
	// all) is one Envelope per partition holding them all, in order
	// (Envelope.reports): Q records for the run, not one per task and
	// partition. The report topic gets one record per report. With
	// Config.Spill, Records are only those after the last Spill: the
	// first Spilled records of the attempt went to Spill.
	Records []Record
	// Spilled is how many records Spill took before Decide returned.
	Spilled int
	// State is the head's state to commit with the attempt, as records
	// (Head.Prepare at the end of Decide: a store's changelog records, a
	// Kafka source's dead letters), in order, after Records. Their keys
	// and values may point into the head's pending state: they stay valid
	// until Advance or Abort.
	State []Record
	// Offsets are the touched tasks' offsets, sorted by task.
	Offsets []Offset
	// Blocked[p] is the offset of the first record of task p that side
	// inputs held back: Offsets has it as task p's next offset, and the
	// Loop seeks the task back there and pauses it (sidegate.go).
	Blocked map[int32]int64
	// Committed are the bundles' callbacks (Bundle.Committed), in bundle
	// order; Advance calls them.
	Committed []func()
	// Bundles, ElementsIn (work elements run), ElementsOut (element
	// records produced) and ReportsOut (report records produced) count
	// the attempt.
	Bundles, ElementsIn, ElementsOut, ReportsOut uint64
	// Untrusted are the input records the attempt skipped (or of which it
	// refused reports), in batch order: their offsets are in Offsets like
	// any consumed record's. The Loop logs and counts them once the
	// transaction committed.
	Untrusted []Untrusted
	// TimestampsAhead counts the sink records whose event time their topic
	// would refuse as a timestamp, too far ahead of the wall clock (the end
	// of the global window; an early pane of a window ending tomorrow, past
	// message.timestamp.after.max.ms): written with the time of writing
	// (recordtime.For).
	TimestampsAhead uint64
}

// Empty reports whether rd holds nothing to commit: no record (spilled,
// Records or State) and no offset. The Loop then opens no transaction and
// neither acknowledges nor aborts the attempt (its head did nothing).
func (rd *Ready) Empty() bool {
	return len(rd.Offsets) == 0 && len(rd.Records) == 0 && rd.Spilled == 0 && len(rd.State) == 0
}

// Advance acknowledges rd, the Ready of the last Decide, once the
// transaction that carried it committed: the head makes the attempt's
// state durable locally (Head.Committed), then the bundles' Committed
// callbacks run, in order. It is the one call after a commit (etcd raft's
// Advance). An error is the head's: the transaction is durable in Kafka
// but the local state is suspect (the Loop stops with ErrLocalState, and
// a restart restores the state from the changelog); the callbacks have
// not run then.
func (s *Step) Advance(rd *Ready) error {
	if err := s.head.Committed(); err != nil {
		return fmt.Errorf("stage %s: head state after commit: %w", s.spec.Name, err)
	}
	for _, f := range rd.Committed {
		f()
	}
	return nil
}

// Abort drops the attempt's head state of tasks ps (Head.Aborted), after
// Decide failed or the transaction carrying its Ready did not commit; the
// Loop then rewinds those tasks to their committed offsets and
// checkpoints (RestoreTask). rd's records and callbacks are dropped with
// it.
func (s *Step) Abort(ps []int32) error {
	return s.head.Aborted(ps)
}

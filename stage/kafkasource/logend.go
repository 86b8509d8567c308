package kafkasource

import (
	"fmt"
	"time"
)

// LogEnd is what the broker said of a partition's log in one ListOffsets
// round trip (Kafka's ListOffsets, OffsetSpec latest, asked twice: once
// read_uncommitted, once read_committed). Offsets are Kafka offsets.
type LogEnd struct {
	// High is the high watermark: the offset after the last record
	// replicated to every in-sync replica (ListOffsets latest,
	// read_uncommitted). Every record below it is in the log, readable now
	// or once its transaction ends.
	High int64
	// Stable is the last stable offset: the first offset of a transaction
	// still open (ListOffsets latest, read_committed), High when none is
	// open. A read_committed consumer is handed nothing at or past it, and
	// librdkafka raises its partition EOF there.
	Stable int64
	// Asked is the wall-clock instant the request was sent: the answer
	// says nothing of what was written after it.
	Asked time.Time
}

// Reading is where one partition's consumer stands against the end of the
// partition's log: the pure core of "a partition is idle only when the
// broker holds nothing past the consumer's position that will become
// readable" (issue 21, section 2; DESIGN.md, Watermarks). It does no I/O
// and reads no clock: the loop hands it the consumer's partition EOFs
// (EOF), the records read (Record), seeks (Rewind) and ListOffsets answers
// (End). Not safe for concurrent use. The zero value knows nothing: not
// caught up, nothing confirmed.
type Reading struct {
	// eof is the offset of the latest partition EOF (hasEOF): where the
	// consumer stood when librdkafka said it was at the end.
	eof    int64
	hasEOF bool
	// next is the offset after the latest record read (hasNext).
	next    int64
	hasNext bool
	// end is the latest ListOffsets answer (hasEnd), by Asked.
	end    LogEnd
	hasEnd bool
}

// Record says the consumer read the record at offset.
func (r *Reading) Record(offset int64) {
	r.next, r.hasNext = offset+1, true
}

// EOF says librdkafka raised a partition EOF at offset (kafka.PartitionEOF:
// the consumer's fetch position when it found nothing more to fetch). The
// largest one counts.
func (r *Reading) EOF(offset int64) {
	if !r.hasEOF || offset > r.eof {
		r.eof, r.hasEOF = offset, true
	}
}

// Rewind forgets where the consumer was: it was sought back (an aborted
// attempt, a task side inputs hold back), so its EOF is stale and the
// records after its new position are to read again. A ListOffsets answer
// is kept: the log did not change.
func (r *Reading) Rewind() {
	r.hasEOF, r.hasNext = false, false
}

// End records a ListOffsets answer; an answer asked before the one kept is
// ignored (answers may come out of order).
func (r *Reading) End(e LogEnd) {
	if !r.hasEnd || !e.Asked.Before(r.end.Asked) {
		r.end, r.hasEnd = e, true
	}
}

// CaughtUp says librdkafka reports the partition at its end past the
// latest record read: a partition EOF at or past the offset after it (any
// EOF, before a record). An EOF raised before a record handled later in
// the same batch is stale:
//
//	CaughtUp ⇔ hasEOF ∧ (¬hasNext ∨ eof ≥ next)
//
// It is what librdkafka knows, not what the broker holds: see Quiet.
func (r *Reading) CaughtUp() bool {
	return r.hasEOF && (!r.hasNext || r.eof >= r.next)
}

// Position is the offset the consumer reads next, as far as the partition
// is concerned: its EOF's when caught up, else the offset after the latest
// record; false when neither is known.
func (r *Reading) Position() (int64, bool) {
	switch {
	case r.CaughtUp():
		return r.eof, true
	case r.hasNext:
		return r.next, true
	}
	return 0, false
}

// Quiet says the broker holds nothing for the partition past the
// consumer's position that will become readable, as confirmed by a
// ListOffsets answer asked at or after since (the caller's idleness
// deadline):
//
//	Quiet(since) ⇔ CaughtUp ∧ hasEnd ∧ end.Asked ≥ since ∧ end.High ≤ eof
//
// An answer from before since proves nothing of records written between
// the answer and the deadline; a high watermark past the EOF is records
// the consumer was not handed yet (a transaction open: Stable ≤ eof <
// High; a fetch not answered yet, a partition paused, a fetch stopped).
// librdkafka's EOF under read_committed comes at the last stable offset
// after skipping control records, so after a committed transaction eof =
// High and the partition may be quiet.
func (r *Reading) Quiet(since time.Time) bool {
	return r.CaughtUp() && r.hasEnd && !r.end.Asked.Before(since) && r.end.High <= r.eof
}

// QuietAt returns the instant the broker last confirmed the partition
// quiet: the latest ListOffsets answer's Asked, when it shows nothing past
// the consumer's position (Quiet's condition without a deadline):
//
//	QuietAt = end.Asked, true   if CaughtUp ∧ hasEnd ∧ end.High ≤ eof
//
// A LimitedDelay partition's watermark follows the wall clock from it: no
// record written after it can be stamped much before it.
func (r *Reading) QuietAt() (time.Time, bool) {
	if !r.CaughtUp() || !r.hasEnd || r.end.High > r.eof {
		return time.Time{}, false
	}
	return r.end.Asked, true
}

// Unconfirmed says the consumer has not confirmed the partition's end
// though the broker shows nothing past it: records were read and no
// partition EOF has come since the latest (librdkafka raises it on the
// fetch answered after them, which has not come back: a fetch not
// answered yet, or one a quota throttles for seconds), and the latest
// ListOffsets answer, asked at or after since, shows the high watermark at
// the offset after the latest record:
//
//	Unconfirmed(since) ⇔ ¬CaughtUp ∧ hasNext ∧ hasEnd ∧ end.Asked ≥ since ∧ end.High ≤ next
//
// Such a partition is not Quiet (its EOF is what confirms the end; under
// read_committed a transaction's marker takes an offset of its own, which
// only the EOF skips), so it holds the watermark until the EOF comes;
// Unconfirmed is for saying why. position is next, high the answer's.
func (r *Reading) Unconfirmed(since time.Time) (position, high int64, ok bool) {
	if r.CaughtUp() || !r.hasNext || !r.hasEnd || r.end.Asked.Before(since) || r.end.High > r.next {
		return 0, 0, false
	}
	return r.next, r.end.High, true
}

// Unread is what Unread returns: the partition holds records its consumer
// has not read, past Position up to High.
type Unread struct {
	// Position is the consumer's (see Reading.Position); Stable and High
	// the latest ListOffsets answer's.
	Position, Stable, High int64
	// Transaction: a transaction is open at or before Position (Stable ≤
	// Position < High): its records become readable when it commits.
	Transaction bool
}

// Unread returns the records the latest ListOffsets answer shows past the
// consumer's position, and false when it shows none (or nothing is known):
//
//	Unread ⇔ hasEnd ∧ Position known ∧ end.High > Position
func (r *Reading) Unread() (Unread, bool) {
	pos, ok := r.Position()
	if !ok || !r.hasEnd || r.end.High <= pos {
		return Unread{}, false
	}
	return Unread{Position: pos, Stable: r.end.Stable, High: r.end.High, Transaction: r.end.Stable <= pos}, true
}

// Because says why a partition with unread records cannot read them yet,
// for logs and the operator ("partition 1 of topic b holds records it
// cannot read yet because …"); paused says the loop has paused the
// partition's fetch.
func (u Unread) Because(paused bool) string {
	switch {
	case u.Transaction:
		return fmt.Sprintf("a transaction is open (last stable offset %d, high watermark %d)", u.Stable, u.High)
	case paused:
		return fmt.Sprintf("its fetch is paused (position %d, high watermark %d)", u.Position, u.High)
	}
	return fmt.Sprintf("its consumer has not been handed them yet (position %d, high watermark %d)", u.Position, u.High)
}

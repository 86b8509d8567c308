package gbk

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// This file is the layout of a task's state in its Store: the keys of a
// (key, window)'s meta record and of its values, and the meta record's
// encoding.

// Store keys. Every key starts with one byte saying what it holds:
//
//	'm' window key                          -> meta of (key, window)
//	'v' swindow uvarint(len(key)) key seq8  -> one value
//	'u' window key                          -> the one value of a unit entry (no 'm' record)
//	'w'                                     -> the input watermark of the last Advance
//	'f'                                     -> while an Advance owes panes (SetFireBudget): the watermarks it fires from and to, 8 bytes each
//
// window and swindow are appendWindow's 17 bytes; seq8 is a big-endian
// uint64. swindow is the entry's storage window (meta.SW): the window
// itself, except for a merging window (a session), whose values stay under
// the window the entry had when it was created while the session grows,
// so that a merge moves only the values of the smaller sessions (see Add).
//
// A unit entry (entry.unit) is the commonest (key, window) of a combine's
// GroupByKey: one accumulator, pending, never fired (unitMeta). Its meta
// is implied by its 'u' record and not stored, so the changelog gets one
// record per (key, window) and commit where it got the value and the meta,
// and one tombstone when the window fires where it got two.
const (
	prefixMeta  = 'm'
	prefixValue = 'v'
	prefixUnit  = 'u'
	keyWM       = "w"
	keyFired    = "f"
)

// meta is the persisted state of one (key, window).
type meta struct {
	// Pending counts values added since the last pane; Total counts the
	// values stored (equal when discarding).
	Pending, Total int64
	// Seq is the sequence number of the next value.
	Seq uint64
	// MinTs, MaxTs bound the timestamps of the values added since the
	// last pane (the pending ones; Core.paneTimestamp); MaxTimestamp and
	// MinTimestamp when there are none.
	MinTs, MaxTs mtime.Time
	// Fired counts the panes fired; NonSpec the non-speculative ones
	// (on-time and late; every pane of the default trigger).
	Fired, NonSpec int64
	// Closed: the trigger finished; later values of the window are dropped
	// (Beam's droppedDueToClosedWindow) until the window expires. Trig is
	// the trigger's state, one per node (Strategy.Trigger; nil for the
	// default trigger). Both are encoded after the counts only when set.
	Closed bool
	Trig   []nodeState
	// LateIn: a value now buffered arrived when the input watermark was
	// past the window's end already (its pane is LATE). Triggered only.
	LateIn bool
	// Ext: SW and Lo are stored (merging windows only; without them
	// SW is the window and Lo is 0). SW is the storage window, under which
	// the values are stored (valueKey); it never changes while the entry
	// lives, and the storage windows of a key's live entries are disjoint
	// (SW ⊆ window, and live windows of a key are disjoint). Lo is the
	// lowest sequence number a value may have: the values are
	// [Lo, Seq), in order; a merge prepends the values of earlier windows
	// below Lo. Entries of merging windows start at Lo = Seq = seqMid.
	Ext bool
	SW  Window
	Lo  uint64
}

// seqMid is the first sequence number of an entry of a merging window:
// room for 2^63 values prepended by merges and 2^63 appended.
const seqMid = 1 << 63

// flagExt, in the flags of appendTriggerState, says SW and Lo follow the
// trigger state.
const flagExt = 4

func (m *meta) encode() []byte {
	b := make([]byte, 0, 64)
	b = binary.AppendVarint(b, m.Pending)
	b = binary.AppendVarint(b, m.Total)
	b = binary.AppendUvarint(b, m.Seq)
	b = binary.AppendVarint(b, int64(m.MinTs))
	b = binary.AppendVarint(b, int64(m.MaxTs))
	b = binary.AppendVarint(b, m.Fired)
	b = binary.AppendVarint(b, m.NonSpec)
	if m.Closed || m.Trig != nil || m.LateIn || m.Ext {
		b = appendTriggerState(b, m.Closed, m.LateIn, m.Ext, m.Trig)
	}
	if m.Ext {
		b = appendWindow(b, m.SW)
		b = binary.AppendUvarint(b, m.Lo)
	}
	return b
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	var vals [7]int64
	for i := range vals {
		var n int
		if i == 2 {
			var u uint64
			u, n = binary.Uvarint(b)
			vals[i] = int64(u)
		} else {
			vals[i], n = binary.Varint(b)
		}
		if n <= 0 {
			return m, fmt.Errorf("%w: pane state record", ErrMalformed)
		}
		b = b[n:]
	}
	m.Pending, m.Total, m.Seq = vals[0], vals[1], uint64(vals[2])
	m.MinTs, m.MaxTs = mtime.Time(vals[3]), mtime.Time(vals[4])
	m.Fired, m.NonSpec = vals[5], vals[6]
	if len(b) > 0 {
		var err error
		if m.Closed, m.LateIn, m.Ext, m.Trig, b, err = decodeTriggerState(b); err != nil {
			return m, err
		}
	}
	if m.Ext {
		var err error
		if m.SW, err = parseWindow(b); err != nil {
			return m, err
		}
		b = b[windowKeyLen:]
		var n int
		if m.Lo, n = binary.Uvarint(b); n <= 0 {
			return m, fmt.Errorf("%w: pane state record: storage window", ErrMalformed)
		}
	}
	return m, nil
}

func metaKey(w Window, key []byte) []byte {
	b := make([]byte, 0, 1+windowKeyLen+len(key))
	b = append(b, prefixMeta)
	b = appendWindow(b, w)
	return append(b, key...)
}

// unitKey is the store key of the value of unit entry (key, w).
func unitKey(w Window, key []byte) []byte {
	b := make([]byte, 0, 1+windowKeyLen+len(key))
	b = append(b, prefixUnit)
	b = appendWindow(b, w)
	return append(b, key...)
}

// unitMeta is the meta of a unit entry of window w: one value (at
// sequence 0), pending, never fired, the timestamp bounds of no value
// (kept so under EndOfWindow: Core.put), no trigger state, not merging.
func unitMeta(w Window) meta {
	return meta{Pending: 1, Total: 1, Seq: 1, MinTs: mtime.MaxTimestamp, MaxTs: mtime.MinTimestamp, SW: w}
}

// isUnit says m is unitMeta(w), which a unit entry keeps unstored.
func (m *meta) isUnit(w Window) bool {
	return m.Pending == 1 && m.Total == 1 && m.Seq == 1 && m.Lo == 0 &&
		m.MinTs == mtime.MaxTimestamp && m.MaxTs == mtime.MinTimestamp &&
		m.Fired == 0 && m.NonSpec == 0 && !m.Closed && m.Trig == nil && !m.LateIn && !m.Ext && m.SW == w
}

func valuePrefix(w Window, key []byte) []byte {
	b := make([]byte, 0, 1+windowKeyLen+binary.MaxVarintLen64+len(key)+8)
	b = append(b, prefixValue)
	b = appendWindow(b, w)
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

func valueKey(w Window, key []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(valuePrefix(w, key), seq)
}

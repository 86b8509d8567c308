package userstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
)

// Store is what a Task needs of a task's store (state.Task satisfies it):
// reads see the attempt's pending writes.
type Store interface {
	Get(key []byte) ([]byte, bool, error)
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan calls fn for every key with the prefix in key order; fn must not
	// keep key or value nor write to the store.
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// Timer domains as stored.
const (
	domainEvent      byte = 0
	domainProcessing byte = 1
)

// Task is the user state and the timers of one task over its store: a pure
// core (no clock, no Kafka, no goroutine). Timers are indexed in memory
// (Load builds the index from the store); the store is the truth.
//
// The timer index (timerindex.go) keeps the pending timers in a map by
// store key and in three min-heaps: event-time timers by (fire, key),
// processing-time timers by (fire, key), every timer by hold. A heap is
// rebuilt from the store by Load (on restore and after an abort: the
// restore scans every timer anyway) rather than kept in Pebble key order,
// which would add a second key per timer to every changelog write. With n
// pending timers: SetTimer O(log n); PopDue O((k + s) log n) for k timers
// due and s stale heap entries (replaced or cleared timers, dropped as
// they surface: amortized over the writes that made them); Hold and
// NextProcessing O(1) amortized. Before the index PopDue, Hold and
// NextProcessing visited every pending timer (BenchmarkPopDue).
type Task struct {
	st Store
	// windowURN is the window coder of the stateful transform's input.
	windowURN string
	// timers are the pending timers by store key.
	timers map[string]*timer
	// idx orders the pending timers by deadline and hold.
	idx timerIndex
	// ready, when set, says whether a timer's window may fire now: its
	// side inputs are ready (SetReady). held are the timers due whose
	// window was not ready at their PopDue: still pending (they hold the
	// output watermark), out of the deadline heaps, retried first at every
	// PopDue.
	ready WindowReady
	held  []*timer
}

// WindowReady says whether the side inputs of the stateful transform are
// ready for window (encoded in the input's window coder): a timer of a
// window whose side input is not complete waits (Beam: a side input is
// read only once the window it maps to is ready). An error is the stage's.
type WindowReady func(window []byte) (bool, error)

// timer is one pending timer.
type timer struct {
	key        string // store key
	family     string
	processing bool
	fire, hold mtime.Time
	encoded    []byte
	window     []byte
	// dead: replaced, cleared or fired; its heap entries are stale.
	dead bool
}

// NewTask returns the core of a task over st; call Load before use.
func NewTask(st Store, windowCoderURN string) *Task {
	return &Task{st: st, windowURN: windowCoderURN, timers: map[string]*timer{}}
}

// SetReady makes PopDue hold back the timers of windows ready says are not
// ready (nil: every window is ready). Held timers stay pending; Held
// reports whether one has become ready since.
func (t *Task) SetReady(ready WindowReady) { t.ready = ready }

// errStop ends a Scan early.
var errStop = errors.New("userstate: stop scan")

// Load (re)builds the timer index from the store: after a restore, and
// after an abort dropped the attempt's writes.
func (t *Task) Load() error {
	t.timers = map[string]*timer{}
	t.held = nil
	if err := t.st.Scan([]byte{tagTimer}, func(k, v []byte) error {
		fam, win, err := timerFamilyWindowOf(k)
		if err != nil {
			return err
		}
		d, fire, hold, enc, err := parseTimerValue(v)
		if err != nil {
			return err
		}
		t.timers[string(k)] = &timer{key: string(k), family: fam, processing: d == domainProcessing, fire: fire, hold: hold, encoded: append([]byte{}, enc...), window: append([]byte{}, win...)}
		return nil
	}); err != nil {
		return err
	}
	t.idx.rebuild(t.timers)
	return nil
}

// base is the store prefix of user state k.
func (t *Task) base(k fnapi.UserStateKey) ([]byte, error) {
	maxTs, err := fnapi.WindowMaxTimestamp(t.windowURN, k.Window)
	if err != nil {
		return nil, fmt.Errorf("userstate: window %x of state %q: %w", k.Window, k.StateID, err)
	}
	return userBase(maxTs, k.Window, k.StateID, k.Key), nil
}

// Get answers a Get of user state k (see fnapi.UserStateKind for the
// answer of each kind). The chunks are copies.
func (t *Task) Get(k fnapi.UserStateKey) ([][]byte, error) {
	b, err := t.base(k)
	if err != nil {
		return nil, err
	}
	switch k.Kind {
	case fnapi.UserStateBag:
		return t.listGet(append(b, partBag))
	case fnapi.UserStateMultimap:
		return t.listGet(appendLP(append(b, partMultimap), k.MapKey))
	case fnapi.UserStateMultimapKeys:
		// Every map key with a count record: lp(map key) | listCount.
		var out [][]byte
		prefix := append(b, partMultimap)
		err := t.st.Scan(prefix, func(key, _ []byte) error {
			mk, rest, err := readLP(key[len(prefix):])
			if err != nil {
				return err
			}
			if len(rest) == 1 && rest[0] == listCount {
				out = append(out, append([]byte{}, mk...))
			}
			return nil
		})
		return out, err
	case fnapi.UserStateOrderedList:
		var out [][]byte
		err := t.orderedScan(b, k.Start, k.End, func(key, v []byte) error {
			out = append(out, append([]byte{}, v...))
			return nil
		})
		return out, err
	}
	return nil, fmt.Errorf("userstate: state kind %v", k.Kind)
}

// Append appends data to user state k. For an ordered list, data is one
// entry: varint(sort key) || encoded value (the Go SDK appends one entry
// per request).
func (t *Task) Append(k fnapi.UserStateKey, data []byte) error {
	b, err := t.base(k)
	if err != nil {
		return err
	}
	switch k.Kind {
	case fnapi.UserStateBag:
		return t.listAppend(append(b, partBag), data)
	case fnapi.UserStateMultimap:
		return t.listAppend(appendLP(append(b, partMultimap), k.MapKey), data)
	case fnapi.UserStateOrderedList:
		sortKey, n := binary.Uvarint(data)
		if n <= 0 {
			return fmt.Errorf("userstate: ordered list entry without a varint sort key")
		}
		p := append(b, partOrderedList)
		seq, err := t.nextSeq(p)
		if err != nil {
			return err
		}
		ek := appendInt64(append(append([]byte{}, p...), listEntry), int64(sortKey))
		return t.st.Set(binary.BigEndian.AppendUint64(ek, seq), data)
	}
	return fmt.Errorf("userstate: append to state kind %v", k.Kind)
}

// Clear clears user state k: all of a bag, one map key, all map keys, or
// the ordered list entries in [Start, End).
func (t *Task) Clear(k fnapi.UserStateKey) error {
	b, err := t.base(k)
	if err != nil {
		return err
	}
	switch k.Kind {
	case fnapi.UserStateBag:
		return t.deletePrefix(append(b, partBag))
	case fnapi.UserStateMultimap:
		return t.deletePrefix(appendLP(append(b, partMultimap), k.MapKey))
	case fnapi.UserStateMultimapKeys:
		return t.deletePrefix(append(b, partMultimap))
	case fnapi.UserStateOrderedList:
		var keys [][]byte
		if err := t.orderedScan(b, k.Start, k.End, func(key, _ []byte) error {
			keys = append(keys, append([]byte{}, key...))
			return nil
		}); err != nil {
			return err
		}
		return t.deleteAll(keys)
	}
	return fmt.Errorf("userstate: clear of state kind %v", k.Kind)
}

// orderedScan calls fn for the ordered list entries of base with
// start <= sort key < end, in sort key then append order.
func (t *Task) orderedScan(base []byte, start, end int64, fn func(key, v []byte) error) error {
	prefix := append(append(base, partOrderedList), listEntry)
	err := t.st.Scan(prefix, func(key, v []byte) error {
		rest := key[len(prefix):]
		if len(rest) != 16 {
			return fmt.Errorf("%w: ordered list key %x", errMalformedKey, key)
		}
		sk := readInt64(rest)
		if sk < start {
			return nil
		}
		if sk >= end {
			return errStop
		}
		return fn(key, v)
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// nextSeq returns the next sequence number of the list at prefix p and
// counts it.
func (t *Task) nextSeq(p []byte) (uint64, error) {
	ck := append(append([]byte{}, p...), listCount)
	v, ok, err := t.st.Get(ck)
	if err != nil {
		return 0, err
	}
	var seq uint64
	if ok {
		var n int
		if seq, n = binary.Uvarint(v); n <= 0 {
			return 0, fmt.Errorf("%w: list count %x", errMalformedKey, v)
		}
	}
	return seq, t.st.Set(ck, binary.AppendUvarint(nil, seq+1))
}

func (t *Task) listAppend(p, data []byte) error {
	seq, err := t.nextSeq(p)
	if err != nil {
		return err
	}
	return t.st.Set(binary.BigEndian.AppendUint64(append(append([]byte{}, p...), listEntry), seq), data)
}

func (t *Task) listGet(p []byte) ([][]byte, error) {
	var out [][]byte
	err := t.st.Scan(append(append([]byte{}, p...), listEntry), func(_, v []byte) error {
		out = append(out, append([]byte{}, v...))
		return nil
	})
	return out, err
}

func (t *Task) deletePrefix(p []byte) error {
	var keys [][]byte
	if err := t.st.Scan(p, func(k, _ []byte) error {
		keys = append(keys, append([]byte{}, k...))
		return nil
	}); err != nil {
		return err
	}
	return t.deleteAll(keys)
}

func (t *Task) deleteAll(keys [][]byte) error {
	for _, k := range keys {
		if err := t.st.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// GC deletes the user state of every window whose garbage-collection time
// (gbk.GCTime: max timestamp + allowed lateness, capped at the end of the
// global window, without overflow) is before the task's output watermark:
// the input watermark wm, held back by the pending timers' output
// timestamps (Hold), so a timer finds its window's state when it fires
// (Beam:
// a window's state is garbage once wm passes
// LateDataUtils.garbageCollectionTime; Java's StatefulDoFnRunner state
// cleanup). The global window's state is kept: its
// window ends only at the end of time, when the job is over. It returns
// the number of records deleted.
func (t *Task) GC(wm mtime.Time, allowedLateness mtime.Time) (int, error) {
	// At the task's output watermark, not its input's: a pending timer
	// (one side inputs hold back too) holds it at its output timestamp,
	// and its window's state must be there when it fires (Prism collects a
	// window's state once the stage's output watermark is past it).
	wm = min(wm, t.Hold())
	var keys [][]byte
	err := t.st.Scan([]byte{tagUser}, func(k, _ []byte) error {
		maxTs, err := userMaxTs(k)
		if err != nil {
			return err
		}
		if maxTs >= mtime.EndOfGlobalWindowTime || gbk.GCTime(maxTs, allowedLateness) >= wm {
			return errStop
		}
		keys = append(keys, append([]byte{}, k...))
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return 0, err
	}
	return len(keys), t.deleteAll(keys)
}

// SetTimer applies one timer the bundle set or cleared in family of
// domain processing (or event time): a set replaces the timer of the same
// (family, key, window, tag); a clear removes it. O(log n).
func (t *Task) SetTimer(family string, processing bool, tm fnapi.Timer) error {
	k := timerKey(family, tm.Key, tm.Window, tm.Tag)
	if old := t.timers[string(k)]; old != nil {
		old.dead = true
		delete(t.timers, string(k))
	}
	if tm.Clear {
		t.idx.compact(t.timers)
		return t.st.Delete(k)
	}
	d := domainEvent
	if processing {
		d = domainProcessing
	}
	nt := &timer{key: string(k), family: family, processing: processing, fire: tm.Fire, hold: tm.Hold, encoded: append([]byte{}, tm.Encoded...), window: append([]byte{}, tm.Window...)}
	t.timers[string(k)] = nt
	t.idx.push(nt)
	t.idx.compact(t.timers)
	return t.st.Set(k, timerValue(d, tm.Fire, tm.Hold, tm.Encoded))
}

// PopDue removes and returns the timers due: event-time timers with
// fire < wm (the input watermark; every one at mtime.MaxTimestamp), and,
// if processing, processing-time timers with fire <= now (ms), whose
// window is ready (SetReady; a due timer of a window not ready stays
// pending, held, and is retried first at the next PopDue). They come in
// (fire, key) order. O((k + s) log n): see Task.
func (t *Task) PopDue(wm mtime.Time, processing bool, now mtime.Time) ([]*timer, error) {
	var due []*timer
	take := func(tm *timer) error {
		if t.ready != nil {
			ok, err := t.ready(tm.window)
			if err != nil {
				return err
			}
			if !ok {
				t.held = append(t.held, tm)
				return nil
			}
		}
		due = append(due, tm)
		return nil
	}
	held := t.held
	t.held = nil
	for _, tm := range held {
		if tm.dead || tm.processing && !processing {
			if !tm.dead {
				t.held = append(t.held, tm)
			}
			continue
		}
		if err := take(tm); err != nil {
			return nil, err
		}
	}
	for {
		tm := t.idx.event.peek()
		if tm == nil || !(tm.fire < wm || wm == mtime.MaxTimestamp) {
			break
		}
		t.idx.event.pop()
		if err := take(tm); err != nil {
			return nil, err
		}
	}
	for processing {
		tm := t.idx.proc.peek()
		if tm == nil || tm.fire > now {
			break
		}
		t.idx.proc.pop()
		if err := take(tm); err != nil {
			return nil, err
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].fire != due[j].fire {
			return due[i].fire < due[j].fire
		}
		return due[i].key < due[j].key
	})
	for _, tm := range due {
		tm.dead = true
		delete(t.timers, tm.key)
		if err := t.st.Delete([]byte(tm.key)); err != nil {
			return nil, err
		}
	}
	t.idx.compact(t.timers)
	return due, nil
}

// Held reports whether a timer PopDue held back (its window's side inputs
// were not ready) is ready now: the task should be advanced to fire it.
// Linear in the held timers.
func (t *Task) Held() (ready bool, err error) {
	if t.ready == nil {
		return false, nil
	}
	for _, tm := range t.held {
		if tm.dead {
			continue
		}
		if ok, err := t.ready(tm.window); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// Hold is the earliest hold (output timestamp) of the pending timers;
// mtime.MaxTimestamp when none is pending. Beam: a set timer holds the
// output watermark of its transform at its output timestamp. O(1)
// amortized (the hold heap's top, stale entries dropped).
func (t *Task) Hold() mtime.Time {
	if tm := t.idx.holds.peek(); tm != nil {
		return tm.hold
	}
	return mtime.MaxTimestamp
}

// NextProcessing is the earliest fire time of the pending processing-time
// timers not held back; ok=false when there is none. O(1) amortized.
func (t *Task) NextProcessing() (next mtime.Time, ok bool) {
	if tm := t.idx.proc.peek(); tm != nil {
		return tm.fire, true
	}
	return mtime.MaxTimestamp, false
}

// NextEvent is the least input watermark at which PopDue returns an
// event-time timer: the earliest pending event-time timer's fire + 1
// (PopDue takes fire < wm); ok=false when there is none. O(1) amortized.
func (t *Task) NextEvent() (due mtime.Time, ok bool) {
	if tm := t.idx.event.peek(); tm != nil {
		return tm.fire + 1, true
	}
	return mtime.MaxTimestamp, false
}

// Timers is the number of pending timers.
func (t *Task) Timers() int { return len(t.timers) }

package gbk

import (
	"encoding/binary"
	"fmt"
	"strings"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// TriggerKind is one node kind of a trigger tree (beam_runner_api.proto,
// Trigger).
type TriggerKind string

// Trigger kinds.
const (
	TrigNever        TriggerKind = "never"
	TrigAlways       TriggerKind = "always"
	TrigCount        TriggerKind = "count"
	TrigProcTime     TriggerKind = "processing_time"
	TrigSyncProcTime TriggerKind = "synchronized_processing_time"
	TrigEndOfWindow  TriggerKind = "end_of_window"
	TrigAll          TriggerKind = "after_all"
	TrigAny          TriggerKind = "after_any"
	TrigEach         TriggerKind = "after_each"
	TrigRepeat       TriggerKind = "repeat"
	TrigOrFinally    TriggerKind = "or_finally"
)

// Trigger is a non-default trigger tree. Its state per (key, window) is one
// nodeState per node, in preorder (Trigger.index).
type Trigger struct {
	Kind TriggerKind
	// Count is the element count (TrigCount).
	Count int64
	// Delay (ms) and AlignPeriod, AlignOffset (ms; period 0 = none) are the
	// processing-time transforms of TrigProcTime, applied in order.
	Transforms []TimeTransform
	// Subs: AfterAll/AfterAny/AfterEach subtriggers; Repeat [sub];
	// OrFinally [main, finally]; EndOfWindow [early, late], either nil.
	Subs []*Trigger

	index int // preorder position
}

// TimeTransform is one step of an AfterProcessingTime trigger's firing time:
// t + Delay, then, if AlignPeriod > 0, up to the next multiple of the
// period after t (shifted by AlignOffset). Units: ms.
type TimeTransform struct {
	Delay, AlignPeriod, AlignOffset int64
}

// nodeState is one trigger node's state for one (key, window).
type nodeState struct {
	// finished: the node fired for the last time (until a Repeat resets it).
	finished bool
	// count: elements since the node was (re)set (Count, Always); armed
	// (count > 0) for SyncProcTime; for EndOfWindow 1 once its on-time
	// firing happened.
	count int64
	// fireAt: processing time (ms) an AfterProcessingTime node fires at;
	// 0 = not set (no element yet).
	fireAt int64
}

// triggerCtx is what a trigger sees when evaluated.
type triggerCtx struct {
	eow     bool  // the input watermark is past the window's max timestamp
	now     int64 // processing time, ms
	element bool  // evaluated after an element (not at an Advance)
	// merging: the window fn merges (sessions): AfterEndOfWindow runs its
	// early and late sides in parallel, as Beam's AfterWatermarkStateMachine
	// does when merges are possible, so that a merge that revives the early
	// side, or ends it, finds the state each side would have had
	// (mergeState).
	merging bool
}

func (t *Trigger) nodes() int {
	n := 1
	for _, s := range t.Subs {
		if s != nil {
			n += s.nodes()
		}
	}
	return n
}

func (t *Trigger) number(next int) int {
	t.index = next
	next++
	for _, s := range t.Subs {
		if s != nil {
			next = s.number(next)
		}
	}
	return next
}

// String is the trigger in Beam's builder notation.
func (t *Trigger) String() string {
	if t == nil {
		return "nil"
	}
	var subs []string
	for _, s := range t.Subs {
		subs = append(subs, s.String())
	}
	switch t.Kind {
	case TrigCount:
		return fmt.Sprintf("AfterCount(%d)", t.Count)
	case TrigProcTime:
		return fmt.Sprintf("AfterProcessingTime%v", t.Transforms)
	case TrigEndOfWindow:
		return fmt.Sprintf("AfterEndOfWindow(early=%s, late=%s)", subs[0], subs[1])
	}
	return fmt.Sprintf("%s(%s)", t.Kind, strings.Join(subs, ", "))
}

// parseTrigger reads a proto trigger; default=true says the root is
// Beam's default trigger (the core's own default path).
func parseTrigger(p *pipepb.Trigger) (*Trigger, error) {
	subs := func(ps []*pipepb.Trigger) ([]*Trigger, error) {
		var out []*Trigger
		for _, sp := range ps {
			s, err := parseTrigger(sp)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	switch t := p.GetTrigger().(type) {
	case *pipepb.Trigger_Never_:
		return &Trigger{Kind: TrigNever}, nil
	case *pipepb.Trigger_Always_:
		return &Trigger{Kind: TrigAlways}, nil
	case *pipepb.Trigger_ElementCount_:
		return &Trigger{Kind: TrigCount, Count: int64(t.ElementCount.GetElementCount())}, nil
	case *pipepb.Trigger_AfterProcessingTime_:
		out := &Trigger{Kind: TrigProcTime}
		for _, tt := range t.AfterProcessingTime.GetTimestampTransforms() {
			switch x := tt.GetTimestampTransform().(type) {
			case *pipepb.TimestampTransform_Delay_:
				out.Transforms = append(out.Transforms, TimeTransform{Delay: x.Delay.GetDelayMillis()})
			case *pipepb.TimestampTransform_AlignTo_:
				out.Transforms = append(out.Transforms, TimeTransform{AlignPeriod: x.AlignTo.GetPeriod(), AlignOffset: x.AlignTo.GetOffset()})
			default:
				return nil, fmt.Errorf("timestamp transform %v", tt)
			}
		}
		return out, nil
	case *pipepb.Trigger_AfterSynchronizedProcessingTime_:
		return &Trigger{Kind: TrigSyncProcTime}, nil
	case *pipepb.Trigger_Default_:
		// Nested: Repeatedly(AfterWatermark) = AfterEndOfWindow with late Always.
		return &Trigger{Kind: TrigEndOfWindow, Subs: []*Trigger{nil, {Kind: TrigAlways}}}, nil
	case *pipepb.Trigger_AfterEndOfWindow_:
		out := &Trigger{Kind: TrigEndOfWindow, Subs: []*Trigger{nil, nil}}
		for i, sp := range []*pipepb.Trigger{t.AfterEndOfWindow.GetEarlyFirings(), t.AfterEndOfWindow.GetLateFirings()} {
			if sp == nil {
				continue
			}
			s, err := parseTrigger(sp)
			if err != nil {
				return nil, err
			}
			out.Subs[i] = s
		}
		return out, nil
	case *pipepb.Trigger_AfterAll_:
		s, err := subs(t.AfterAll.GetSubtriggers())
		return &Trigger{Kind: TrigAll, Subs: s}, err
	case *pipepb.Trigger_AfterAny_:
		s, err := subs(t.AfterAny.GetSubtriggers())
		return &Trigger{Kind: TrigAny, Subs: s}, err
	case *pipepb.Trigger_AfterEach_:
		s, err := subs(t.AfterEach.GetSubtriggers())
		return &Trigger{Kind: TrigEach, Subs: s}, err
	case *pipepb.Trigger_Repeat_:
		s, err := parseTrigger(t.Repeat.GetSubtrigger())
		return &Trigger{Kind: TrigRepeat, Subs: []*Trigger{s}}, err
	case *pipepb.Trigger_OrFinally_:
		m, err := parseTrigger(t.OrFinally.GetMain())
		if err != nil {
			return nil, err
		}
		f, err := parseTrigger(t.OrFinally.GetFinally())
		return &Trigger{Kind: TrigOrFinally, Subs: []*Trigger{m, f}}, err
	}
	return nil, fmt.Errorf("trigger %v", p)
}

// The state machine below follows Beam's TriggerStateMachines (Java
// runners-core), evaluated per (key, window): onElement for every value,
// then shouldFire; if it fires, a pane is emitted (if any value is
// pending) and onFire moves the state on; a root that finishes closes the
// window. Rules, per node kind (s = the node's state):
//
//	Never:        shouldFire = false
//	Always:       shouldFire ⇔ count ≥ 1; onFire: count = 0 (never finishes)
//	Count(n):     shouldFire ⇔ count ≥ n; onFire: finished
//	ProcTime:     first element sets fireAt = transforms(now);
//	              shouldFire ⇔ fireAt ≠ 0 ∧ now ≥ fireAt; onFire: finished
//	SyncProcTime: first element arms it; shouldFire ⇔ armed ∧ evaluated at
//	              an Advance (every upstream transaction that carried the
//	              element has been read: the synchronized processing time
//	              passed the element's); onFire: finished
//	EndOfWindow:  before the end of the window: shouldFire ⇔ early fires;
//	              at it: shouldFire (the on-time firing, once); after it:
//	              shouldFire ⇔ late fires; finished after the on-time firing
//	              if there is no late trigger. Early and late are repeated
//	              (reset when they finish).
//	AfterAll:     shouldFire ⇔ every unfinished sub fires; onFire: fire
//	              them, finished
//	AfterAny:     shouldFire ⇔ some sub fires; onFire: fire those, finished
//	AfterEach:    the first unfinished sub decides; finished with the last
//	Repeat(t):    shouldFire ⇔ t fires; onFire: t fires, reset if finished
//	OrFinally(m,f): shouldFire ⇔ m ∨ f fires; onFire: if f fires, finished;
//	              else m fires, finished if m finished
//
// Only the active part of a tree sees elements: AfterEach's current sub,
// EndOfWindow's early or late side (both, with merging windows:
// triggerCtx.merging); finished nodes see nothing. When windows merge, the
// merged window's state is mergeState's (trigger_merge.go).

func (t *Trigger) onElement(st []nodeState, c triggerCtx) {
	s := &st[t.index]
	if s.finished {
		return
	}
	switch t.Kind {
	case TrigAlways, TrigCount, TrigSyncProcTime:
		s.count++
	case TrigProcTime:
		if s.fireAt == 0 {
			s.fireAt = t.firingTime(c.now)
		}
	case TrigEndOfWindow:
		if c.merging {
			for _, sub := range t.Subs {
				if sub != nil {
					sub.onElement(st, c)
				}
			}
		} else if sub := t.eowActive(st, c); sub != nil {
			sub.onElement(st, c)
		}
	case TrigEach:
		if sub := t.eachCurrent(st); sub != nil {
			sub.onElement(st, c)
		}
	default:
		for _, sub := range t.Subs {
			sub.onElement(st, c)
		}
	}
}

// firingTime applies the processing-time transforms to now (ms).
func (t *Trigger) firingTime(now int64) int64 {
	ts := now
	for _, tr := range t.Transforms {
		ts += tr.Delay
		if tr.AlignPeriod > 0 {
			adj := ts - tr.AlignOffset
			ts = adj - mod(adj, tr.AlignPeriod) + tr.AlignPeriod + tr.AlignOffset
		}
	}
	if ts == 0 {
		ts = 1 // 0 means unset
	}
	return ts
}

func mod(a, b int64) int64 { return ((a % b) + b) % b }

// eowActive is the EndOfWindow node's side that sees elements now: early
// before the end of the window, late after its on-time firing.
func (t *Trigger) eowActive(st []nodeState, c triggerCtx) *Trigger {
	if !c.eow {
		return t.Subs[0]
	}
	if st[t.index].count > 0 {
		return t.Subs[1]
	}
	return nil
}

func (t *Trigger) eachCurrent(st []nodeState) *Trigger {
	for _, sub := range t.Subs {
		if !st[sub.index].finished {
			return sub
		}
	}
	return nil
}

func (t *Trigger) shouldFire(st []nodeState, c triggerCtx) bool {
	s := st[t.index]
	if s.finished {
		return false
	}
	switch t.Kind {
	case TrigNever:
		return false
	case TrigAlways:
		return s.count >= 1
	case TrigCount:
		return s.count >= t.Count
	case TrigProcTime:
		return s.fireAt != 0 && c.now >= s.fireAt
	case TrigSyncProcTime:
		return s.count > 0 && !c.element
	case TrigEndOfWindow:
		if !c.eow {
			return t.Subs[0] != nil && t.Subs[0].shouldFire(st, c)
		}
		if s.count == 0 {
			return true // the on-time firing
		}
		return t.Subs[1] != nil && t.Subs[1].shouldFire(st, c)
	case TrigAll:
		for _, sub := range t.Subs {
			if !st[sub.index].finished && !sub.shouldFire(st, c) {
				return false
			}
		}
		return true
	case TrigAny:
		for _, sub := range t.Subs {
			if sub.shouldFire(st, c) {
				return true
			}
		}
		return false
	case TrigEach:
		sub := t.eachCurrent(st)
		return sub != nil && sub.shouldFire(st, c)
	case TrigRepeat:
		return t.Subs[0].shouldFire(st, c)
	case TrigOrFinally:
		return t.Subs[0].shouldFire(st, c) || t.Subs[1].shouldFire(st, c)
	}
	return false
}

// onFire moves the state on after a firing; call only if shouldFire.
func (t *Trigger) onFire(st []nodeState, c triggerCtx) {
	s := &st[t.index]
	switch t.Kind {
	case TrigAlways:
		s.count = 0
	case TrigCount, TrigProcTime, TrigSyncProcTime:
		s.finished = true
	case TrigEndOfWindow:
		switch {
		case !c.eow:
			t.fireRepeated(t.Subs[0], st, c)
		case s.count == 0:
			s.count = 1
			if t.Subs[0] != nil {
				t.Subs[0].reset(st)
			}
			if c.merging && t.Subs[1] != nil {
				// The late side ran in parallel: it starts now.
				t.Subs[1].reset(st)
			}
			if t.Subs[1] == nil {
				s.finished = true
			}
		default:
			t.fireRepeated(t.Subs[1], st, c)
		}
	case TrigAll, TrigAny:
		for _, sub := range t.Subs {
			if sub.shouldFire(st, c) {
				sub.onFire(st, c)
			}
		}
		s.finished = true
	case TrigEach:
		sub := t.eachCurrent(st)
		sub.onFire(st, c)
		if st[sub.index].finished && sub == t.Subs[len(t.Subs)-1] {
			s.finished = true
		}
	case TrigRepeat:
		t.fireRepeated(t.Subs[0], st, c)
	case TrigOrFinally:
		if t.Subs[1].shouldFire(st, c) {
			t.Subs[1].onFire(st, c)
			s.finished = true
			return
		}
		t.Subs[0].onFire(st, c)
		if st[t.Subs[0].index].finished {
			s.finished = true
		}
	}
}

// fireRepeated fires sub and resets it if it finished (a repeated sub).
func (t *Trigger) fireRepeated(sub *Trigger, st []nodeState, c triggerCtx) {
	sub.onFire(st, c)
	if st[sub.index].finished {
		sub.reset(st)
	}
}

// reset clears the state of t's subtree.
func (t *Trigger) reset(st []nodeState) {
	st[t.index] = nodeState{}
	for _, sub := range t.Subs {
		if sub != nil {
			sub.reset(st)
		}
	}
}

// appendTriggerState encodes closed, lateIn and the node states after a
// meta: uvarint(closed | lateIn<<1 | ext<<2), uvarint(nodes), then per node
// uvarint(finished), varint(count), varint(fireAt). ext (flagExt) says the
// meta's storage window and Lo follow (meta.encode); decodeTriggerState
// returns the bytes after the node states as rest.
func appendTriggerState(b []byte, closed, lateIn, ext bool, st []nodeState) []byte {
	f := uint64(0)
	if closed {
		f = 1
	}
	if lateIn {
		f |= 2
	}
	if ext {
		f |= flagExt
	}
	b = binary.AppendUvarint(b, f)
	b = binary.AppendUvarint(b, uint64(len(st)))
	for _, s := range st {
		f := uint64(0)
		if s.finished {
			f = 1
		}
		b = binary.AppendUvarint(b, f)
		b = binary.AppendVarint(b, s.count)
		b = binary.AppendVarint(b, s.fireAt)
	}
	return b
}

func decodeTriggerState(b []byte) (closed, lateIn, ext bool, st []nodeState, rest []byte, err error) {
	bad := fmt.Errorf("%w: trigger state record", ErrMalformed)
	f, n := binary.Uvarint(b)
	if n <= 0 {
		return false, false, false, nil, nil, bad
	}
	b = b[n:]
	cnt, n := binary.Uvarint(b)
	if n <= 0 || cnt > 1<<16 {
		return false, false, false, nil, nil, bad
	}
	b = b[n:]
	st = make([]nodeState, cnt)
	for i := range st {
		fl, n := binary.Uvarint(b)
		if n <= 0 {
			return false, false, false, nil, nil, bad
		}
		b = b[n:]
		c, n := binary.Varint(b)
		if n <= 0 {
			return false, false, false, nil, nil, bad
		}
		b = b[n:]
		at, n := binary.Varint(b)
		if n <= 0 {
			return false, false, false, nil, nil, bad
		}
		b = b[n:]
		st[i] = nodeState{finished: fl == 1, count: c, fireAt: at}
	}
	return f&1 == 1, f&2 == 2, f&flagExt != 0, st, b, nil
}

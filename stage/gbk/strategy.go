package gbk

import (
	"errors"
	"fmt"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// Sentinel errors.
var (
	// ErrUnsupported: the windowing strategy uses a feature this runner does
	// not execute; the message names the transform and the feature. Not
	// retryable: the pipeline is refused before any topic is created.
	ErrUnsupported = errors.New("gbk: not supported by the kafkastreams runner")
	// ErrMalformed: the pipeline or an element does not decode.
	ErrMalformed = errors.New("gbk: malformed")
)

// Window fn URNs (beam_runner_api.proto, StandardWindowFns).
const (
	URNGlobalWindows  = "beam:window_fn:global_windows:v1"
	URNFixedWindows   = "beam:window_fn:fixed_windows:v1"
	URNSlidingWindows = "beam:window_fn:sliding_windows:v1"
	URNSessions       = "beam:window_fn:session_windows:v1"
)

// WindowFnKind is the kind of window fn of a GroupByKey's input.
type WindowFnKind string

// Window fn kinds.
const (
	GlobalWindows  WindowFnKind = "global"
	FixedWindows   WindowFnKind = "fixed"
	SlidingWindows WindowFnKind = "sliding"
	Sessions       WindowFnKind = "sessions"
)

// TimestampCombiner says which timestamp a fired pane gets (Beam's
// OutputTime / TimestampCombiner).
type TimestampCombiner string

// Timestamp combiners.
const (
	// EndOfWindow: the window's max timestamp (Beam's default).
	EndOfWindow TimestampCombiner = "end_of_window"
	// EarliestInPane: the earliest timestamp of the pane's values.
	EarliestInPane TimestampCombiner = "earliest"
	// LatestInPane: the latest timestamp of the pane's values.
	LatestInPane TimestampCombiner = "latest"
)

// Strategy is the windowing strategy of a GroupByKey's input PCollection, as
// far as the runner acts on it.
type Strategy struct {
	Kind WindowFnKind
	// Gap is the session gap in ms (Sessions only). Elements arrive in
	// proto-sessions [ts, ts+Gap) assigned by the SDK; the core merges them.
	Gap int64
	// AllowedLateness in ms (WindowingStrategy.allowed_lateness, ms too);
	// 0 by default: data behind the watermark is dropped.
	AllowedLateness int64
	// Accumulating keeps fired values for later (late) panes of the same
	// window; discarding (the default) drops them once fired.
	Accumulating bool
	// Combiner is the pane timestamp rule. Default EndOfWindow.
	Combiner TimestampCombiner
	// Trigger is nil for Beam's default trigger (fire once when the
	// watermark passes the end of the window, then once per Advance that
	// finds late values within the allowed lateness: Core.Advance), else
	// the trigger tree the core evaluates per element and per Advance
	// (trigger.go, triggered.go); with merging windows, the merged window's
	// state is the merge of its parts' (trigger_merge.go).
	Trigger *Trigger
	// OnTimeAlways: the ON_TIME pane is emitted even when it holds no
	// value (WindowingStrategy.on_time_behavior FIRE_ALWAYS; Beam Java
	// Window.OnTimeBehavior.FIRE_ALWAYS, ReduceFnRunner.needToEmit), e.g.
	// when every value went out in early panes in discarding mode; else
	// only if non-empty (FIRE_IF_NONEMPTY, and UNSPECIFIED).
	OnTimeAlways bool
	// ClosingAlways: the final pane, when the window closes (it expires,
	// or its trigger finishes), is emitted even when it holds no value
	// (WindowingStrategy.closing_behavior EMIT_ALWAYS; Beam Java
	// Window.ClosingBehavior.FIRE_ALWAYS, ReduceFnRunner.needToEmit);
	// else only if non-empty (EMIT_IF_NONEMPTY, and UNSPECIFIED).
	ClosingAlways bool
}

// Merging reports whether windows merge (session windows).
func (s Strategy) Merging() bool { return s.Kind == Sessions }

// ParseStrategy reads ws, the windowing strategy of the input of the
// GroupByKey transform named name (for error messages). It refuses, with
// ErrUnsupported naming the transform and the feature, triggers it cannot
// parse, window fns other than global, fixed, sliding and sessions,
// merge statuses other than the window fn's own, and retracting
// accumulation. allowMerging=false also refuses session windows.
func ParseStrategy(name string, ws *pipepb.WindowingStrategy, allowMerging bool) (Strategy, error) {
	fail := func(format string, args ...any) (Strategy, error) {
		return Strategy{}, fmt.Errorf("%w: GroupByKey %s: %s", ErrUnsupported, name, fmt.Sprintf(format, args...))
	}
	if ws == nil {
		return Strategy{}, fmt.Errorf("%w: GroupByKey %s: no windowing strategy", ErrMalformed, name)
	}
	s := Strategy{AllowedLateness: ws.GetAllowedLateness()}
	if s.AllowedLateness < 0 {
		return fail("negative allowed lateness %d ms", s.AllowedLateness)
	}
	wfn := ws.GetWindowFn()
	switch wfn.GetUrn() {
	case URNGlobalWindows:
		s.Kind = GlobalWindows
	case URNFixedWindows:
		s.Kind = FixedWindows
	case URNSlidingWindows:
		s.Kind = SlidingWindows
	case URNSessions:
		s.Kind = Sessions
		p := &pipepb.SessionWindowsPayload{}
		if err := proto.Unmarshal(wfn.GetPayload(), p); err != nil {
			return Strategy{}, fmt.Errorf("%w: GroupByKey %s: session window payload: %v", ErrMalformed, name, err)
		}
		s.Gap = p.GetGapSize().AsDuration().Milliseconds()
		if !allowMerging {
			return fail("session (merging) windows are not implemented yet")
		}
	default:
		return fail("window fn %q is not supported (global, fixed, sliding and session windows are)", wfn.GetUrn())
	}
	wantMerge := pipepb.MergeStatus_NON_MERGING
	if s.Kind == Sessions {
		wantMerge = pipepb.MergeStatus_NEEDS_MERGE
	}
	if m := ws.GetMergeStatus(); m != wantMerge && !(s.Kind == Sessions && m == pipepb.MergeStatus_ALREADY_MERGED) {
		return fail("merge status %v with window fn %s is not supported", m, s.Kind)
	}
	if _, ok := ws.GetTrigger().GetTrigger().(*pipepb.Trigger_Default_); !ok {
		t, err := parseTrigger(ws.GetTrigger())
		if err != nil {
			return fail("%v is not supported", err)
		}
		t.number(0)
		s.Trigger = t
	}
	switch ws.GetAccumulationMode() {
	case pipepb.AccumulationMode_DISCARDING, pipepb.AccumulationMode_UNSPECIFIED:
	case pipepb.AccumulationMode_ACCUMULATING:
		s.Accumulating = true
	default:
		return fail("accumulation mode %v is not supported", ws.GetAccumulationMode())
	}
	switch ws.GetOutputTime() {
	case pipepb.OutputTime_END_OF_WINDOW, pipepb.OutputTime_UNSPECIFIED:
		s.Combiner = EndOfWindow
	case pipepb.OutputTime_EARLIEST_IN_PANE:
		s.Combiner = EarliestInPane
	case pipepb.OutputTime_LATEST_IN_PANE:
		s.Combiner = LatestInPane
	default:
		return fail("output time %v is not supported", ws.GetOutputTime())
	}
	// Empty panes (Beam Java ReduceFnRunner.needToEmit): a firing with no
	// value to emit (discarding: none since the last pane; Core.Advance,
	// evaluate) still emits its pane if it is the ON_TIME one under
	// FIRE_ALWAYS, or the final one under EMIT_ALWAYS. Go sets
	// FIRE_IF_NONEMPTY and EMIT_IF_NONEMPTY for user windows; the Java
	// SDK's Window defaults to FIRE_ALWAYS, so a job server's pipelines
	// have it. UNSPECIFIED is taken as the non-empty rule (this core's
	// behaviour before either was read).
	switch ws.GetOnTimeBehavior() {
	case pipepb.OnTimeBehavior_FIRE_IF_NONEMPTY, pipepb.OnTimeBehavior_UNSPECIFIED:
	case pipepb.OnTimeBehavior_FIRE_ALWAYS:
		s.OnTimeAlways = true
	default:
		return fail("on-time behavior %v is not supported", ws.GetOnTimeBehavior())
	}
	switch ws.GetClosingBehavior() {
	case pipepb.ClosingBehavior_EMIT_IF_NONEMPTY, pipepb.ClosingBehavior_UNSPECIFIED:
	case pipepb.ClosingBehavior_EMIT_ALWAYS:
		s.ClosingAlways = true
	default:
		return fail("closing behavior %v is not supported", ws.GetClosingBehavior())
	}
	return s, nil
}

// String is a one-line description for logs.
func (s Strategy) String() string {
	acc := "discarding"
	if s.Accumulating {
		acc = "accumulating"
	}
	trig := "default trigger"
	if s.Trigger != nil {
		trig = "trigger " + s.Trigger.String()
	}
	out := fmt.Sprintf("%s windows, %s, %s, timestamp %s, allowed lateness %v", s.Kind, trig, acc, s.Combiner, time.Duration(s.AllowedLateness)*time.Millisecond)
	if s.Kind == Sessions {
		out += fmt.Sprintf(", gap %v", time.Duration(s.Gap)*time.Millisecond)
	}
	if s.OnTimeAlways {
		out += ", empty on-time pane"
	}
	if s.ClosingAlways {
		out += ", empty final pane"
	}
	return out
}

// expiry is the last input watermark at which data of window w is kept:
//
//	expired(w, wm) ⇔ GCTime(w.MaxTimestamp(), allowedLateness) < wm
func (s Strategy) expiry(w Window) mtime.Time {
	return GCTime(w.MaxTimestamp(), mtime.Time(s.AllowedLateness))
}

// GCTime is the garbage-collection time of a window whose max timestamp is
// maxTs under allowed lateness lateness (mtime.Time, ms, >= 0): the window
// expires, its state is deleted and late data for it dropped, once the
// input watermark is past it. It is maxTs + lateness, capped at the end of
// the global window (mtime.EndOfGlobalWindowTime), so that every window,
// the global one under any lateness too, expires when the watermark
// reaches the end of time (Beam: LateDataUtils.garbageCollectionTime).
// Computed without overflow for any lateness an SDK may send.
func GCTime(maxTs, lateness mtime.Time) mtime.Time {
	if lateness < 0 {
		lateness = 0
	}
	if maxTs > mtime.EndOfGlobalWindowTime-lateness {
		return mtime.EndOfGlobalWindowTime
	}
	return maxTs + lateness
}

// WindowEnds returns, for windowing strategy ws, next: the least end of
// one of its windows after wm (mtime.Time, ms; Beam: a window's
// MaxTimestamp + 1, the input watermark at which a GroupByKey fires it
// under the default trigger), ok false past the last end before the end
// of time. For fixed windows of size s and offset o the ends are o + k·s,
// for sliding windows of size s, period q and offset o they are
// o + s + k·q (k any integer; Beam's FixedWindows and SlidingWindows):
//
//	next(wm) = wm − ((wm − r) mod q) + q,  mod in [0, q)
//
// with r the ends' residue and q their spacing. WindowEnds' own ok is
// false for the other window fns (global: one window, which ends with the
// end of time; sessions: their ends depend on the data) and for a payload
// that does not decode or a non-positive size or period. The stage loop of
// the stage writing a GroupByKey's input commits early at those ends
// (stage.Config.NextWindowEnd).
func WindowEnds(ws *pipepb.WindowingStrategy) (next func(wm mtime.Time) (mtime.Time, bool), ok bool) {
	var r, q int64
	wfn := ws.GetWindowFn()
	switch wfn.GetUrn() {
	case URNFixedWindows:
		p := &pipepb.FixedWindowsPayload{}
		if proto.Unmarshal(wfn.GetPayload(), p) != nil {
			return nil, false
		}
		q, r = p.GetSize().AsDuration().Milliseconds(), p.GetOffset().AsTime().UnixMilli()
	case URNSlidingWindows:
		p := &pipepb.SlidingWindowsPayload{}
		if proto.Unmarshal(wfn.GetPayload(), p) != nil {
			return nil, false
		}
		q, r = p.GetPeriod().AsDuration().Milliseconds(), p.GetOffset().AsTime().UnixMilli()+p.GetSize().AsDuration().Milliseconds()
	default:
		return nil, false
	}
	if q <= 0 {
		return nil, false
	}
	r %= q
	return func(wm mtime.Time) (mtime.Time, bool) {
		if wm >= mtime.MaxTimestamp-mtime.Time(q) {
			return 0, false
		}
		m := (int64(wm) - r) % q
		if m < 0 {
			m += q
		}
		return wm - mtime.Time(m) + mtime.Time(q), true
	}, true
}

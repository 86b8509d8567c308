package gbk

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestParseStrategy(t *testing.T) {
	def := &pipepb.Trigger{Trigger: &pipepb.Trigger_Default_{Default: &pipepb.Trigger_Default{}}}
	sessions, _ := proto.Marshal(&pipepb.SessionWindowsPayload{GapSize: durationpb.New(time.Minute)})
	ws := func(urn string, payload []byte, merge pipepb.MergeStatus_Enum, mod func(*pipepb.WindowingStrategy)) *pipepb.WindowingStrategy {
		w := &pipepb.WindowingStrategy{WindowFn: &pipepb.FunctionSpec{Urn: urn, Payload: payload}, MergeStatus: merge, Trigger: def,
			AccumulationMode: pipepb.AccumulationMode_DISCARDING, OutputTime: pipepb.OutputTime_END_OF_WINDOW, OnTimeBehavior: pipepb.OnTimeBehavior_FIRE_IF_NONEMPTY}
		if mod != nil {
			mod(w)
		}
		return w
	}
	for _, tc := range []struct {
		name    string
		ws      *pipepb.WindowingStrategy
		merging bool
		want    Strategy
		err     string // substring of an ErrUnsupported error
	}{
		{name: "global", ws: ws(URNGlobalWindows, nil, pipepb.MergeStatus_NON_MERGING, nil), want: Strategy{Kind: GlobalWindows, Combiner: EndOfWindow}},
		{name: "fixed accumulating late earliest", ws: ws(URNFixedWindows, nil, pipepb.MergeStatus_NON_MERGING, func(w *pipepb.WindowingStrategy) {
			w.AccumulationMode = pipepb.AccumulationMode_ACCUMULATING
			w.AllowedLateness = 3000
			w.OutputTime = pipepb.OutputTime_EARLIEST_IN_PANE
		}), want: Strategy{Kind: FixedWindows, Accumulating: true, AllowedLateness: 3000, Combiner: EarliestInPane}},
		{name: "sessions", ws: ws(URNSessions, sessions, pipepb.MergeStatus_NEEDS_MERGE, nil), merging: true, want: Strategy{Kind: Sessions, Gap: 60000, Combiner: EndOfWindow}},
		{name: "sessions refused", ws: ws(URNSessions, sessions, pipepb.MergeStatus_NEEDS_MERGE, nil), err: "session (merging) windows"},
		{name: "retracting", ws: ws(URNGlobalWindows, nil, pipepb.MergeStatus_NON_MERGING, func(w *pipepb.WindowingStrategy) {
			w.AccumulationMode = pipepb.AccumulationMode_RETRACTING
		}), err: "accumulation mode"},
		{name: "java defaults: empty on-time pane", ws: ws(URNFixedWindows, nil, pipepb.MergeStatus_NON_MERGING, func(w *pipepb.WindowingStrategy) {
			w.OnTimeBehavior = pipepb.OnTimeBehavior_FIRE_ALWAYS
			w.ClosingBehavior = pipepb.ClosingBehavior_EMIT_IF_NONEMPTY
		}), want: Strategy{Kind: FixedWindows, Combiner: EndOfWindow, OnTimeAlways: true}},
		{name: "empty final pane", ws: ws(URNFixedWindows, nil, pipepb.MergeStatus_NON_MERGING, func(w *pipepb.WindowingStrategy) {
			w.ClosingBehavior = pipepb.ClosingBehavior_EMIT_ALWAYS
		}), want: Strategy{Kind: FixedWindows, Combiner: EndOfWindow, ClosingAlways: true}},
		{name: "custom window fn", ws: ws("beam:window_fn:custom:v1", nil, pipepb.MergeStatus_NON_MERGING, nil), err: "window fn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStrategy("T", tc.ws, tc.merging)
			if tc.err != "" {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "GroupByKey T") {
					t.Fatalf("err = %v, want ErrUnsupported naming GroupByKey T and %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	// A non-default trigger on session windows is executed (its state
	// merges with the windows: trigger_merge.go), no longer refused.
	got, err := ParseStrategy("T", ws(URNSessions, sessions, pipepb.MergeStatus_NEEDS_MERGE, func(w *pipepb.WindowingStrategy) {
		w.Trigger = &pipepb.Trigger{Trigger: &pipepb.Trigger_Always_{Always: &pipepb.Trigger_Always{}}}
	}), true)
	if err != nil || got.Kind != Sessions || got.Trigger == nil || got.Trigger.Kind != TrigAlways {
		t.Fatalf("trigger with sessions: got %+v, %v; want session windows with trigger Always", got, err)
	}
}

// TestParseTrigger: every trigger of the Beam model parses into the tree the
// core evaluates, numbered in preorder.
func TestParseTrigger(t *testing.T) {
	count := func(n int32) *pipepb.Trigger {
		return &pipepb.Trigger{Trigger: &pipepb.Trigger_ElementCount_{ElementCount: &pipepb.Trigger_ElementCount{ElementCount: n}}}
	}
	always := &pipepb.Trigger{Trigger: &pipepb.Trigger_Always_{Always: &pipepb.Trigger_Always{}}}
	never := &pipepb.Trigger{Trigger: &pipepb.Trigger_Never_{Never: &pipepb.Trigger_Never{}}}
	ptime := &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterProcessingTime_{AfterProcessingTime: &pipepb.Trigger_AfterProcessingTime{TimestampTransforms: []*pipepb.TimestampTransform{
		{TimestampTransform: &pipepb.TimestampTransform_Delay_{Delay: &pipepb.TimestampTransform_Delay{DelayMillis: 5000}}},
		{TimestampTransform: &pipepb.TimestampTransform_AlignTo_{AlignTo: &pipepb.TimestampTransform_AlignTo{Period: 1000, Offset: 10}}},
	}}}}
	sync := &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterSynchronizedProcessingTime_{AfterSynchronizedProcessingTime: &pipepb.Trigger_AfterSynchronizedProcessingTime{}}}
	eow := &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEndOfWindow_{AfterEndOfWindow: &pipepb.Trigger_AfterEndOfWindow{EarlyFirings: count(2), LateFirings: ptime}}}
	tree := &pipepb.Trigger{Trigger: &pipepb.Trigger_OrFinally_{OrFinally: &pipepb.Trigger_OrFinally{
		Main: &pipepb.Trigger{Trigger: &pipepb.Trigger_Repeat_{Repeat: &pipepb.Trigger_Repeat{Subtrigger: &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterAny_{AfterAny: &pipepb.Trigger_AfterAny{Subtriggers: []*pipepb.Trigger{always, sync}}}}}}},
		Finally: &pipepb.Trigger{Trigger: &pipepb.Trigger_AfterEach_{AfterEach: &pipepb.Trigger_AfterEach{Subtriggers: []*pipepb.Trigger{
			{Trigger: &pipepb.Trigger_AfterAll_{AfterAll: &pipepb.Trigger_AfterAll{Subtriggers: []*pipepb.Trigger{eow, never}}}}, count(7)}}}},
	}}}
	got, err := parseTrigger(tree)
	if err != nil {
		t.Fatal(err)
	}
	if n := got.number(0); n != got.nodes() || n != 12 {
		t.Fatalf("numbered %d nodes, nodes() = %d, want 12", n, got.nodes())
	}
	want := "or_finally(repeat(after_any(always(), synchronized_processing_time())), after_each(after_all(AfterEndOfWindow(early=AfterCount(2), late=AfterProcessingTime[{5000 0 0} {0 1000 10}]), never()), AfterCount(7)))"
	if got.String() != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if ft := got.Subs[1].Subs[0].Subs[0].Subs[1].firingTime(12345); ft != 18010 {
		t.Errorf("firing time of 12345 + 5000 aligned to 1000 (offset 10) = %d, want 18010", ft)
	}
}

// TestWindowEnds checks WindowEnds on the strategies the Go SDK writes
// (graphx), and, for random residues, spacings and watermarks of both
// signs, against the least end above wm found by counting up.
func TestWindowEnds(t *testing.T) {
	sdk := func(fn *window.Fn) *pipepb.WindowingStrategy {
		ws := window.DefaultWindowingStrategy()
		ws.Fn = fn
		pb, err := graphx.MarshalWindowingStrategy(graphx.NewCoderMarshaller(), ws)
		if err != nil {
			t.Fatal(err)
		}
		return pb
	}
	for _, tc := range []struct {
		name string
		fn   *window.Fn
		wm   mtime.Time
		want mtime.Time // 0: not ok
	}{
		{"fixed 10s", window.NewFixedWindows(10 * time.Second), 12_345, 20_000},
		{"fixed 10s at an end", window.NewFixedWindows(10 * time.Second), 20_000, 30_000},
		{"fixed 10s just before an end", window.NewFixedWindows(10 * time.Second), 19_999, 20_000},
		{"fixed 10s below zero", window.NewFixedWindows(10 * time.Second), -12_345, -10_000},
		{"fixed 10s before the first record", window.NewFixedWindows(10 * time.Second), mtime.MinTimestamp, mtime.MinTimestamp - mtime.MinTimestamp%10_000},
		{"fixed 10s at the end of time", window.NewFixedWindows(10 * time.Second), mtime.MaxTimestamp - 5_000, 0},
		{"sliding 10s every 3s", window.NewSlidingWindows(3*time.Second, 10*time.Second), 12_345, 13_000},
		{"sliding 10s every 3s at an end", window.NewSlidingWindows(3*time.Second, 10*time.Second), 13_000, 16_000},
	} {
		next, ok := WindowEnds(sdk(tc.fn))
		if !ok {
			t.Fatalf("%s: WindowEnds not ok", tc.name)
		}
		got, ok := next(tc.wm)
		if want := tc.want != 0; ok != want || got != tc.want {
			t.Errorf("%s: next(%d) = %d, %v; want %d, %v", tc.name, tc.wm, got, ok, tc.want, want)
		}
	}
	for _, fn := range []*window.Fn{window.NewGlobalWindows(), window.NewSessions(time.Minute)} {
		if _, ok := WindowEnds(sdk(fn)); ok {
			t.Errorf("WindowEnds(%v) ok: its window ends cannot be told ahead", fn)
		}
	}
	rng := rand.New(rand.NewPCG(7, 24))
	for range 20_000 {
		q := 1 + rng.Int64N(50)
		r := rng.Int64N(3*q) - q // offsets outside [0, q) too
		wm := mtime.Time(rng.Int64N(2_000) - 1_000)
		fixed, _ := proto.Marshal(&pipepb.FixedWindowsPayload{Size: durationpb.New(time.Duration(q) * time.Millisecond), Offset: timestamppb.New(time.UnixMilli(r))})
		next, ok := WindowEnds(&pipepb.WindowingStrategy{WindowFn: &pipepb.FunctionSpec{Urn: URNFixedWindows, Payload: fixed}})
		if !ok {
			t.Fatalf("size %d offset %d: not ok", q, r)
		}
		want := wm + 1
		for ((int64(want)-r)%q+q)%q != 0 {
			want++
		}
		if got, ok := next(wm); !ok || got != want {
			t.Fatalf("fixed windows of %d ms at offset %d: next(%d) = %d, %v; want %d", q, r, wm, got, ok, want)
		}
	}
}

// TestGCTime: max timestamp + lateness, capped at the end of the global
// window (Beam's LateDataUtils.garbageCollectionTime), never overflowing.
func TestGCTime(t *testing.T) {
	day := mtime.Time(24 * time.Hour / time.Millisecond)
	for _, c := range []struct {
		maxTs, lateness, want mtime.Time
	}{
		{9, 0, 9},
		{9, 5, 14},
		{-10, 5, -5},
		{mtime.EndOfGlobalWindowTime, 0, mtime.EndOfGlobalWindowTime},
		{mtime.EndOfGlobalWindowTime, day, mtime.EndOfGlobalWindowTime}, // the global window: expires at the end of time
		{mtime.EndOfGlobalWindowTime - day, day, mtime.EndOfGlobalWindowTime},
		{mtime.EndOfGlobalWindowTime - day, day - 1, mtime.EndOfGlobalWindowTime - 1},
		{0, mtime.Time(math.MaxInt64), mtime.EndOfGlobalWindowTime},
		{mtime.MinTimestamp, mtime.Time(math.MaxInt64), mtime.EndOfGlobalWindowTime},
		{mtime.MaxTimestamp, 0, mtime.EndOfGlobalWindowTime},
		{5, -3, 5}, // a negative lateness counts as 0
	} {
		if got := GCTime(c.maxTs, c.lateness); got != c.want {
			t.Errorf("GCTime(%d, %d) = %d, want %d", c.maxTs, c.lateness, got, c.want)
		}
	}
}

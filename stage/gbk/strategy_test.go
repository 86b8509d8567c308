package gbk

import (
	"errors"
	"strings"
	"testing"
	"time"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
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
		{name: "trigger", ws: ws(URNGlobalWindows, nil, pipepb.MergeStatus_NON_MERGING, func(w *pipepb.WindowingStrategy) {
			w.Trigger = &pipepb.Trigger{Trigger: &pipepb.Trigger_Always_{Always: &pipepb.Trigger_Always{}}}
		}), err: "trigger"},
		{name: "retracting", ws: ws(URNGlobalWindows, nil, pipepb.MergeStatus_NON_MERGING, func(w *pipepb.WindowingStrategy) {
			w.AccumulationMode = pipepb.AccumulationMode_RETRACTING
		}), err: "accumulation mode"},
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
}

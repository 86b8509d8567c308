package userstate

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// TestLoopingTimerPastMaxRounds: a looping timer (Beam's pattern: re-set
// one period later until a stop time) that needs more bundles than the
// step runs at one point (step.Config.MaxRounds, 1000) when the watermark
// jumps (here a bounded input's last report, to the end of time) fires
// every iteration, in attempts of timerRoundsPerAttempt bundles, the head
// owing the rest and waking its task for the next attempt. It failed every
// attempt with step.ErrTimerLoop, and so the stage; Prism fires all 1500.
// Found by a review helper.
func TestLoopingTimerPastMaxRounds(t *testing.T) {
	const iterations = 1500
	stores, err := state.Open(state.Options{Dir: t.TempDir(), Name: "loop", Topic: "loop-changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHead(Config{
		Stage: "loop", Transform: "t", Partitions: 1, Stores: stores, WindowCoderURN: urnGlobal,
		Timers: []fnapi.TimerFamily{{TimerFamilyID: orderFamily, Domain: fnapi.TimeDomainEventTime, WindowCoderURN: urnGlobal}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	fired := 0
	process := func(_ context.Context, w step.Work, _ step.Emit) (*step.Bundle, error) {
		next := mtime.Time(-1)
		for range w.Elements {
			next = 0
		}
		for _, enc := range w.Timers[orderFamily] {
			fired++
			f, _ := strconv.ParseInt(strings.Split(string(enc), "|")[1], 10, 64)
			if f < (iterations-1)*60000 {
				next = mtime.Time(f + 60000)
			}
		}
		b := &step.Bundle{}
		if next >= 0 {
			b.Timers = map[fnapi.TimerFamilyID][]fnapi.Timer{orderFamily: {{Key: []byte("k"), Tag: "loop", Fire: next, Hold: next, Encoded: encodeTimer("loop", next, next)}}}
		}
		return b, nil
	}
	st, err := step.New(step.Config{
		Spec: step.Spec{Name: "loop", InputTopic: "in", Partitions: 1, Upstreams: []string{"up"}, HeadOutput: "pc"},
		Head: h, Process: process, ReportTopic: "reports",
	})
	if err != nil {
		t.Fatal(err)
	}
	el, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Element{Element: []byte("x")}})
	rep, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{Stage: "up", SourcePartition: 0, CommittedWatermarkMillis: int64(mtime.MaxTimestamp), TotalSourcePartitions: 1}}})
	ins := []step.In{
		{Task: 0, Offset: 0, Key: []byte("k"), Value: el},
		{Task: 0, Offset: 1, Key: []byte("k"), Value: rep, Headers: []step.Header{{Key: envelope.WriterHeader, Value: []byte{}}}},
	}
	tasks := map[int32]*step.Task{0: step.NewTask(0, []string{"up"})}
	var woken map[int32]int64
	attempts := 0
	for ; attempts < 10 && fired < iterations; attempts++ {
		r, err := st.Decide(context.Background(), tasks, ins, woken)
		if err != nil {
			t.Fatalf("attempt %d, after %d of %d timer callbacks: %v", attempts+1, fired, iterations, err)
		}
		if err := st.Advance(r); err != nil {
			t.Fatal(err)
		}
		if fired < iterations && !h.Owes() {
			t.Fatalf("after attempt %d, %d of %d fired and the head owes nothing", attempts+1, fired, iterations)
		}
		ins, woken = nil, map[int32]int64{}
		for _, p := range h.Wake() {
			woken[p] = 2
		}
	}
	if fired != iterations {
		t.Fatalf("fired %d in %d attempts, want %d", fired, attempts, iterations)
	}
	if h.Owes() || len(h.Wake()) > 0 {
		t.Errorf("after the last iteration the head still owes (wakes %v)", h.Wake())
	}
	if want := (iterations + timerRoundsPerAttempt - 1) / timerRoundsPerAttempt; attempts != want {
		t.Errorf("%d attempts, want %d of at most %d bundles", attempts, want, timerRoundsPerAttempt)
	}
}

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"
)

func tsKeyed(v int) (string, int) { return "k", v }

func init() { register.Function1x2(tsKeyed) }

// TestTestStreamLateData replays a TestStream whose watermark advances
// between its elements, through fixed windows of 10 s with 5 s of allowed
// lateness and a GroupByKey sum, on the real broker. Window [0,10000) has
// max timestamp 9999 and expires once the watermark passes 14999:
//
//	add 1@1000, 2@2000; wm 11000  -> ON_TIME pane [1 2]
//	add 3@3000, 10@15000; wm 12000 -> LATE pane [3] (late, within lateness)
//	add 4@4000; wm 16000          -> LATE pane [4], the last: the window closes
//	add 5@5000                    -> dropped (expired) and counted
//	end of stream (end of time)   -> [10000,20000) ON_TIME pane [10], the last
//
// Every pane exactly once in the sink topic (read_committed), with its
// exact pane info; one value dropped.
func TestTestStreamLateData(t *testing.T) {
	b := needBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p, s := beam.NewPipelineWithRoot()
	con := teststream.NewConfig()
	for _, step := range []func() error{
		func() error { return con.AddElements(1000, 1) },
		func() error { return con.AddElements(2000, 2) },
		func() error { return con.AdvanceWatermark(11000) },
		func() error { return con.AddElements(3000, 3) },
		func() error { return con.AddElements(15000, 10) },
		func() error { return con.AdvanceWatermark(12000) },
		func() error { return con.AddElements(4000, 4) },
		func() error { return con.AdvanceWatermark(16000) },
		func() error { return con.AddElements(5000, 5) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	kv := beam.ParDo(s, tsKeyed, teststream.Create(s, con))
	kv = beam.WindowInto(s, window.NewFixedWindows(10*time.Second), kv, beam.AllowedLateness(5*time.Second))
	_ = beam.Reshuffle(s, beam.ParDo(s, gbkSum, beam.GroupByKey(s, kv)))

	r := runApp(t, ctx, b.BootstrapServers(), uniqueName(t, "app"), p)
	checkLines(t, sinkStrings(t, ctx, b.BootstrapServers(), r.Plan, true), []string{
		"k [0,10000) ts=9999 LATE/1/1/first=false/last=false n=1 sum=3",
		"k [0,10000) ts=9999 LATE/2/2/first=false/last=true n=1 sum=4",
		"k [0,10000) ts=9999 ON_TIME/0/0/first=true/last=false n=2 sum=3",
		"k [10000,20000) ts=19999 ON_TIME/0/0/first=true/last=true n=1 sum=10",
	})
	var dropped int64
	for _, n := range r.LateDropped {
		dropped += n
	}
	if dropped != 1 {
		t.Errorf("late values dropped: got %d (%v), want 1 (5@5000 after the window expired)", dropped, r.LateDropped)
	}
}

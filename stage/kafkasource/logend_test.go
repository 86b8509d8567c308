package kafkasource

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kafkastreams/kafkastreams/stage"
)

// TestLogEndScenarios runs the scenario files in testdata/logend/ against
// Reading (go test -rewrite regenerates their expected output). Commands:
//
//	reset                               a new Reading (knows nothing)
//	record offset=N                     Record
//	eof offset=N                        EOF
//	rewind                              Rewind
//	end high=H stable=S asked=3s        End (stable defaults to high)
//	quiet since=3s                      Quiet(since), with CaughtUp and
//	                                    Position
//	unread [paused]                     Unread and Because
//
// Wall-clock instants (asked=, since=) are Go durations after a fixed
// epoch.
func TestLogEndScenarios(t *testing.T) {
	datadriven.Walk(t, filepath.Join("testdata", "logend"), func(t *testing.T, path string) {
		r := &Reading{}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			off := func(key string, def int64) int64 {
				if !td.HasArg(key) {
					return def
				}
				var n int64
				td.ScanArgs(t, key, &n)
				return n
			}
			switch td.Cmd {
			case "reset":
				r = &Reading{}
			case "record":
				r.Record(off("offset", 0))
			case "eof":
				r.EOF(off("offset", 0))
			case "rewind":
				r.Rewind()
			case "end":
				high := off("high", 0)
				r.End(LogEnd{High: high, Stable: off("stable", high), Asked: epoch.Add(durArg(t, td, "asked"))})
			case "quiet":
				pos, ok := r.Position()
				ps := "unknown"
				if ok {
					ps = fmt.Sprint(pos)
				}
				return fmt.Sprintf("quiet=%t caught-up=%t position=%s\n", r.Quiet(epoch.Add(durArg(t, td, "since"))), r.CaughtUp(), ps)
			case "unread":
				u, ok := r.Unread()
				if !ok {
					return "none\n"
				}
				return fmt.Sprintf("position=%d stable=%d high=%d transaction=%t\nbecause %s\n", u.Position, u.Stable, u.High, u.Transaction, u.Because(td.HasArg("paused")))
			default:
				t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
			}
			return "ok\n"
		})
	})
}

// TestHeadUnreadRecordsAreNotIdle: the Head's side of issue 21, section 2.
// A caught-up partition past its idleness is idle only once a ListOffsets
// answer asked after its deadline shows nothing past its EOF; an answer
// showing a transaction open past the last stable offset keeps it
// non-idle and its report says why; an idle partition that an answer
// shows unread records for stops being idle at once (Wake asks for the
// report); a partition sought back (Rewound) is not caught up.
func TestHeadUnreadRecordsAreNotIdle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := headAt(t, &now)
	if err := h.Assign(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	check := func(what, want string) {
		t.Helper()
		got := fmt.Sprintf("%s want=%v unread=%q", idleState(h, 1), h.LogEndsWanted(), h.Source(1).GetUnreadBecause())
		if got != want {
			t.Errorf("%s:\n  %s\nwant\n  %s", what, got, want)
		}
	}
	if _, err := h.Element(1, stage.In{Task: 1, Offset: 0, Timestamp: 5000}); err != nil {
		t.Fatal(err)
	}
	h.ReachedEnd(1, 1) // read_committed: the EOF at the last stable offset
	deadline := now.Add(2 * time.Second)
	h.SetLogEnd(1, 1, 1, now)
	now = now.Add(3 * time.Second)
	check("past its idleness, the only answer from before the deadline", `wake=[] idle=false want=[1] unread=""`)
	h.SetLogEnd(1, 3, 1, now)
	check("an answer after the deadline: a transaction open (LSO 1, HWM 3)", `wake=[1] idle=false want=[1] unread="a transaction is open (last stable offset 1, high watermark 3)"`)
	check("its report went out once", `wake=[] idle=false want=[1] unread="a transaction is open (last stable offset 1, high watermark 3)"`)
	now = now.Add(10 * time.Second)
	check("10 s on, still open", `wake=[] idle=false want=[1] unread="a transaction is open (last stable offset 1, high watermark 3)"`)

	// The commit: the consumer reads the 2 records and the marker.
	for _, off := range []int64{1, 2} {
		if _, err := h.Element(1, stage.In{Task: 1, Offset: off, Timestamp: 30000}); err != nil {
			t.Fatal(err)
		}
	}
	h.ReachedEnd(1, 4)
	check("committed and read (EOF 4 past the marker)", `wake=[] idle=false want=[] unread=""`)
	now = now.Add(2 * time.Second)
	check("its idleness later, no answer since", `wake=[] idle=false want=[1] unread=""`)
	h.SetLogEnd(1, 4, 4, now.Add(-time.Millisecond))
	check("an answer asked 1 ms before the deadline", `wake=[] idle=false want=[1] unread=""`)
	h.SetLogEnd(1, 4, 4, now)
	check("an answer at the deadline, nothing past the EOF", `wake=[1] idle=true want=[1] unread=""`)

	h.SetLogEnd(1, 9, 4, now.Add(time.Second))
	check("idle, then a transaction opened on it", `wake=[1] idle=false want=[1] unread="a transaction is open (last stable offset 4, high watermark 9)"`)

	_ = deadline
	h.Rewound(1)
	check("sought back (side inputs): not caught up", `wake=[] idle=false want=[] unread="a transaction is open (last stable offset 4, high watermark 9)"`)
}

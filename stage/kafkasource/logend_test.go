package kafkasource

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/datadriven"
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

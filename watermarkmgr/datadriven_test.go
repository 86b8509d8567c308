package watermarkmgr

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the scenario files in testdata/ (go test -rewrite
// regenerates their expected output). Commands:
//
//	new                                  fresh Manager
//	observe p=3 wm=100 total=4 [idle]    one report; prints ok or the error
//	observe                              one report per input line, same syntax
//	advance                              Advance; prints the status line
//	observe-advance p=.. wm=.. total=..  ObserveAndAdvance; prints the status line
//	state                                status line and one line per partition
//	agg-new [upstreams=(a,b)]            fresh Aggregator
//	agg-observe up=a p=.. wm=.. total=.. [idle]   (or one per input line)
//	agg-advance / agg-state
//
// Watermarks are mtime.Time in ms since the Unix epoch; min and max stand for
// mtime.MinTimestamp and mtime.MaxTimestamp, min-1 and max+1 for the values
// just outside Beam's range. The status line is "held wm=W missing=[...]",
// "wm=W min=pN@M" (partition N defines the min, at M) or "wm=W all-idle".
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skip("skipped because it is not a scenario file (e.g. the testdata/fuzz/ corpus)")
		}
		m := New()
		agg := NewAggregator()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			switch td.Cmd {
			case "new":
				m = New()
				return ""
			case "observe":
				return observeAll(t, td, func(up string, r report) error {
					return m.Observe(r.p, r.wm, r.total, r.idle)
				})
			case "advance":
				m.Advance()
				return status(m.Snapshot()) + "\n"
			case "observe-advance":
				r, _ := parseReport(t, cmdTokens(td))
				if _, err := m.ObserveAndAdvance(r.p, r.wm, r.total, r.idle); err != nil {
					return "error: " + err.Error() + "\n" + status(m.Snapshot()) + "\n"
				}
				return status(m.Snapshot()) + "\n"
			case "state":
				return state(m.Snapshot())
			case "agg-new":
				var ups []string
				if arg, ok := td.Arg("upstreams"); ok {
					ups = arg.Vals
				}
				agg = NewAggregator(ups...)
				return ""
			case "agg-observe":
				return observeAll(t, td, func(up string, r report) error {
					return agg.Observe(up, r.p, r.wm, r.total, r.idle)
				})
			case "agg-advance":
				agg.Advance()
				return aggStatus(agg.Snapshot())
			case "agg-state":
				s := agg.Snapshot()
				out, _, _ := strings.Cut(aggStatus(s), "\n")
				out += "\n"
				for _, u := range s.Upstreams {
					out += u.Name + ":\n" + indent(state(u.Snapshot))
				}
				return out
			default:
				t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
				return ""
			}
		})
	})
}

func observeAll(t *testing.T, td *datadriven.TestData, f func(up string, r report) error) string {
	lines := [][]string{cmdTokens(td)}
	if len(td.CmdArgs) == 0 {
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(td.Input), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, strings.Fields(l))
			}
		}
	}
	var out strings.Builder
	for _, toks := range lines {
		r, up := parseReport(t, toks)
		if err := f(up, r); err != nil {
			fmt.Fprintf(&out, "%s: error: %v\n", strings.Join(toks, " "), err)
		}
	}
	if out.Len() == 0 {
		return "ok\n"
	}
	return out.String()
}

func cmdTokens(td *datadriven.TestData) []string {
	var toks []string
	for _, a := range td.CmdArgs {
		if len(a.Vals) == 0 {
			toks = append(toks, a.Key)
		} else {
			toks = append(toks, a.Key+"="+a.Vals[0])
		}
	}
	return toks
}

// parseReport parses "p=3 wm=100 total=4 [idle] [up=name]".
func parseReport(t *testing.T, toks []string) (r report, upstream string) {
	t.Helper()
	seen := map[string]bool{}
	for _, tok := range toks {
		k, v, _ := strings.Cut(tok, "=")
		seen[k] = true
		switch k {
		case "p", "total":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				t.Fatalf("%s: %v", tok, err)
			}
			if k == "p" {
				r.p = int32(n)
			} else {
				r.total = int32(n)
			}
		case "wm":
			r.wm = parseWM(t, v)
		case "idle":
			r.idle = true
		case "up":
			upstream = v
		default:
			t.Fatalf("unknown report field %q", tok)
		}
	}
	for _, k := range []string{"p", "wm", "total"} {
		if !seen[k] {
			t.Fatalf("report %q lacks %s=", strings.Join(toks, " "), k)
		}
	}
	return r, upstream
}

func parseWM(t *testing.T, s string) mtime.Time {
	switch s {
	case "min":
		return mtime.MinTimestamp
	case "max":
		return mtime.MaxTimestamp
	case "min-1":
		return mtime.MinTimestamp - 1
	case "max+1":
		return mtime.MaxTimestamp + 1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("wm=%s: %v", s, err)
	}
	return mtime.Time(n)
}

// fmtWM prints a watermark in ms, with min/max for Beam's bounds.
func fmtWM(w mtime.Time) string {
	switch w {
	case mtime.MinTimestamp:
		return "min"
	case mtime.MaxTimestamp:
		return "max"
	}
	return strconv.FormatInt(int64(w), 10)
}

func status(s Snapshot) string {
	switch {
	case s.Held && s.Total == 0:
		return fmt.Sprintf("held wm=%s (no report yet)", fmtWM(s.Watermark))
	case s.Held:
		return fmt.Sprintf("held wm=%s missing=%v", fmtWM(s.Watermark), s.Missing)
	case s.AllIdle:
		return fmt.Sprintf("wm=%s all-idle", fmtWM(s.Watermark))
	}
	return fmt.Sprintf("wm=%s min=p%d@%s", fmtWM(s.Watermark), s.MinPartition,
		fmtWM(s.Partitions[s.MinPartition].Watermark))
}

func state(s Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s total=%d\n", status(s), s.Total)
	for _, p := range s.Partitions {
		switch {
		case !p.Reported:
			fmt.Fprintf(&b, "  p%d: not reported\n", p.Partition)
		case p.Idle:
			fmt.Fprintf(&b, "  p%d: wm=%s idle\n", p.Partition, fmtWM(p.Watermark))
		default:
			fmt.Fprintf(&b, "  p%d: wm=%s\n", p.Partition, fmtWM(p.Watermark))
		}
	}
	return b.String()
}

func aggStatus(s AggregatorSnapshot) string {
	var flags []string
	if s.Held {
		flags = append(flags, "held")
	}
	if s.AllIdle {
		flags = append(flags, "all-idle")
	}
	out := fmt.Sprintf("wm=%s", fmtWM(s.Watermark))
	if len(flags) > 0 {
		out += " " + strings.Join(flags, " ")
	}
	out += "\n"
	for _, u := range s.Upstreams {
		out += fmt.Sprintf("  %s: %s\n", u.Name, status(u.Snapshot))
	}
	return out
}

func indent(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return "  " + strings.Join(lines, "\n  ") + "\n"
}

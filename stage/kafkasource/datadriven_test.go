package kafkasource

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/cockroachdb/datadriven"
)

// epoch is the wall-clock instant the scenarios' at= and now= count from.
var epoch = time.Date(2026, 9, 22, 10, 0, 0, 0, time.UTC)

// TestScenarios runs the scenario files in testdata/ (go test -rewrite
// regenerates their expected output). Commands:
//
//	new [name=p] [kind=bounded|monotonous|none|limited|N] [bound=30s] [idle=5s]
//	    [group=g] [drift=10s] at=0       NewPartition, assigned at at;
//	                                     prints ok or the error
//	validate [kind=..] [bound=..] …      Strategy.Validate only
//	observe [name=p] ts=1000 now=100ms   Observe; ts=(5,3,9) observes each in
//	                                     turn; prints the watermark after each
//	watermark [name=p]                   Watermark
//	watermark-at [name=p] now=6s [caught-up]
//	                                     WatermarkAt(now, caught-up given)
//	idle [name=p] now=6s                 Idle and IdleAt
//	state [name=p] now=6s                View
//	align [members=(a,b)] now=7s         Align over the named partitions
//	                                     (default: every partition created)
//
// Event times and watermarks are mtime.Time in ms; min and max stand for
// mtime.MinTimestamp and mtime.MaxTimestamp, min+N and max-N for values
// near them, e+N and e-N for values near the epoch below (the event time
// of a record stamped at the wall-clock instant N ms after it). Wall-clock instants (at=, now=) are Go durations after a fixed
// epoch, and are printed the same way.
func TestScenarios(t *testing.T) {
	// The scenario files at the top of testdata/ only: testdata/logend holds
	// Reading's (TestLogEndScenarios), testdata/fuzz the fuzzer's corpus.
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenario file in testdata/*.txt (%v)", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) { runPartitionScenario(t, path) })
	}
}

// runPartitionScenario runs one scenario file of TestScenarios.
func runPartitionScenario(t *testing.T, path string) {
	parts := map[string]*Partition{}
	datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
		name := "p"
		if td.HasArg("name") {
			td.ScanArgs(t, "name", &name)
		}
		get := func() *Partition {
			p, ok := parts[name]
			if !ok {
				t.Fatalf("%s: no partition %q", td.Pos, name)
			}
			return p
		}
		switch td.Cmd {
		case "new", "validate":
			s := parseStrategy(t, td)
			if td.Cmd == "validate" {
				return errOrOK(s.Validate())
			}
			p, err := NewPartition(s, epoch.Add(durArg(t, td, "at")))
			if err != nil {
				delete(parts, name)
				return errOrOK(err)
			}
			parts[name] = p
			return "ok\n"
		case "observe":
			p := get()
			now := epoch.Add(durArg(t, td, "now"))
			arg, ok := td.Arg("ts")
			if !ok {
				t.Fatalf("%s: observe needs ts=", td.Pos)
			}
			var b strings.Builder
			for _, v := range arg.Vals {
				p.Observe(parseTS(t, v), now)
				fmt.Fprintf(&b, "ts=%s wm=%s\n", v, fmtTS(p.Watermark()))
			}
			return b.String()
		case "watermark":
			return "wm=" + fmtTS(get().Watermark()) + "\n"
		case "watermark-at":
			return "wm=" + fmtTS(get().WatermarkAt(epoch.Add(durArg(t, td, "now")), td.HasArg("caught-up"))) + "\n"
		case "idle":
			p := get()
			now := epoch.Add(durArg(t, td, "now"))
			at, ok := p.IdleAt()
			switch {
			case !ok:
				return fmt.Sprintf("idle=%t (idleness off)\n", p.Idle(now))
			case p.Idle(now):
				return fmt.Sprintf("idle=true (since %s)\n", fmtWall(at))
			}
			return fmt.Sprintf("idle=false (idle at %s)\n", fmtWall(at))
		case "state":
			v := get().View(epoch.Add(durArg(t, td, "now")))
			s := fmt.Sprintf("kind=%v wm=%s idle=%t", v.Kind, fmtTS(v.Watermark), v.Idle)
			if v.HasRecord {
				s += fmt.Sprintf(" max=%s last=%s", fmtTS(v.MaxEventTime), fmtTS(v.LastEventTime))
			} else {
				s += " no-record"
			}
			s += " active=" + fmtWall(v.LastActivity)
			if v.Idleness > 0 {
				s += fmt.Sprintf(" idleness=%v idle-at=%s", v.Idleness, fmtWall(v.IdleAt))
			}
			return s + "\n"
		case "align":
			now := epoch.Add(durArg(t, td, "now"))
			group := map[string]*Partition{}
			if arg, ok := td.Arg("members"); ok {
				for _, k := range arg.Vals {
					group[k] = parts[k] // nil if unknown: Align's error
				}
			} else {
				for k, p := range parts {
					group[k] = p
				}
			}
			a, err := Align(group, now)
			if err != nil {
				return errOrOK(err)
			}
			return fmtAlignment(a)
		default:
			t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
			return ""
		}
	})
}

func errOrOK(err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return "ok\n"
}

func parseStrategy(t *testing.T, td *datadriven.TestData) Strategy {
	t.Helper()
	var s Strategy
	if arg, ok := td.Arg("kind"); ok {
		switch v := arg.Vals[0]; v {
		case "bounded":
			s.Kind = BoundedOutOfOrderness
		case "monotonous":
			s.Kind = Monotonous
		case "none":
			s.Kind = NoWatermarks
		case "limited":
			s.Kind = LimitedDelay
		default:
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: kind=%s", td.Pos, v)
			}
			s.Kind = Kind(n)
		}
	}
	s.MaxOutOfOrderness = durArg(t, td, "bound")
	s.Idleness = durArg(t, td, "idle")
	s.MaxDrift = durArg(t, td, "drift")
	if td.HasArg("group") {
		td.ScanArgs(t, "group", &s.AlignmentGroup)
	}
	return s
}

// durArg parses key=<Go duration>; 0 when absent.
func durArg(t *testing.T, td *datadriven.TestData, key string) time.Duration {
	t.Helper()
	arg, ok := td.Arg(key)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(arg.Vals[0])
	if err != nil {
		t.Fatalf("%s: %s=%s: %v", td.Pos, key, arg.Vals[0], err)
	}
	return d
}

// parseTS parses an event time: N, min, max, min+N, max-N, e+N, e-N (ms).
func parseTS(t *testing.T, s string) mtime.Time {
	t.Helper()
	base, rest := mtime.Time(0), s
	switch {
	case strings.HasPrefix(s, "e"):
		base, rest = mtime.FromTime(epoch), s[1:]
	case strings.HasPrefix(s, "min"):
		base, rest = mtime.MinTimestamp, s[3:]
	case strings.HasPrefix(s, "max"):
		base, rest = mtime.MaxTimestamp, s[3:]
	}
	if rest == "" {
		return base
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		t.Fatalf("ts=%s: %v", s, err)
	}
	return base + mtime.Time(n)
}

// fmtTS prints an event time or watermark in ms, relative to min or max
// when within a day of them.
func fmtTS(w mtime.Time) string {
	const day = 24 * 60 * 60 * 1000
	switch {
	case w == mtime.MinTimestamp:
		return "min"
	case w == mtime.MaxTimestamp:
		return "max"
	case w-mtime.MinTimestamp < day:
		return fmt.Sprintf("min+%d", int64(w-mtime.MinTimestamp))
	case mtime.MaxTimestamp-w < day:
		return fmt.Sprintf("max-%d", int64(mtime.MaxTimestamp-w))
	case w-mtime.FromTime(epoch) < day && mtime.FromTime(epoch)-w < day:
		return fmt.Sprintf("e%+d", int64(w-mtime.FromTime(epoch)))
	}
	return strconv.FormatInt(int64(w), 10)
}

// fmtWall prints a wall-clock instant as the duration after epoch.
func fmtWall(w time.Time) string { return w.Sub(epoch).String() }

func fmtAlignment(a Alignment) string {
	var b strings.Builder
	if a.HasMin {
		fmt.Fprintf(&b, "group=%s min=%s held=%v\n", a.Group, fmtTS(a.Min), a.Held())
	} else {
		fmt.Fprintf(&b, "group=%s no-min held=%v\n", a.Group, a.Held())
	}
	keys := make([]string, 0, len(a.Members))
	for k := range a.Members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		m := a.Members[k]
		fmt.Fprintf(&b, "  %s: wm=%s", k, fmtTS(m.Watermark))
		if !m.HasRecord {
			b.WriteString(" no-record")
		} else if a.HasMin {
			fmt.Fprintf(&b, " drift=%dms", m.DriftMillis)
		}
		if m.Idle {
			b.WriteString(" idle")
		}
		if m.Held {
			b.WriteString(" HELD")
		}
		b.WriteString("\n")
	}
	return b.String()
}

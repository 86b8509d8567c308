package gbk

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/cockroachdb/datadriven"
)

// TestCore runs the scenarios in testdata/core/*.txt. Commands:
//
//	strategy kind=global|fixed|sliding|sessions [lateness=ms] [acc] [ts=end|earliest|latest]
//	         [ontime=always] [closing=always]
//	    a new core over an empty store; the input, if any, is a trigger:
//	    never, always, count(N), ptime(DELAY_MS), sync, eow(EARLY,LATE)
//	    (- for none), all(...), any(...), each(...), repeat(T),
//	    orfinally(MAIN,FINALLY)
//	now t=MS
//	    the processing time the triggers see
//	add ...
//	    also prints the panes a trigger fires on the element, or
//	    "dropped: window closed" after the trigger finished
//	add key=K win=global|[s,e) ts=T v=V
//	    prints "dropped" if the value's window has expired, else nothing
//	advance wm=T
//	    prints the fired panes, then the hold
//	next
//	    the earliest armed processing-time deadline (NextProcessingTime)
//	begin / abort
//	    snapshot the store / restore the snapshot and Load (an aborted attempt)
//	reload
//	    a new core Loaded from the same store (a restore on another instance)
//	state
//	    the store's keys, decoded
//
// Times are ms, or min, max, eogw (mtime.EndOfGlobalWindowTime).
func TestCore(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		var c *Core
		var st, snap *MemStore
		var strat Strategy
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string]string{}
			for _, a := range d.CmdArgs {
				args[a.Key] = strings.Join(a.Vals, ",")
			}
			switch d.Cmd {
			case "strategy":
				strat = Strategy{Kind: WindowFnKind(args["kind"]), Combiner: EndOfWindow}
				if v, ok := args["lateness"]; ok {
					strat.AllowedLateness = mustInt(t, v)
				}
				if v, ok := args["gap"]; ok {
					strat.Gap = mustInt(t, v)
				}
				_, strat.Accumulating = args["acc"]
				strat.OnTimeAlways = args["ontime"] == "always"
				strat.ClosingAlways = args["closing"] == "always"
				switch args["ts"] {
				case "earliest":
					strat.Combiner = EarliestInPane
				case "latest":
					strat.Combiner = LatestInPane
				}
				if in := strings.TrimSpace(d.Input); in != "" {
					strat.Trigger = parseTestTrigger(t, in)
					strat.Trigger.number(0)
				}
				st = NewMemStore()
				c = NewCore(strat, st)
				return ""
			case "now":
				c.SetProcessingTime(mustInt(t, args["t"]))
				return ""
			case "next":
				if n, ok := c.NextProcessingTime(); ok {
					return fmt.Sprintf("next processing time %d\n", n)
				}
				return "no processing-time deadline\n"
			case "add":
				panes, dropped, closed, err := c.AddFire(Element{Key: []byte(args["key"]), Window: parseWin(t, args["win"]), Timestamp: parseTime(t, args["ts"]), Value: []byte(args["v"])})
				if err != nil {
					return "error: " + err.Error()
				}
				if dropped {
					return fmt.Sprintf("dropped (total %d)\n", c.Dropped())
				}
				if closed {
					return fmt.Sprintf("dropped: window closed (total %d)\n", c.ClosedDropped())
				}
				var b strings.Builder
				for _, p := range panes {
					fmt.Fprintf(&b, "fire key=%s win=%s ts=%s %s values=%s\n", p.Key, p.Window, timeString(p.Timestamp), paneString(p.Info), valuesString(p.Values))
				}
				return b.String()
			case "advance":
				panes, err := c.Advance(parseTime(t, args["wm"]))
				if err != nil {
					return "error: " + err.Error()
				}
				var b strings.Builder
				for _, p := range panes {
					fmt.Fprintf(&b, "fire key=%s win=%s ts=%s %s values=%s\n", p.Key, p.Window, timeString(p.Timestamp), paneString(p.Info), valuesString(p.Values))
				}
				fmt.Fprintf(&b, "hold=%s\n", timeString(c.Hold()))
				return b.String()
			case "begin":
				snap = st.Clone()
				return ""
			case "abort":
				st.m = snap.Clone().m
				if err := c.Load(); err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprintf("hold=%s wm=%s\n", timeString(c.Hold()), timeString(c.Watermark()))
			case "reload":
				c = NewCore(strat, st)
				if err := c.Load(); err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprintf("hold=%s wm=%s\n", timeString(c.Hold()), timeString(c.Watermark()))
			case "state":
				return describeStore(t, st)
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

// describeStore lists the store's keys, decoded, in the order of their
// logical form: a value key names the window of its entry (the merged
// session), not its storage window (meta.SW), so the listing does not
// depend on which session survived a merge.
func describeStore(t *testing.T, st *MemStore) string {
	t.Helper()
	type rec struct{ logical, line string }
	var recs []rec
	win := map[string]Window{} // storage prefix → window of the entry
	_ = st.Scan([]byte{prefixMeta}, func(k, v []byte) error {
		w, err := parseWindow(k[1:])
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeMeta(v)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Ext {
			m.SW = w
		}
		win[string(valuePrefix(m.SW, k[1+windowKeyLen:]))] = w
		return nil
	})
	_ = st.Scan(nil, func(k, v []byte) error {
		r := rec{logical: string(k)}
		switch k[0] {
		case prefixMeta:
			w, _ := parseWindow(k[1:])
			m, _ := decodeMeta(v)
			r.line = fmt.Sprintf("meta key=%s win=%s pending=%d total=%d fired=%d", k[1+windowKeyLen:], w, m.Pending, m.Total, m.Fired)
		case prefixValue:
			rest := k[1+windowKeyLen:]
			n := int(rest[0])
			key, seq := rest[1:1+n], rest[1+n:]
			w, ok := win[string(k[:len(k)-len(seq)])]
			if !ok {
				t.Fatalf("value key %q of no entry", k)
			}
			r.logical = string(append(valuePrefix(w, key), seq...))
			r.line = fmt.Sprintf("value key=%s win=%s v=%s", key, w, v)
		case prefixUnit:
			w, _ := parseWindow(k[1:])
			r.line = fmt.Sprintf("unit value key=%s win=%s v=%s", k[1+windowKeyLen:], w, v)
		case 'w':
			r.line = "watermark"
		default:
			r.line = fmt.Sprintf("unknown %q", k)
		}
		recs = append(recs, r)
		return nil
	})
	if len(recs) == 0 {
		return "empty\n"
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].logical < recs[j].logical })
	var b strings.Builder
	for _, r := range recs {
		b.WriteString(r.line)
		b.WriteString("\n")
	}
	return b.String()
}

func mustInt(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func parseTime(t *testing.T, s string) mtime.Time {
	switch s {
	case "min":
		return mtime.MinTimestamp
	case "max":
		return mtime.MaxTimestamp
	case "eogw":
		return mtime.EndOfGlobalWindowTime
	}
	return mtime.Time(mustInt(t, s))
}

func timeString(ts mtime.Time) string {
	switch ts {
	case mtime.MinTimestamp:
		return "min"
	case mtime.MaxTimestamp:
		return "max"
	case mtime.EndOfGlobalWindowTime:
		return "eogw"
	}
	return strconv.FormatInt(int64(ts), 10)
}

func parseWin(t *testing.T, s string) Window {
	if s == "global" {
		return GlobalWindow
	}
	var a, b int64
	if _, err := fmt.Sscanf(s, "[%d,%d)", &a, &b); err != nil {
		t.Fatalf("window %q: %v", s, err)
	}
	return Window{Start: mtime.Time(a), End: mtime.Time(b)}
}

func paneString(p typex.PaneInfo) string {
	timing := map[typex.PaneTiming]string{typex.PaneEarly: "EARLY", typex.PaneOnTime: "ON_TIME", typex.PaneLate: "LATE", typex.PaneUnknown: "UNKNOWN"}[p.Timing]
	s := fmt.Sprintf("%s idx=%d/%d", timing, p.Index, p.NonSpeculativeIndex)
	if p.IsFirst {
		s += " first"
	}
	if p.IsLast {
		s += " last"
	}
	return s
}

func valuesString(vs [][]byte) string {
	ss := make([]string, len(vs))
	for i, v := range vs {
		ss[i] = string(v)
	}
	return "[" + strings.Join(ss, " ") + "]"
}

// parseTestTrigger reads the scenario notation of a trigger (see TestCore).
func parseTestTrigger(t *testing.T, in string) *Trigger {
	t.Helper()
	in = strings.ReplaceAll(in, " ", "")
	tr, rest := parseTestTriggerPrefix(t, in)
	if rest != "" {
		t.Fatalf("trigger %q: trailing %q", in, rest)
	}
	return tr
}

func parseTestTriggerPrefix(t *testing.T, s string) (*Trigger, string) {
	t.Helper()
	i := strings.IndexAny(s, "(,)")
	if i < 0 {
		i = len(s)
	}
	name, rest := s[:i], s[i:]
	var args []*Trigger
	var nums []int64
	if strings.HasPrefix(rest, "(") {
		rest = rest[1:]
		for !strings.HasPrefix(rest, ")") {
			if j := strings.IndexAny(rest, ",)"); j > 0 && isNum(rest[:j]) {
				nums = append(nums, mustInt(t, rest[:j]))
				rest = rest[j:]
			} else if strings.HasPrefix(rest, "-") {
				args = append(args, nil)
				rest = rest[1:]
			} else {
				var a *Trigger
				a, rest = parseTestTriggerPrefix(t, rest)
				args = append(args, a)
			}
			rest = strings.TrimPrefix(rest, ",")
		}
		rest = rest[1:]
	}
	switch name {
	case "never":
		return &Trigger{Kind: TrigNever}, rest
	case "always":
		return &Trigger{Kind: TrigAlways}, rest
	case "count":
		return &Trigger{Kind: TrigCount, Count: nums[0]}, rest
	case "ptime":
		return &Trigger{Kind: TrigProcTime, Transforms: []TimeTransform{{Delay: nums[0]}}}, rest
	case "sync":
		return &Trigger{Kind: TrigSyncProcTime}, rest
	case "eow":
		return &Trigger{Kind: TrigEndOfWindow, Subs: args}, rest
	case "all":
		return &Trigger{Kind: TrigAll, Subs: args}, rest
	case "any":
		return &Trigger{Kind: TrigAny, Subs: args}, rest
	case "each":
		return &Trigger{Kind: TrigEach, Subs: args}, rest
	case "repeat":
		return &Trigger{Kind: TrigRepeat, Subs: args}, rest
	case "orfinally":
		return &Trigger{Kind: TrigOrFinally, Subs: args}, rest
	}
	t.Fatalf("unknown trigger %q", name)
	return nil, ""
}

func isNum(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

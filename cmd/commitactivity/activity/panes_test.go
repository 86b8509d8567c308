package activity

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReadPanes: accumulating panes of two windows and a merged session,
// read back into final rows and counts.
func TestReadPanes(t *testing.T) {
	const w1, w2 = "2020-01-01T00:00:00Z,2020-01-31T00:00:00Z", "2020-01-31T00:00:00Z,2020-03-01T00:00:00Z"
	lines := []string{
		// w1: a on time 3, then late 4 and 5; b on time 1.
		"area," + w1 + ",a,3,30,3,,ontime,0",
		"area," + w1 + ",a,5,50,5,,late,2",
		"area," + w1 + ",a,4,40,4,,late,1",
		"area," + w1 + ",b,1,10,1,,ontime,0",
		// w2: c only late.
		"area," + w2 + ",c,2,20,2,,late,0",
		// top rows carry no pane; w1's fired twice.
		"top," + w1 + ",a,3,30,3,1,,",
		"top," + w1 + ",b,1,10,1,2,,",
		"top," + w1 + ",a,5,50,5,1,,",
		"top," + w1 + ",a,3,30,3,2,,",
		"top," + w2 + ",c,2,20,2,1,,",
		// Sessions of a: [01-02, 01-03] merged into [01-01, 01-05]; a
		// separate one later.
		"session,2020-01-02T00:00:00Z,2020-01-03T00:00:00Z,a,2,20,2,,ontime,0",
		"session,2020-01-01T00:00:00Z,2020-01-05T00:00:00Z,a,4,40,4,,late,0",
		"session,2020-01-01T00:00:00Z,2020-01-05T00:00:00Z,a,3,30,3,,late,0",
		"session,2020-02-01T00:00:00Z,2020-02-01T00:00:00Z,a,1,10,1,,ontime,0",
	}
	p, err := ReadPanes(lines)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("on time %d late %d final %d sessions %d panes %v top %d/%d", p.OnTime, p.Late, p.Final, p.SessionCommits, p.AreaPanes, p.TopRefired, p.TopWindows)
	if want := "on time 4 late 4 final 8 sessions 5 panes map[late:3 ontime:2] top 1/2"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	want := strings.Join([]string{
		"area," + w1 + ",a,5,50,5,",
		"area," + w1 + ",b,1,10,1,",
		"area," + w2 + ",c,2,20,2,",
		"session,2020-01-01T00:00:00Z,2020-01-05T00:00:00Z,a,4,40,4,",
		"session,2020-02-01T00:00:00Z,2020-02-01T00:00:00Z,a,1,10,1,",
		"top," + w1 + ",a,5,50,5,1",
		"top," + w1 + ",b,1,10,1,2",
		"top," + w2 + ",c,2,20,2,1",
	}, "\n")
	if g := strings.Join(p.FinalRows, "\n"); g != want {
		t.Errorf("final rows:\n%s\nwant:\n%s", g, want)
	}
}

// TestReadPanesRefuses: panes that accumulating panes under the default
// trigger cannot produce are errors, each naming the problem.
func TestReadPanesRefuses(t *testing.T) {
	const w = "2020-01-01T00:00:00Z,2020-01-31T00:00:00Z"
	for _, c := range []struct {
		lines []string
		err   string
	}{
		{[]string{"area," + w + ",a,1,1,1,,ontime,0", "area," + w + ",a,1,1,1,,ontime,0"}, "pane indexes [0 0]"},
		{[]string{"area," + w + ",a,1,1,1,,ontime,0", "area," + w + ",a,2,2,2,,late,2"}, "pane indexes [0 2]"},
		{[]string{"area," + w + ",a,2,1,1,,ontime,0", "area," + w + ",a,1,2,2,,late,1"}, "not accumulating"},
		{[]string{"area," + w + ",a,1,1,1,,late,0", "area," + w + ",a,2,2,2,,ontime,1"}, "pane 1 is ontime"},
		{[]string{"area," + w + ",a,1,1,1,,early,0"}, "pane 0 is early"},
		{[]string{"area," + w + ",a,1,1,1,"}, "8 columns, want 10"},
		{[]string{"nope," + w + ",a,1,1,1,,ontime,0"}, `unknown kind "nope"`},
		{[]string{
			"session,2020-01-01T00:00:00Z,2020-01-05T00:00:00Z,a,2,2,2,,ontime,0",
			"session,2020-01-04T00:00:00Z,2020-01-09T00:00:00Z,a,2,2,2,,ontime,0",
		}, "overlaps"},
	} {
		_, err := ReadPanes(c.lines)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ReadPanes(%q): error %v, want one containing %q", c.lines, err, c.err)
		}
	}
}

// TestLateness: rows in arrival order against the newest event time of
// all rows before them, and of their partition's alone.
func TestLateness(t *testing.T) {
	const day = int64(24 * 3600 * 1000)
	w := WindowSize.Milliseconds()
	l := Lateness{OutOfOrderness: 30 * 24 * time.Hour, AllowedLateness: 365 * 24 * time.Hour}
	l.Observe(0, 100*w)         // newest of partition 0
	l.Observe(1, 100*w-40*day)  // 40 days behind partition 0; first of partition 1: nothing fired there
	l.Observe(0, 100*w-31*day)  // window [98w, 99w) ended 1 day before 100w: wm 100w-30d > its end
	l.Observe(0, 100*w-20*day)  // window [99w, 100w): ends at 100w > wm
	l.Observe(0, 100*w-500*day) // expired: its window ended > 365 days before the watermark
	got := fmt.Sprint(l.BehindNewest, l.Fired, l.Expired)
	if want := "3 2 1"; got != want {
		t.Errorf("behind newest, fired, expired = %s, want %s", got, want)
	}
}

// TestWindowingZeroIsBounded: the zero Windowing adds no WindowInto
// option, so the bounded job's pipeline is unchanged.
func TestWindowingZeroIsBounded(t *testing.T) {
	if n := len(Windowing{}.options()); n != 0 {
		t.Errorf("Windowing{} has %d WindowInto options, want 0", n)
	}
	if n := len(StreamWindowing(time.Hour).options()); n != 2 {
		t.Errorf("StreamWindowing has %d WindowInto options, want 2 (allowed lateness, accumulating)", n)
	}
}

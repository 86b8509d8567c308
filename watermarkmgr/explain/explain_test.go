package explain

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// at is t0 + s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func ev(s string) mtime.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return mtime.FromTime(t)
}

// running is a reported, unheld stage at watermark wm with tasks parts,
// whose watermark last moved at movedAt.
func running(name string, ups []string, wm mtime.Time, min int32, movedAt time.Time, parts ...Partition) Stage {
	return Stage{Name: name, Upstreams: ups, Reported: true, Watermark: wm, Total: int32(len(parts)), MinPartition: min, MovedAt: movedAt, Partitions: parts}
}

func TestExplain(t *testing.T) {
	now := at(120)
	wm1 := ev("2026-11-30T11:00:00Z")
	wm2 := ev("2026-11-30T11:30:00Z")
	fresh := at(119)
	tests := []struct {
		name   string
		stages []Stage
		// want is the explanation of the first stage.
		wantStuck bool
		wantCause Cause
		wantRoot  string
		wantPart  int32 // -1: none
		wantText  []string
	}{
		{
			// apache/beam#33815: s1 (topic b) never got a record and is
			// idle at the start of time; it is left out, so the chain goes
			// to s2, the live upstream, not to s1.
			name: "an idle upstream is left out: the chain follows the live one",
			stages: []Stage{
				running("s3", []string{"s1", "s2"}, wm1, 0, at(10), Partition{Partition: 0, Watermark: wm1, Reported: true, LastReport: fresh}),
				{Name: "s1", Reported: true, Watermark: mtime.MinTimestamp, Total: 1, AllIdle: true, MinPartition: -1, MovedAt: at(5),
					Partitions: []Partition{{Partition: 0, Reported: true, Idle: true, Watermark: mtime.MinTimestamp, LastReport: fresh}}},
				running("s2", nil, wm1, 0, at(10), Partition{Partition: 0, Watermark: wm1, Reported: true, LastReport: at(7), Owner: "vm-2"}),
			},
			wantStuck: true, wantCause: CauseTaskNotReported, wantRoot: "s2", wantPart: 0,
			wantText: []string{
				"s3 is held by its input from s2 (at 2026-11-30T11:00:00.000Z)",
				"s2 task 0 has not reported since 12:00:07",
			},
		},
		{
			name:      "done",
			stages:    []Stage{running("s2", []string{"s1"}, mtime.MaxTimestamp, -1, at(10))},
			wantCause: CauseDone, wantRoot: "s2", wantPart: -1,
			wantText: []string{"s2 is done: its watermark is at the end of time"},
		},
		{
			name: "held, not for long",
			stages: []Stage{{Name: "s0-src", Reported: true, Held: true, Missing: []int32{0, 2}, Total: 3, MinPartition: -1, Watermark: mtime.MinTimestamp, MovedAt: at(116),
				Partitions: []Partition{{Partition: 1, Reported: true, Watermark: wm1, LastReport: fresh}}}},
			wantCause: CauseMoving, wantRoot: "s0-src", wantPart: -1,
			wantText: []string{"s0 is held until all 3 of its tasks have reported: tasks 0, 2 not yet (for 4 s)"},
		},
		{
			name:      "moving",
			stages:    []Stage{running("s1", nil, wm1, 0, at(119.5), Partition{Partition: 0, Watermark: wm1, Reported: true, LastReport: fresh})},
			wantCause: CauseMoving, wantRoot: "s1", wantPart: -1,
			wantText: []string{"s1 is moving: its watermark changed 500 ms ago, to 2026-11-30T11:00:00.000Z"},
		},
		{
			name: "held by an upstream stage whose task has not reported, owned by this instance with an attempt open",
			stages: []Stage{
				running("s3", []string{"s1"}, wm1, 0, at(10), Partition{Partition: 0, Watermark: wm1, Reported: true, LastReport: fresh}),
				running("s1", nil, wm1, 2, at(10),
					Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh},
					Partition{Partition: 1, Watermark: wm2, Reported: true, LastReport: fresh},
					Partition{Partition: 2, Watermark: wm1, Reported: true, LastReport: at(7), Owner: "vm-1",
						Local: &Local{Instance: "vm-1", AttemptSince: at(106), LastCommit: at(7), LagRecords: -1}}),
			},
			wantStuck: true, wantCause: CauseAttemptOpen, wantRoot: "s1", wantPart: 2,
			wantText: []string{
				"s3 has not moved for 1 min 50 s (its watermark is at 2026-11-30T11:00:00.000Z)",
				"s3 is held by its input from s1 (at 2026-11-30T11:00:00.000Z)",
				"s1 task 2 has not reported since 12:00:07",
				"task 2 is owned by this instance (vm-1), whose attempt (bundles and transaction) has been open for 14 s",
			},
		},
		{
			name: "a task that has not reported since T, owned by another instance",
			stages: []Stage{running("s2", []string{"s1"}, wm1, 1, at(30),
				Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh},
				Partition{Partition: 1, Watermark: wm1, Reported: true, LastReport: at(30), Owner: "vm-2"}),
				running("s1", nil, wm2, 0, at(119), Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh})},
			wantStuck: true, wantCause: CauseTaskNotReported, wantRoot: "s2", wantPart: 1,
			wantText: []string{"s2 task 1 has not reported since 12:00:30", "task 1 was last reported by instance vm-2"},
		},
		{
			name: "a partition that never received a record and no idleness (its task never reported)",
			stages: []Stage{
				{Name: "s1", Head: "kafka_source", Reported: true, Held: true, Missing: []int32{3}, Total: 4, MinPartition: -1, Watermark: mtime.MinTimestamp, MovedAt: at(0),
					Partitions: []Partition{
						{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh, Source: &Source{Topic: "orders", HasLastEventTime: true, LastEventTime: wm2}},
						{Partition: 1, Watermark: wm2, Reported: true, LastReport: fresh, Source: &Source{Topic: "orders", HasLastEventTime: true, LastEventTime: wm2}},
						{Partition: 2, Watermark: wm2, Reported: true, LastReport: fresh, Source: &Source{Topic: "orders", HasLastEventTime: true, LastEventTime: wm2}},
						{Partition: 3, Watermark: mtime.MinTimestamp},
					}},
			},
			wantStuck: true, wantCause: CauseNeverReceivedNoIdleness, wantRoot: "s1", wantPart: 3,
			wantText: []string{
				"s1 is held until all 4 of its tasks have reported: task 3 has not",
				"partition 3 of topic orders has never received a record and the source has no idleness set",
			},
		},
		{
			name: "a partition that reported but never received a record, no idleness",
			stages: []Stage{running("s1", nil, mtime.MinTimestamp, 1, at(0),
				Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh, Source: &Source{Topic: "orders", HasLastEventTime: true, LastEventTime: wm2}},
				Partition{Partition: 1, Watermark: mtime.MinTimestamp, Reported: true, LastReport: fresh, Source: &Source{Topic: "orders"}})},
			wantStuck: true, wantCause: CauseNeverReceivedNoIdleness, wantRoot: "s1", wantPart: 1,
			wantText: []string{"partition 1 of topic orders has never received a record and the source has no idleness set"},
		},
		{
			name: "paused by alignment",
			stages: []Stage{running("s1", nil, wm2, 0, at(20),
				Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh,
					Source: &Source{Topic: "fast", HasLastEventTime: true, LastEventTime: wm2, Idleness: time.Minute, AlignmentGroup: "g", AlignmentHeld: true, DriftFromGroupMin: 40 * time.Second}})},
			wantStuck: true, wantCause: CauseAlignment, wantRoot: "s1", wantPart: 0,
			wantText: []string{"s1 task 0 (partition 0 of topic fast) is paused by watermark alignment group g: it is 40 s ahead of the group's minimum"},
		},
		{
			name: "a partition with records it cannot read yet",
			stages: []Stage{running("s1", nil, wm2, 0, at(20),
				Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh,
					Source: &Source{Topic: "orders", HasLastEventTime: true, LastEventTime: wm2, Idleness: 2 * time.Second, UnreadBecause: "a transaction is open (last stable offset 4, high watermark 9)"}})},
			wantStuck: true, wantCause: CauseUnread, wantRoot: "s1", wantPart: 0,
			wantText: []string{"partition 0 of topic orders holds records it cannot read yet because a transaction is open (last stable offset 4, high watermark 9): it holds the watermark, never idle"},
		},
		{
			name: "a quiet partition not idle for another cause",
			stages: []Stage{running("s1", nil, wm2, 0, at(20),
				Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh,
					Source: &Source{Topic: "orders", HasLastEventTime: true, LastEventTime: wm2, Idleness: 2 * time.Second, NotIdleBecause: "its leader cannot be fetched from (no leader, or its broker is down)"}})},
			wantStuck: true, wantCause: CauseNotIdle, wantRoot: "s1", wantPart: 0,
			wantText: []string{"partition 0 of topic orders is not idle though it has had no record for its idleness of 2 s, because its leader cannot be fetched from (no leader, or its broker is down): it holds the watermark until that passes"},
		},
		{
			name: "its own state holds it while its input is ahead",
			stages: []Stage{
				running("s2", []string{"s1"}, wm1, 0, at(0), Partition{Partition: 0, Watermark: wm1, Reported: true, LastReport: fresh}),
				running("s1", nil, wm2, 0, at(119), Partition{Partition: 0, Watermark: wm2, Reported: true, LastReport: fresh}),
			},
			wantStuck: true, wantCause: CauseHold, wantRoot: "s2", wantPart: 0,
			wantText: []string{"s2 task 0 holds it at 2026-11-30T11:00:00.000Z with its own state"},
		},
		{
			name: "an upstream with no report yet, deeper than one level",
			stages: []Stage{
				running("s3", []string{"s2"}, mtime.MinTimestamp, 0, at(0), Partition{Partition: 0, Reported: true, Watermark: mtime.MinTimestamp, LastReport: fresh}),
				{Name: "s2", Upstreams: []string{"s1"}},
				running("s1", nil, wm1, 0, at(119), Partition{Partition: 0, Watermark: wm1, Reported: true, LastReport: fresh}),
			},
			wantStuck: true, wantCause: CauseNoReport, wantRoot: "s2", wantPart: -1,
			wantText: []string{"s3 is held by its input from s2, which has not reported yet", "s2 has not reported yet"},
		},
		{
			name: "every task idle",
			stages: []Stage{{Name: "s1", Reported: true, AllIdle: true, MinPartition: -1, Watermark: wm1, MovedAt: at(0), Total: 1,
				Partitions: []Partition{{Partition: 0, Idle: true, Reported: true, Watermark: wm1, LastReport: fresh}}}},
			wantStuck: true, wantCause: CauseAllIdle, wantRoot: "s1", wantPart: -1,
			wantText: []string{"every task of s1 is idle"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(Input{Now: now, StuckAfter: 10 * time.Second, Stages: tc.stages})
			if len(got) != len(tc.stages) {
				t.Fatalf("got %d explanations for %d stages", len(got), len(tc.stages))
			}
			x := got[0]
			if x.Stuck != tc.wantStuck || x.Cause != tc.wantCause || x.RootStage != tc.wantRoot {
				t.Errorf("stuck=%v cause=%s root=%s, want stuck=%v cause=%s root=%s\n%s", x.Stuck, x.Cause, x.RootStage, tc.wantStuck, tc.wantCause, tc.wantRoot, x.Text)
			}
			switch {
			case tc.wantPart < 0 && x.Partition != nil:
				t.Errorf("partition %d, want none\n%s", *x.Partition, x.Text)
			case tc.wantPart >= 0 && (x.Partition == nil || *x.Partition != tc.wantPart):
				t.Errorf("partition %v, want %d\n%s", x.Partition, tc.wantPart, x.Text)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(x.Text, w) {
					t.Errorf("text lacks %q:\n%s", w, x.Text)
				}
			}
			if x.Text != strings.Join(x.Chain, "; ") {
				t.Errorf("Text %q is not the Chain joined", x.Text)
			}
		})
	}
}

// A malformed graph (a cycle) ends, naming both stages.
func TestExplainCycle(t *testing.T) {
	a := running("a", []string{"b"}, mtime.MinTimestamp, 0, t0, Partition{Partition: 0, Reported: true, Watermark: mtime.MinTimestamp, LastReport: t0})
	b := running("b", []string{"a"}, mtime.MinTimestamp, 0, t0, Partition{Partition: 0, Reported: true, Watermark: mtime.MinTimestamp, LastReport: t0})
	x := Explain(Input{Now: at(60), StuckAfter: time.Second, Stages: []Stage{a, b}})[0]
	if !strings.Contains(x.Text, "from b") || x.Cause == "" {
		t.Errorf("got %+v", x)
	}
}

func TestDur(t *testing.T) {
	for d, want := range map[time.Duration]string{250 * time.Millisecond: "250 ms", 14 * time.Second: "14 s", 185 * time.Second: "3 min 5 s", 3*time.Hour + 2*time.Minute: "3 h 2 min", 72 * time.Hour: "3 days"} {
		if got := dur(d); got != want {
			t.Errorf("dur(%v) = %q, want %q", d, got, want)
		}
	}
}

// A stage without a report is not stuck until StuckAfter has passed since
// the watching began; then it says which of its tasks this instance holds.
func TestExplainNoReportYet(t *testing.T) {
	st := []Stage{{Name: "s4-Sink", LocalTasks: []int32{0, 2}, Instance: "vm-1"}}
	x := Explain(Input{Now: at(5), Since: at(0), StuckAfter: 10 * time.Second, Stages: st})[0]
	if x.Stuck || x.Cause != CauseNoReport || !strings.Contains(x.Text, "s4 has not reported yet (watching for 5 s)") {
		t.Errorf("5 s after the start: %+v", x)
	}
	x = Explain(Input{Now: at(15), Since: at(0), StuckAfter: 10 * time.Second, Stages: st})[0]
	if !x.Stuck || x.Cause != CauseNoReport || !strings.Contains(x.Text, "this instance (vm-1) is assigned its tasks 0, 2 but has committed none of their work yet") {
		t.Errorf("15 s after the start: %+v", x)
	}
}

func TestID(t *testing.T) {
	for name, want := range map[string]string{"s3-Fixed30d_CoGBK": "s3", "s12-x-y": "s12", "stage-x": "stage-x", "s3": "s3", "sx-1": "sx-1"} {
		if got := id(name); got != want {
			t.Errorf("id(%q) = %q, want %q", name, got, want)
		}
	}
}

package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/cmd/commitactivity/activity"
	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
)

// TestCommitStream runs the streaming variant of the main job (`make
// run-stream`: activity.Load, then activity.StreamPipeline: a bounded
// kafkaio.Read with a 30-day out-of-orderness watermark and 3 s idleness,
// the job's windows with 365 days of allowed lateness and accumulating
// panes, kafkaio.Write of every pane's rows) over git-commits.csv, and
// checks:
//
//   - the load: 60 746 records in arrival order over 4 partitions, and
//     what a watermark could find late in them (exact: a function of the
//     file);
//   - the job parsed every record once;
//   - the panes are consistent (activity.ReadPanes: each (window, area)'s
//     pane indexes 0..n once each, growing totals, only the first on time);
//   - the check: on-time + late rows (the final area panes) + the rows the
//     runner dropped at the fixed windows' GroupByKey = 60 746, and the
//     final sessions + the rows dropped at the sessions' GroupByKey too;
//   - every final area row is the bounded job's (activity.Reference) but
//     in windows that lost dropped rows, and those lost exactly the
//     dropped rows;
//   - late and dropped rows within the bounds of one partition's
//     watermark (activity.Lateness: the source's watermark is the minimum
//     over the partitions, each reported after the outputs of its rows).
//
// How many rows are late or dropped is not fixed: it depends on how far
// each partition's read has got when the others report (see the README's
// `make run-stream` section), so those are logged and bounded, not
// compared with constants.
func TestCommitStream(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const rows = 60746
	in, out := uniqueName(t, "in"), uniqueName(t, "out")

	start := time.Now()
	loaded, err := activity.Load(ctx, bs, commitActivityData, in, activity.StreamPartitions, activity.StreamOutOfOrderness, activity.StreamAllowedLateness)
	if err != nil {
		t.Fatal(err)
	}
	loadTime := time.Since(start)
	l := loaded.Lateness
	if got, want := fmt.Sprint(loaded.Rows, loaded.PerPartition, l.BehindNewest, l.Fired, l.Expired), fmt.Sprint(rows, []int{6025, 14301, 9890, 30530}, 1382, 959, 98); got != want {
		t.Fatalf("load: rows, per partition, behind the newest, fired, expired = %s, want %s", got, want)
	}
	if n, err := activity.TopicRecords(ctx, bs, in); err != nil || n != rows {
		t.Fatalf("the input topic holds %d records (%v), want %d", n, err, rows)
	}
	if err := kafkaenv.CreateTopics(ctx, bs, activity.TopicSpec(out, activity.StreamPartitions)); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	r := runApp(t, ctx, bs, uniqueName(t, "app"), activity.StreamPipeline(activity.DefaultStreamOptions(in, out)))
	jobTime := time.Since(start)
	c := counters(r)
	if c["parsed_rows"] != rows || c["malformed_rows"] != 0 {
		t.Errorf("counters parsed_rows=%d malformed_rows=%d, want %d and 0", c["parsed_rows"], c["malformed_rows"], rows)
	}
	fixedDropped, err := activity.DroppedRows(r.Plan, r.LateDropped, activity.FixedGroupByKey)
	if err != nil {
		t.Fatal(err)
	}
	sessionsDropped, err := activity.DroppedRows(r.Plan, r.LateDropped, activity.SessionsGroupByKey)
	if err != nil {
		t.Fatal(err)
	}

	recs, err := kafkaenv.Consume(ctx, bs, out, -1, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, len(recs))
	for i, rec := range recs {
		lines[i] = string(rec.Value)
	}
	panes, err := activity.ReadPanes(lines)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load %v, job %v; %d output rows; on time %d, late %d, dropped %d (fixed windows; %d at the sessions); area panes %v; top.Largest fired again in %d of %d windows; dropped by stage %v",
		loadTime.Round(time.Millisecond), jobTime.Round(time.Millisecond), len(lines), panes.OnTime, panes.Late, fixedDropped, sessionsDropped, panes.AreaPanes, panes.TopRefired, panes.TopWindows, r.LateDropped)

	// The check.
	if panes.OnTime+panes.Late != panes.Final || panes.Final+fixedDropped != rows {
		t.Errorf("windows: on time %d + late %d = final panes %d, + dropped %d = %d, want %d input rows", panes.OnTime, panes.Late, panes.Final, fixedDropped, panes.Final+fixedDropped, rows)
	}
	if panes.SessionCommits+sessionsDropped != rows {
		t.Errorf("sessions: final panes %d + dropped %d = %d, want %d input rows", panes.SessionCommits, sessionsDropped, panes.SessionCommits+sessionsDropped, rows)
	}
	if panes.AreaPanes["late"] == 0 && panes.Late > 0 {
		t.Errorf("%d late rows without a late pane", panes.Late)
	}
	// Bounds: a row's partition reports its watermark after the row's
	// output, and the GroupByKey's watermark is the minimum over them.
	if panes.Late+fixedDropped > int64(l.Fired) || fixedDropped > int64(l.Expired) {
		t.Errorf("late %d + dropped %d rows, dropped %d: more than their partitions' watermarks could find (%d late, %d expired)", panes.Late, fixedDropped, fixedDropped, l.Fired, l.Expired)
	}

	// Against the bounded job: equal area totals but where rows were
	// dropped, and exactly the dropped rows missing there.
	want, _ := activity.Reference(readLines(t, commitActivityData))
	ref := areaTotals(t, want)
	got := areaTotals(t, panes.FinalRows)
	var missing int64
	differ := 0
	for k, rt := range ref {
		gt, ok := got[k]
		switch {
		case ok && gt == rt:
			continue
		case ok && (gt.Commits >= rt.Commits || gt.Insertions > rt.Insertions || gt.Deletions > rt.Deletions):
			t.Errorf("area %s: %+v, the bounded job %+v: more than every row of the window", k, gt, rt)
		}
		differ++
		missing += rt.Commits - gt.Commits
	}
	for k, gt := range got {
		if _, ok := ref[k]; !ok {
			t.Errorf("area %s: %+v, not in the bounded job's output", k, gt)
		}
	}
	if missing != fixedDropped {
		t.Errorf("%d (window, area) totals lack %d commits of the bounded job's, want the %d dropped rows", differ, missing, fixedDropped)
	}
	// The final table's ranking is the bounded job's in every window that
	// lost no row.
	lost := map[string]bool{}
	for k, rt := range ref {
		if got[k] != rt {
			lost[strings.SplitN(k, ",", 2)[0]] = true
		}
	}
	keep := func(rows []string) []string {
		var out []string
		for _, row := range rows {
			f := strings.Split(row, ",")
			if f[0] == activity.KindTop && !lost[f[1]] {
				out = append(out, row)
			}
		}
		return out
	}
	if g, w := keep(panes.FinalRows), keep(want); !slices.Equal(g, w) {
		t.Errorf("top rows of windows without dropped rows: %d, the bounded job %d; first differences:%s", len(g), len(w), activity.DiffSorted(g, w, 5))
	}
}

// areaTotals maps the "area" rows of rows (CSVHeader) by "start,area".
func areaTotals(t *testing.T, rows []string) map[string]activity.Totals {
	t.Helper()
	m := map[string]activity.Totals{}
	for _, row := range rows {
		f := strings.Split(row, ",")
		if f[0] != activity.KindArea {
			continue
		}
		var tot activity.Totals
		for i, p := range []*int64{&tot.Commits, &tot.Insertions, &tot.Deletions} {
			v, err := strconv.ParseInt(f[4+i], 10, 64)
			if err != nil {
				t.Fatalf("row %q: %v", row, err)
			}
			*p = v
		}
		m[f[1]+","+f[3]] = tot
	}
	return m
}

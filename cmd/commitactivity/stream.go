package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"

	"github.com/kafkastreams/kafkastreams/cmd/commitactivity/activity"
	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
)

// loadTopic is --load: --input into the new topic --input_topic.
func loadTopic(ctx context.Context) error {
	if *inputTopic == "" {
		return errors.New("--load needs --input_topic")
	}
	start := time.Now()
	st, err := activity.Load(ctx, bootstrap(), *input, *inputTopic, *partitions, activity.StreamOutOfOrderness, activity.StreamAllowedLateness)
	if err != nil {
		return err
	}
	day := func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.DateOnly) }
	l := st.Lateness
	fmt.Printf("loaded %d rows into %s in %v: in file (arrival) order, keyed by area, CreateTime = event_ms (%s to %s); records per partition: %v\n",
		st.Rows, *inputTopic, time.Since(start).Round(100*time.Millisecond), day(st.MinEventMillis), day(st.MaxEventMillis), st.PerPartition)
	fmt.Printf("%d rows arrive more than %v behind the newest event time before them (late to a watermark that had read every earlier row);\n", l.BehindNewest, days(l.OutOfOrderness))
	fmt.Printf("against their own partition's watermark (its newest event time before them - %v), %d arrive after their window's end\n(the most that can be late), %d of them more than %v after it (the most that can be dropped)\n",
		days(l.OutOfOrderness), l.Fired, l.Expired, days(l.AllowedLateness))
	return nil
}

// runStream is --stream: the streaming job over --input_topic, then the
// final table, the counts and the check read back from --output_topic.
func runStream(ctx context.Context) error {
	if name := *runners.Runner; name != "" && name != runner.Name {
		return fmt.Errorf("--stream runs on --runner=%s only (it reports the runner's late-dropped counts), not %s", runner.Name, name)
	}
	if *inputTopic == "" || *outputTopic == "" {
		return errors.New("--stream needs --input_topic (written by --load) and --output_topic")
	}
	bs := bootstrap()
	if err := kafkaenv.CreateTopics(ctx, bs, activity.TopicSpec(*outputTopic, activity.StreamPartitions)); err != nil {
		return err
	}
	opts := activity.DefaultStreamOptions(*inputTopic, *outputTopic)
	log.Printf("running the streaming job on %s at %s, application %s: %s -> %s; watermark: newest event time per partition - %v, idle after %v; windows: allowed lateness %v, accumulating panes",
		runner.Name, bs, runner.OptionsFromFlags().ApplicationID, opts.InputTopic, opts.OutputTopic, days(opts.OutOfOrderness), opts.Idleness, days(opts.AllowedLateness))
	start := time.Now()
	res, err := beam.Run(ctx, runner.Name, activity.StreamPipeline(opts))
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("the streaming job failed after %v: %w", took.Round(time.Millisecond), err)
	}
	r := res.(*runner.Result)
	counters := map[string]int64{}
	for _, c := range res.Metrics().AllMetrics().Counters() {
		counters[c.Key.Name] += c.Committed
	}
	log.Printf("done in %v: the job parsed %d rows and skipped %d malformed rows; values dropped as expired, by stage: %v", took.Round(time.Millisecond), counters["parsed_rows"], counters["malformed_rows"], r.LateDropped)

	recs, err := kafkaenv.Consume(ctx, bs, *outputTopic, -1, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		return err
	}
	lines := make([]string, len(recs))
	for i, rec := range recs {
		lines[i] = string(rec.Value)
	}
	panes, err := activity.ReadPanes(lines)
	if err != nil {
		return err
	}
	sum, err := activity.Summarize(panes.FinalRows)
	if err != nil {
		return err
	}
	fixedDropped, err := activity.DroppedRows(r.Plan, r.LateDropped, activity.FixedGroupByKey)
	if err != nil {
		return err
	}
	sessionsDropped, err := activity.DroppedRows(r.Plan, r.LateDropped, activity.SessionsGroupByKey)
	if err != nil {
		return err
	}
	records, err := activity.TopicRecords(ctx, bs, opts.InputTopic)
	if err != nil {
		return err
	}

	fmt.Printf("\n%d rows of every pane in %s (read_committed); the final rows, each window's last pane:\n\n", len(lines), opts.OutputTopic)
	sum.PrintTable(os.Stdout, 6, 5)
	fmt.Printf("\nthe %d input rows by their 30-day window (%d area panes on time, %d late):\n", records, panes.AreaPanes["ontime"], panes.AreaPanes["late"])
	fmt.Printf("  on time  %6d  in their window's on-time pane (the watermark had not passed the window's end)\n", panes.OnTime)
	fmt.Printf("  late     %6d  in a late pane (they arrived after the watermark had passed their window's end, by at most %v)\n", panes.Late, days(opts.AllowedLateness))
	fmt.Printf("  dropped  %6d  by more than %v: their window had expired (the runner's LateDropped of %s)\n", fixedDropped, days(opts.AllowedLateness), activity.FixedGroupByKey)
	fmt.Printf("(how many are late or dropped varies from run to run: the watermark is the minimum over the %d partitions,\nreported once per transaction of up to %d records, so it depends on how far each partition's read has got)\n", activity.StreamPartitions, runner.OptionsFromFlags().MaxBundleSize)
	fmt.Printf("top rows: top.Largest fired again in %d of %d windows, after late area panes (its rows carry no pane, and a late one ranks an area's earlier total beside its later one): the table ranks the final area totals\n", panes.TopRefired, panes.TopWindows)

	var failed []string
	check := func(name string, final, dropped, want int64) {
		verdict := "ok"
		if final+dropped != want {
			verdict = "FAILED"
			failed = append(failed, name)
		}
		fmt.Printf("check %-9s final panes %d + dropped %d = %d, input rows %d: %s\n", name+":", final, dropped, final+dropped, want, verdict)
	}
	read := counters["parsed_rows"] + counters["malformed_rows"]
	if read != records || counters["malformed_rows"] != 0 {
		failed = append(failed, "rows read")
		fmt.Printf("check rows read: the job parsed %d rows and skipped %d malformed ones; the input topic holds %d: FAILED\n", counters["parsed_rows"], counters["malformed_rows"], records)
	}
	check("windows", panes.Final, fixedDropped, records)
	check("sessions", panes.SessionCommits, sessionsDropped, records)
	if len(failed) > 0 {
		return fmt.Errorf("check failed: %v", failed)
	}
	return nil
}

// days writes d in days.
func days(d time.Duration) string { return fmt.Sprintf("%d days", int(d/(24*time.Hour))) }

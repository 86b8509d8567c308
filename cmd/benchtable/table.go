package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Row is one line of the table: what is measured, this runner's figure,
// the baseline's (measured in the same run), their ratio, and the goal of
// issue 13 it answers.
type Row struct {
	What, Ours, Baseline, Ratio, Goal string
}

// notMeasured fills a row whose benchmark has no result in the input.
const notMeasured = "not measured in this run"

// The benchmarks make bench runs (integration/bench_test.go,
// startup_bench_test.go, scale_bench_test.go).
const (
	benchStartup   = "BenchmarkStartup"
	benchStateless = "BenchmarkStatelessStage"
	benchGBK       = "BenchmarkGroupByKeyStage"
	benchSource    = "BenchmarkKafkaSourceStage"
	benchScale     = "BenchmarkScale"
	benchInstances = "BenchmarkInstances"
	partsPrefix    = "BenchmarkPartitions/partitions="
	ksPrefix       = "BenchmarkKafkaStreams/records="
	ksSteady       = "BenchmarkKafkaStreams/steady"
	ksRestore      = "BenchmarkKafkaStreams/restore"
	smallJob       = benchScale + "/job=git-commits.csv"
	scalePrefix    = benchScale + "/events="
)

// ScalePoint is BenchmarkScale's result for one synthetic input size.
// Seconds are wall times (child start to exit); RSS in bytes; a runner not
// run has zero Seconds (Prism: PrismNeed, its projected peak RSS in bytes).
type ScalePoint struct {
	Events                    int
	OursSeconds, PrismSeconds float64
	OursRSS, PrismRSS         float64
	PrismNeed                 float64
}

// scalePoint reads one BenchmarkScale sub-benchmark's metrics (see its doc
// for the units).
func scalePoint(events int, m map[string]float64) ScalePoint {
	return ScalePoint{
		Events:       events,
		OursSeconds:  m["ours-s"],
		PrismSeconds: m["prism-s"],
		OursRSS:      m["ours-peakRSS-MB"] * 1e6,
		PrismRSS:     m["prism-peakRSS-MB"] * 1e6,
		PrismNeed:    m["prism-need-GB"] * 1e9,
	}
}

// Scale returns BenchmarkScale's synthetic sizes in the results, smallest
// first.
func Scale(res Results) []ScalePoint {
	var pts []ScalePoint
	for name, m := range res {
		if n, err := strconv.Atoi(strings.TrimPrefix(name, scalePrefix)); strings.HasPrefix(name, scalePrefix) && err == nil {
			pts = append(pts, scalePoint(n, m))
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].Events < pts[j].Events })
	return pts
}

// Table returns issue 13's goals as rows, each from the benchmark that
// measures it, in the order: start-up, the small job, the stage
// pairs, the scale sizes, multi-instance (no benchmark yet), partitions. A
// benchmark missing from res gives a row saying so.
func Table(res Results) []Row {
	var rows []Row
	pair := func(what, bench, ours, base, ratio, goal string, f func(o, b, r float64) (string, string, string)) {
		m, ok := res[bench]
		if !ok {
			rows = append(rows, Row{what, notMeasured, notMeasured, "—", goal})
			return
		}
		o, b, r := f(m[ours], m[base], m[ratio])
		rows = append(rows, Row{what, o, b, r, goal})
	}
	pair("start-up: Execute → first record read, warm broker (median of 5)", benchStartup,
		"runner-ms", "bare-ms", "runner/bare", "≤ 1.5 s from process start",
		func(o, b, r float64) (string, string, string) {
			return fmt.Sprintf("%s ms", num(o)), fmt.Sprintf("bare consumer's first read %s ms", num(b)), fmt.Sprintf("%.2fx", r)
		})
	if m, ok := res[smallJob]; ok {
		p := scalePoint(60746, m)
		r := scaleRow("`make run` job, git-commits.csv (60 746 commits), wall incl. start-up", p, "≤ 2x Prism's wall time")
		if p.PrismSeconds > 0 { // the goal is a ratio of wall times
			r.Ratio = fmt.Sprintf("%.2fx Prism's wall time, %.2fx its memory", p.OursSeconds/p.PrismSeconds, p.OursRSS/p.PrismRSS)
		}
		rows = append(rows, r)
	} else {
		rows = append(rows, Row{"`make run` job, git-commits.csv (60 746 commits), wall incl. start-up", notMeasured, notMeasured, "—", "≤ 2x Prism's wall time"})
	}
	rate := func(o, b, r float64) (string, string, string) {
		return fmt.Sprintf("%s rec/s", num(o)), fmt.Sprintf("%s rec/s", num(b)), fmt.Sprintf("%.2f", r)
	}
	pair("stateless stage vs plain transactional copy loop", benchStateless, "stage-records/s", "copy-records/s", "stage/copy", "≥ 0.9", rate)
	pair("GroupByKey stage vs stateless stage", benchGBK, "gbk-records/s", "stateless-records/s", "gbk/stateless", "≥ 0.6", rate)
	pair("Kafka source stage (Read → Write) vs copy loop", benchSource, "source-records/s", "copy-records/s", "source/copy", "—", rate)
	pts := Scale(res)
	if len(pts) == 0 {
		rows = append(rows, Row{"main job over N synthetic events", notMeasured, notMeasured, "—", "≥ 1.5x Prism's throughput at 3 M and above"})
	}
	for _, p := range pts {
		rows = append(rows, scaleRow(fmt.Sprintf("main job over %s synthetic events, wall", num(float64(p.Events))), p,
			"≥ 1.5x Prism's throughput at 3 M and above; RSS flat"))
	}
	rows = append(rows, instancesRow(res))
	rows = append(rows, partitionsRow(res))
	rows = append(rows, kafkaStreamsRows(res)...)
	return rows
}

// The goals of issue 24's Kafka Streams rows.
const (
	ksBatchGoal   = "issue 24: wall ≤ KS's, CPU s per M records (process + broker) ≤ KS's, ahead of KS with 2 threads"
	ksSteadyGoal  = "issue 24: p99 ≤ KS's"
	ksRestoreGoal = "issue 24: restore MB/s against KS's"
)

// kafkaStreamsRows are BenchmarkKafkaStreams' rows (issue 24): for each
// batch size it ran, smallest first, this runner's wall time to the last
// row visible read_committed, CPU seconds (its process; the broker's over
// the same span) and peak RSS, against Kafka Streams with 1 thread (and
// the wall time with 2), and the ratios ours/KS 1 thread of wall time and
// of CPU seconds; then the steady run's latency p50/p99 (window end +
// grace to the row visible read_committed) and cores. Without any result
// one row says the benchmark was not measured.
func kafkaStreamsRows(res Results) []Row {
	var ns []int
	for name := range res {
		if n, err := strconv.Atoi(strings.TrimPrefix(name, ksPrefix)); strings.HasPrefix(name, ksPrefix) && err == nil {
			ns = append(ns, n)
		}
	}
	sort.Ints(ns)
	var rows []Row
	side := func(m map[string]float64, p string) string {
		s := fmt.Sprintf("%.2f s, %.1f CPU s, %.2f GB; broker %.1f CPU s", m[p+"-s"], m[p+"-cpu-s"], m[p+"-peakRSS-MB"]/1e3, m[p+"-broker-cpu-s"])
		if jit, ok := m[p+"-broker-jit-s"]; ok {
			// The broker JVM's JIT compilers' part (BenchmarkKafkaStreams'
			// -broker-jit-s; absent in logs before it).
			s += fmt.Sprintf(" (JIT %.1f)", jit)
		}
		return s
	}
	for _, n := range ns {
		m := res[ksPrefix+strconv.Itoa(n)]
		what := fmt.Sprintf("windowed sum (10 s windows, 1 000 keys, 4 partitions, exactly once), %s records: wall to the last row visible read_committed, CPU s, peak RSS", num(float64(n)))
		base := "Kafka Streams 1 thread " + side(m, "ks1")
		if m["ks2-s"] > 0 {
			base += fmt.Sprintf("; 2 threads %.2f s", m["ks2-s"])
		}
		ratio := fmt.Sprintf("ours/KS 1 thread: wall %.2f, CPU %.2f", m["ours/ks1"], m["ours/ks1-cpu"])
		if k := m["ks1-cpu-s"] + m["ks1-broker-cpu-s"]; k > 0 && m["ks1-broker-cpu-s"] > 0 {
			ratio += fmt.Sprintf(", CPU with the broker's %.2f", (m["ours-cpu-s"]+m["ours-broker-cpu-s"])/k)
			oj, ojok := m["ours-broker-jit-s"]
			kj, kjok := m["ks1-broker-jit-s"]
			if ojok && kjok && k-kj > 0 {
				// The broker JVM's JIT is a cost of its first hours, not of
				// the job (BenchmarkKafkaStreams' warmBroker).
				ratio += fmt.Sprintf(" (its JIT left out %.2f)", (m["ours-cpu-s"]+m["ours-broker-cpu-s"]-oj)/(k-kj))
			}
		}
		if m["ks2-s"] > 0 {
			ratio += fmt.Sprintf("; wall ours/KS 2 threads %.2f", m["ours-s"]/m["ks2-s"])
		}
		rows = append(rows, Row{what, side(m, "ours"), base, ratio, ksBatchGoal})
	}
	if len(ns) == 0 {
		rows = append(rows, Row{"windowed sum against Kafka Streams, batch", notMeasured, notMeasured, "—", ksBatchGoal})
	}
	const steadyWhat = "windowed sum, steady 2 000 records/s: latency from window end + 1 s grace to the row visible read_committed, p50 / p99"
	if m, ok := res[ksSteady]; ok {
		lat := func(p string) string {
			return fmt.Sprintf("%s / %s ms, %.2f core", num(m[p+"-p50-ms"]), num(m[p+"-p99-ms"]), m[p+"-cores"])
		}
		ratio := "—"
		if m["ks1-p99-ms"] > 0 {
			ratio = fmt.Sprintf("%.2fx / %.2fx", m["ours-p50-ms"]/m["ks1-p50-ms"], m["ours-p99-ms"]/m["ks1-p99-ms"])
		}
		rows = append(rows, Row{steadyWhat, lat("ours"), "Kafka Streams 1 thread " + lat("ks1"), ratio, ksSteadyGoal})
	} else {
		rows = append(rows, Row{steadyWhat, notMeasured, notMeasured, "—", ksSteadyGoal})
	}
	m, ok := res[ksRestore]
	if !ok {
		return append(rows, Row{"task store restored from its changelog partition into a fresh store", notMeasured, notMeasured, "—", ksRestoreGoal})
	}
	what := fmt.Sprintf("task store restored from its changelog partition (%s MB of 1 KiB values) into a fresh store", num(m["changelog-MB"]))
	rest := func(p string) string {
		return fmt.Sprintf("%.1f MB/s, %.2f s, %.1f CPU s", m[p+"-restore-MB/s"], m[p+"-restore-s"], m[p+"-cpu-s"])
	}
	return append(rows, Row{what, rest("ours"), "Kafka Streams (RocksDB) " + rest("ks"), fmt.Sprintf("ours/KS time %.2f", m["restore-ours/ks"]), ksRestoreGoal})
}

// instancesRow is BenchmarkInstances' row: the job's values/s with 1, 2
// and 3 instances, their CPU seconds per million values, and the rate of k
// instances over one's.
func instancesRow(res Results) Row {
	const what = "multi-instance: records/s of 1, 2, 3 instances, CPU s per M records"
	one, ok := res[benchInstances+"/instances=1"]
	if !ok {
		return Row{what, notMeasured, notMeasured, "—", "measured"}
	}
	var rates, cpus, ratios []string
	for k := 1; k <= 3; k++ {
		m, ok := res[fmt.Sprintf("%s/instances=%d", benchInstances, k)]
		if !ok {
			continue
		}
		rates = append(rates, fmt.Sprintf("%d: %s rec/s", k, num(m["records/s"])))
		cpus = append(cpus, fmt.Sprintf("%d: %.1f", k, m["cpu-s/M"]))
		if k > 1 {
			ratios = append(ratios, fmt.Sprintf("%d vs 1: %.2fx", k, m["records/s"]/one["records/s"]))
		}
	}
	return Row{what, strings.Join(rates, ", "), "CPU s per M records " + strings.Join(cpus, ", "), strings.Join(ratios, ", "), "measured"}
}

// partitionsRow is BenchmarkPartitions' row: for each partition count P
// it ran (P upstream tasks, Q = P downstream partitions), the source
// stage's records/s, the whole job's, report records per data record and,
// where measured, the CPU seconds per million records of the runner's
// process and of the broker (where the time goes as P grows); as the
// baseline, its report records per commit beside P·(Q+1), what one report
// per task to every downstream partition and to the report topic would
// cost if every task reported at every commit; as the ratio, each P's
// source and job rates against the smallest P's in the same run (issue
// 24: at least 0.7 at 128). With several rounds (alternating order, each
// count's medians), each P's cell gives the source rate's range.
func partitionsRow(res Results) Row {
	const what, goal = "partitions: throughput and report records per data record at 4, 32, 128, 512 (a backlog of 1 M records)", "O(P + Q) reports per interval; rate at 128 ≥ 0.7x that at 4 (issue 24)"
	var ps []int
	for name := range res {
		if n, err := strconv.Atoi(strings.TrimPrefix(name, partsPrefix)); strings.HasPrefix(name, partsPrefix) && err == nil {
			ps = append(ps, n)
		}
	}
	if len(ps) == 0 {
		return Row{what, notMeasured, notMeasured, "—", goal}
	}
	sort.Ints(ps)
	var ours, base, ratios []string
	first := res[partsPrefix+strconv.Itoa(ps[0])]
	for _, p := range ps {
		m := res[partsPrefix+strconv.Itoa(p)]
		cell := fmt.Sprintf("P=%d: %s rec/s", p, num(m["source-records/s"]))
		if m["rounds"] > 1 {
			cell += fmt.Sprintf(" (median of %.0f rounds, %s-%s)", m["rounds"], num(m["min-source-records/s"]), num(m["max-source-records/s"]))
		}
		if m["job-records/s"] > 0 {
			cell += fmt.Sprintf(" (job %s)", num(m["job-records/s"]))
		}
		cell += fmt.Sprintf(", %.3f reports/record", m["reports/record"])
		if m["runner-cpu-s/M"] > 0 {
			cell += fmt.Sprintf(", CPU s/M records runner %.1f + broker %.1f", m["runner-cpu-s/M"], m["broker-cpu-s/M"])
		}
		ours = append(ours, cell)
		base = append(base, fmt.Sprintf("P=%d: %s reports/commit (P·(Q+1) = %s)", p, num(m["reports/commit"]), num(float64(p*(p+1)))))
		if p != ps[0] && first["source-records/s"] > 0 {
			r := fmt.Sprintf("P=%d vs %d: %.2fx", p, ps[0], m["source-records/s"]/first["source-records/s"])
			if first["job-records/s"] > 0 {
				r += fmt.Sprintf(" (job %.2fx)", m["job-records/s"]/first["job-records/s"])
			}
			ratios = append(ratios, r)
		}
	}
	ratio := "—"
	if len(ratios) > 0 {
		ratio = strings.Join(ratios, ", ")
	}
	return Row{what, strings.Join(ours, "; "), strings.Join(base, "; "), ratio, goal}
}

// scaleRow is a BenchmarkScale row: both runners' wall time, events/s and
// peak RSS, and the ratio of throughputs (Prism's wall / ours) and of
// memory.
func scaleRow(what string, p ScalePoint, goal string) Row {
	run := func(secs, rss float64) string {
		return fmt.Sprintf("%.1f s, %s events/s, peak RSS %.2f GB", secs, num(float64(p.Events)/secs), rss/1e9)
	}
	r := Row{What: what, Ours: run(p.OursSeconds, p.OursRSS), Goal: goal}
	switch {
	case p.PrismSeconds > 0:
		r.Baseline = "Prism " + run(p.PrismSeconds, p.PrismRSS)
		r.Ratio = fmt.Sprintf("%.2fx Prism's throughput, %.2fx its memory", p.PrismSeconds/p.OursSeconds, p.OursRSS/p.PrismRSS)
	case p.PrismNeed > 0:
		r.Baseline = fmt.Sprintf("Prism not run: would need ~%.1f GB", p.PrismNeed/1e9)
		r.Ratio = "—"
	default:
		r.Baseline, r.Ratio = notMeasured, "—"
	}
	return r
}

// num formats x rounded to an integer with a space between thousands
// (40 749), as the table does.
func num(x float64) string {
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Print writes rows as a Markdown table (README-ready).
func Print(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| what | this runner | baseline (same run) | ratio | goal (issue 13) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.What, r.Ours, r.Baseline, r.Ratio, r.Goal)
	}
}

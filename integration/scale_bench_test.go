package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/cmd/commitactivity/activity"
)

// EnvBenchScale lists BenchmarkScale's input sizes in events (synthetic
// commits), comma-separated, e.g. "100000,300000"; `make bench SCALE=…`
// sets it. Default DefaultBenchScale.
const EnvBenchScale = "KAFKASTREAMS_BENCH_SCALE"

// DefaultBenchScale is BenchmarkScale's sizes when EnvBenchScale is unset:
// issue 13's 1 M, 3 M and 10 M events.
const DefaultBenchScale = "1000000,3000000,10000000"

// EnvBenchMemory caps, in GB, the memory BenchmarkScale lets Prism be
// projected to need (`make bench BENCH_MEMORY_GB=…`: a shared machine's
// share); unset, the machine's available memory counts alone.
const EnvBenchMemory = "KAFKASTREAMS_BENCH_MEMORY_GB"

// envBenchBin names a built cmd/commitactivity for BenchmarkScale (make
// bench passes bin/commitactivity); unset, the benchmark builds one.
const envBenchBin = "KAFKASTREAMS_BENCH_COMMITACTIVITY"

// prismBytesPerEvent is the peak RSS Prism needs per input event of the
// main job when no run of this benchmark has measured it yet: issue 13's
// 5.36 GB at 1 822 000 events is 2.9 KB an event, rounded up.
const prismBytesPerEvent = 3 << 10

// memoryShare is the fraction of the machine's available memory
// (/proc/meminfo MemAvailable) a child may be projected to need before it
// is run; a child whose RSS passes killShare of what was available when it
// started is killed (never the machine).
const (
	memoryShare = 0.8
	killShare   = 0.9
)

// BenchmarkScale runs the main job (cmd/commitactivity, the windows of
// `make run`: 30-day fixed windows with per-area totals and the top 5,
// 7-day sessions) as a child process on this runner (one instance, the
// package's broker) and on Prism (in the child's process), first over
// git-commits.csv (the `make run` job itself, 60 746 commits: the small-job
// row) and then over activity.Synthesize's rows (seed 1) for each size of
// EnvBenchScale, one size after the other, this runner first. For each
// runner it reports the wall time (the child's start to its exit: start-up
// included, as `make run` counts it; the broker already up), events/s
// (events / wall time) and the child's peak RSS (the VmHWM it logs at its
// end: its own, the broker's JVM not included; the waited child's
// ru_maxrss would be the benchmark process's RSS at the fork, 1.4 GB after
// the other benchmarks, for both runners), and this runner's throughput
// over Prism's. Metrics, per sub-benchmark:
//
//	ours-s, ours-events/s, ours-peakRSS-MB      this runner
//	prism-s, prism-events/s, prism-peakRSS-MB  Prism
//	ours/prism                                 throughput ratio (= Prism's wall / ours)
//	prism-need-GB                              Prism not run: its projected peak RSS
//
// Prism's memory grows with the input (about 3 KB an event, issue 13): it
// is run only where its projected peak RSS (a line through its last two
// measured sizes, or prismBytesPerEvent) is at most memoryShare of the
// machine's available memory (and at most EnvBenchMemory GB); otherwise
// the sub-benchmark reports
// prism-need-GB instead. Both runners must parse every event and write the
// same rows (compared sorted) where both ran. It ignores b.N: run it with
// -benchtime=1x (make bench; cmd/benchtable turns the output into the
// table and the plot).
func BenchmarkScale(b *testing.B) {
	if broker == nil {
		b.Skip("needs a Kafka broker; not under -short")
	}
	sizes, err := parseScale(os.Getenv(EnvBenchScale))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	bin := os.Getenv(envBenchBin)
	if bin == "" {
		bin = filepath.Join(dir, "commitactivity")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/commitactivity").CombinedOutput(); err != nil {
			b.Fatalf("go build ../cmd/commitactivity: %v\n%s", err, out)
		}
	} else if bin, err = filepath.Abs(bin); err != nil {
		b.Fatal(err)
	}
	var prism []rssPoint // Prism's measured peaks, by size
	run := func(b *testing.B, in string, events int) {
		ours := runJobChild(b, bin, dir, in, events, "kafkastreams")
		b.ReportMetric(ours.wall.Seconds(), "ours-s")
		b.ReportMetric(float64(events)/ours.wall.Seconds(), "ours-events/s")
		b.ReportMetric(float64(ours.peakRSS)/1e6, "ours-peakRSS-MB")
		need := projectRSS(prism, events)
		avail := memAvailable()
		if gb, err := strconv.ParseFloat(os.Getenv(EnvBenchMemory), 64); err == nil && gb > 0 {
			avail = min(avail, int64(gb*1e9/memoryShare))
		}
		if float64(need) > memoryShare*float64(avail) {
			b.ReportMetric(float64(need)/1e9, "prism-need-GB")
			b.Logf("%d events: this runner %.1f s (%.0f events/s, peak RSS %.2f GB); Prism not run: would need ~%.1f GB, %.1f GB available",
				events, ours.wall.Seconds(), float64(events)/ours.wall.Seconds(), float64(ours.peakRSS)/1e9, float64(need)/1e9, float64(avail)/1e9)
			return
		}
		pr := runJobChild(b, bin, dir, in, events, "prism")
		prism = append(prism, rssPoint{events, pr.peakRSS})
		if !slices.Equal(ours.rows, pr.rows) {
			b.Fatalf("%d events: this runner wrote %d rows, Prism %d; they differ:%s", events, len(ours.rows), len(pr.rows), activity.DiffSorted(ours.rows, pr.rows, 5))
		}
		b.ReportMetric(pr.wall.Seconds(), "prism-s")
		b.ReportMetric(float64(events)/pr.wall.Seconds(), "prism-events/s")
		b.ReportMetric(float64(pr.peakRSS)/1e6, "prism-peakRSS-MB")
		b.ReportMetric(pr.wall.Seconds()/ours.wall.Seconds(), "ours/prism")
		b.Logf("%d events, %d output rows: this runner %.1f s (%.0f events/s, peak RSS %.2f GB), Prism %.1f s (%.0f events/s, peak RSS %.2f GB; %.1f GB projected), throughput ratio %.2f",
			events, len(ours.rows), ours.wall.Seconds(), float64(events)/ours.wall.Seconds(), float64(ours.peakRSS)/1e9,
			pr.wall.Seconds(), float64(events)/pr.wall.Seconds(), float64(pr.peakRSS)/1e9, float64(need)/1e9, pr.wall.Seconds()/ours.wall.Seconds())
	}
	b.ResetTimer()
	real, err := filepath.Abs(commitActivityData)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("job=git-commits.csv", func(b *testing.B) { runSmallJob(b, bin, dir, real, 60746) })
	for _, n := range sizes {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			in := filepath.Join(dir, fmt.Sprintf("synth-%d.csv", n))
			f, err := os.Create(in)
			if err != nil {
				b.Fatal(err)
			}
			err = activity.Synthesize(f, activity.Synthesis{Rows: n, Seed: 1})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				b.Fatal(err)
			}
			defer os.Remove(in)
			run(b, in, n)
		})
	}
}

// smallJobRounds is how many times BenchmarkScale runs the small job on
// each runner: a run of a few seconds on a loaded 2-core machine varies by
// a second (2.0-3.3 s here in one sitting), one run decides nothing.
const smallJobRounds = 5

// runSmallJob is BenchmarkScale's small-job row: the job over in (events
// rows) smallJobRounds times on this runner and on Prism, alternating (this
// runner first in each round), each run's rows compared with Prism's. It
// reports the same metrics as a scale row, each the median of its rounds
// (ours/prism: Prism's median wall over ours), and logs every round. One
// run on each runner before the rounds is not counted: on a broker started
// a moment before (the package's, when -bench selects this row alone) the
// first runs were up to 1.5x slower, falling run after run while the
// broker's JVM compiled its hot paths (3.5, 3.6, 3.1, 2.7, 2.3 s).
func runSmallJob(b *testing.B, bin, dir, in string, events int) {
	runJobChild(b, bin, dir, in, events, "kafkastreams")
	runJobChild(b, bin, dir, in, events, "prism")
	var ours, prism []time.Duration
	var ourRSS, prismRSS []int64
	for i := 0; i < smallJobRounds; i++ {
		o := runJobChild(b, bin, dir, in, events, "kafkastreams")
		p := runJobChild(b, bin, dir, in, events, "prism")
		if !slices.Equal(o.rows, p.rows) {
			b.Fatalf("round %d: this runner wrote %d rows, Prism %d; they differ:%s", i+1, len(o.rows), len(p.rows), activity.DiffSorted(o.rows, p.rows, 5))
		}
		ours, prism = append(ours, o.wall), append(prism, p.wall)
		ourRSS, prismRSS = append(ourRSS, o.peakRSS), append(prismRSS, p.peakRSS)
	}
	o, p := median(ours), median(prism)
	b.ReportMetric(o.Seconds(), "ours-s")
	b.ReportMetric(float64(events)/o.Seconds(), "ours-events/s")
	b.ReportMetric(float64(medianRSS(ourRSS))/1e6, "ours-peakRSS-MB")
	b.ReportMetric(p.Seconds(), "prism-s")
	b.ReportMetric(float64(events)/p.Seconds(), "prism-events/s")
	b.ReportMetric(float64(medianRSS(prismRSS))/1e6, "prism-peakRSS-MB")
	b.ReportMetric(p.Seconds()/o.Seconds(), "ours/prism")
	b.Logf("%d events, median of %d rounds: this runner %.2f s (rounds %v), Prism %.2f s (rounds %v): this runner takes %.2fx Prism's wall time",
		events, smallJobRounds, o.Seconds(), roundAll(ours), p.Seconds(), roundAll(prism), o.Seconds()/p.Seconds())
}

// medianRSS returns the median of peaks (the upper one of an even count).
func medianRSS(peaks []int64) int64 {
	s := slices.Clone(peaks)
	slices.Sort(s)
	return s[len(s)/2]
}

// parseScale parses EnvBenchScale's list (empty: DefaultBenchScale) into
// positive event counts.
func parseScale(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultBenchScale
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive event count (list: %q)", EnvBenchScale, f, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// rssPoint is a child's peak RSS in bytes over an input of events.
type rssPoint struct {
	events  int
	peakRSS int64
}

// projectRSS returns the peak RSS in bytes Prism is expected to need for
// events, from the points measured so far (in increasing size): through the
// last two points, a line (slope at least 0); through one, that point plus
// prismBytesPerEvent for each further event; with none, 300 MB plus
// prismBytesPerEvent an event. Never less than the largest measured peak.
func projectRSS(pts []rssPoint, events int) int64 {
	switch len(pts) {
	case 0:
		return 300e6 + int64(events)*prismBytesPerEvent
	case 1:
		p := pts[0]
		return p.peakRSS + int64(max(0, events-p.events))*prismBytesPerEvent
	}
	p1, p2 := pts[len(pts)-2], pts[len(pts)-1]
	slope := 0.0
	if p2.events != p1.events {
		slope = max(0, float64(p2.peakRSS-p1.peakRSS)/float64(p2.events-p1.events))
	}
	return max(p2.peakRSS, p2.peakRSS+int64(slope*float64(events-p2.events)))
}

// memAvailable returns /proc/meminfo's MemAvailable in bytes (0 if it
// cannot be read: then nothing is projected to fit).
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "MemAvailable: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}

// vmRSS returns the resident set of process pid in bytes (/proc/<pid>/status
// VmRSS), or 0 once it cannot be read.
func vmRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}

// jobRun is one child run of the main job.
type jobRun struct {
	wall    time.Duration // the child's start to its exit
	peakRSS int64         // bytes: the child's VmHWM, as it logged it
	rows    []string      // its output CSV's rows, sorted
}

var (
	parsedRows = regexp.MustCompile(`parsed (\d+) rows and skipped (\d+) malformed rows`)
	peakRSS    = regexp.MustCompile(`peak RSS of this process: (\d+) KiB`)
)

// runJobChild runs the built main job bin over in on runnerName
// (kafkastreams against the package's broker, under a fresh application
// id; or prism) and checks it parsed events rows and skipped none. A
// watchdog kills the child if its RSS passes killShare of the memory
// available when it started (the benchmark fails, the machine lives).
func runJobChild(b *testing.B, bin, dir, in string, events int, runnerName string) jobRun {
	b.Helper()
	out := filepath.Join(dir, fmt.Sprintf("out-%s-%d.csv", runnerName, events))
	logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", runnerName, events))
	args := []string{"--runner=" + runnerName, "--input=" + in, "--output=" + out, "--table=false"}
	if runnerName == "kafkastreams" {
		args = append(args, "--bootstrap_servers="+broker.BootstrapServers(),
			fmt.Sprintf("--application_id=scale-%d-%d", events, time.Now().UnixNano()), "--watermarks_addr=",
			"--state_dir="+filepath.Join(dir, "state"))
	}
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	limit := int64(killShare * float64(memAvailable()))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	killed := make(chan int64, 1)
	stop := make(chan struct{})
	go func() { // the watchdog
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if rss := vmRSS(cmd.Process.Pid); rss > limit {
					_ = cmd.Process.Kill()
					killed <- rss
					return
				}
			}
		}
	}()
	err = cmd.Wait()
	wall := time.Since(start)
	close(stop)
	logText, _ := os.ReadFile(logPath)
	select {
	case rss := <-killed:
		b.Fatalf("%s over %d events: killed at RSS %.1f GB, past %.1f GB (%.0f%% of the memory available at its start)", runnerName, events, float64(rss)/1e9, float64(limit)/1e9, killShare*100)
	default:
	}
	if err != nil {
		b.Fatalf("%s over %d events: %v after %v; its log's end:\n%s", runnerName, events, err, wall.Round(time.Millisecond), tail(string(logText), 4000))
	}
	m := parsedRows.FindSubmatch(logText)
	if m == nil || string(m[1]) != strconv.Itoa(events) || string(m[2]) != "0" {
		b.Fatalf("%s over %d events: want %d rows parsed and none skipped; its log's end:\n%s", runnerName, events, events, tail(string(logText), 4000))
	}
	peak := peakRSS.FindSubmatch(logText)
	if peak == nil {
		b.Fatalf("%s over %d events: the child logged no peak RSS; its log's end:\n%s", runnerName, events, tail(string(logText), 4000))
	}
	kib, _ := strconv.ParseInt(string(peak[1]), 10, 64)
	rows, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(rows)), "\n")
	slices.Sort(lines)
	os.Remove(out)
	return jobRun{wall: wall, peakRSS: kib << 10, rows: lines}
}

// TestProjectRSS checks BenchmarkScale's projection of Prism's memory,
// which decides whether a size is run at all.
func TestProjectRSS(t *testing.T) {
	for _, c := range []struct {
		pts    []rssPoint
		events int
		want   int64
	}{
		{nil, 1_000_000, 300e6 + 1_000_000*prismBytesPerEvent},
		{[]rssPoint{{100_000, 500e6}}, 300_000, 500e6 + 200_000*prismBytesPerEvent},
		{[]rssPoint{{100_000, 500e6}}, 50_000, 500e6},
		// 1 M: 3.5 GB, 3 M: 9.5 GB → 3 KB an event: 10 M needs 30.5 GB.
		{[]rssPoint{{60_746, 200e6}, {1_000_000, 3_500e6}, {3_000_000, 9_500e6}}, 10_000_000, 30_500e6},
		{[]rssPoint{{100_000, 900e6}, {300_000, 800e6}}, 1_000_000, 800e6},
	} {
		if got := projectRSS(c.pts, c.events); got != c.want {
			t.Errorf("projectRSS(%v, %d) = %d, want %d", c.pts, c.events, got, c.want)
		}
	}
	if got, err := parseScale(""); err != nil || !slices.Equal(got, []int{1_000_000, 3_000_000, 10_000_000}) {
		t.Errorf("parseScale(\"\") = %v, %v", got, err)
	}
	if _, err := parseScale("100000,0"); err == nil {
		t.Error("parseScale accepted 0 events")
	}
}

package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/kafkastreams/kafkastreams/cmd/commitactivity/activity"
	"github.com/kafkastreams/kafkastreams/runner"
)

var (
	input  = flag.String("input", "cmd/commitactivity/data/git-commits.csv", "the git-commits.csv file to read")
	output = flag.String("output", "commitactivity.csv", "the CSV file to write (rows in no particular order; columns: "+activity.CSVHeader+")")
	table  = flag.Bool("table", true, "print a short table of the output when the job is done")
	show   = flag.Bool("show", false, "run nothing: print the table from the output topic of --application_id (and compare it with --output if that file exists)")

	load        = flag.Bool("load", false, "run nothing: write --input to the new topic --input_topic (arrival order, keyed by area, --partitions partitions, CreateTime = event_ms)")
	stream      = flag.Bool("stream", false, "run the streaming variant on --runner=kafkastreams: read --input_topic (written by --load), write every pane's rows to --output_topic; print the final table, the on-time, late and dropped rows and the check")
	inputTopic  = flag.String("input_topic", "", "--load, --stream: the topic of git-commits.csv's rows")
	outputTopic = flag.String("output_topic", "", "--stream: the topic the rows are written to (created; must not exist)")
	partitions  = flag.Int("partitions", activity.StreamPartitions, "--load: the input topic's partitions")

	synthesize = flag.Int("synthesize", 0, "run nothing: write this many synthetic commit-like rows (activity.Synthesize: git-commits.csv's format, deterministic in --synth_seed) to --synth_file, for the scale benchmarks")
	synthSeed  = flag.Uint64("synth_seed", 1, "--synthesize: the seed")
	synthFile  = flag.String("synth_file", "", "--synthesize: the file to write (created or truncated)")
)

func main() {
	flag.Parse()
	beam.Init()
	log.SetFlags(0)
	log.SetPrefix("commitactivity: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case *synthesize != 0:
		err = synthesizeFile()
	case *show:
		err = showTopic(ctx)
	case *load:
		err = loadTopic(ctx)
	case *stream:
		err = runStream(ctx)
	default:
		err = run(ctx)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func bootstrap() string {
	if runner.OptionsFromFlags().BootstrapServers != "" {
		return runner.OptionsFromFlags().BootstrapServers
	}
	if b := os.Getenv("KAFKA_BOOTSTRAP_SERVERS"); b != "" {
		return b
	}
	return "127.0.0.1:9092"
}

func run(ctx context.Context) error {
	name := *runners.Runner
	if name == "" {
		name = runner.Name
	}
	if _, err := os.Stat(*input); err != nil {
		return fmt.Errorf("input: %w (run from the repository's root, or pass --input)", err)
	}
	if name == runner.Name {
		log.Printf("running on %s at %s, application %s; reading %s", name, bootstrap(), runner.OptionsFromFlags().ApplicationID, *input)
	} else {
		log.Printf("running on %s; reading %s", name, *input)
	}
	start := time.Now()
	res, err := beam.Run(ctx, name, activity.Pipeline(activity.Options{Input: *input, Output: *output}))
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("the job failed after %v: %w", took.Round(time.Millisecond), err)
	}
	counters := map[string]int64{}
	if res != nil {
		for _, c := range res.Metrics().AllMetrics().Counters() {
			counters[c.Key.Name] += c.Committed
		}
	}
	whose := "the job"
	if r, ok := res.(*runner.Result); ok && !r.ApplicationMetrics {
		whose = "this instance"
	}
	log.Printf("done in %v on %s: %s parsed %d rows and skipped %d malformed rows", took.Round(time.Millisecond), name, whose, counters["parsed_rows"], counters["malformed_rows"])
	if kb, err := peakRSSKiB(); err == nil {
		log.Printf("peak RSS of this process: %d KiB (VmHWM)", kb)
	}
	if r, ok := res.(*runner.Result); ok {
		topic, err := activity.OutputTopic(r.Plan)
		if err != nil {
			return err
		}
		log.Printf("output: topic %s (read_committed), file %s", topic, *output)
	} else {
		log.Printf("output: file %s", *output)
	}
	if !*table {
		return nil
	}
	rows, err := readCSV(*output)
	if err != nil {
		return err
	}
	return printTable(rows)
}

// peakRSSKiB returns this process's peak resident set in KiB: VmHWM of
// /proc/self/status (Linux only), the high-water mark of the memory map
// this program was exec'ed into. (getrusage's ru_maxrss would not do: a
// child started by a large Go process inherits its parent's RSS at the
// fork as its maxrss, kept across exec; BenchmarkScale reads this line.)
func peakRSSKiB() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// showTopic prints the table from the output topic, and checks that the CSV
// file, if there is one, holds the same rows.
func showTopic(ctx context.Context) error {
	if runner.OptionsFromFlags().ApplicationID == "" {
		return errors.New("--show needs --application_id")
	}
	topic, err := activity.FindOutputTopic(bootstrap(), runner.OptionsFromFlags().ApplicationID)
	if err != nil {
		return err
	}
	rows, err := activity.ReadTopic(ctx, bootstrap(), topic)
	if err != nil {
		return err
	}
	slices.Sort(rows)
	log.Printf("read %d rows from topic %s (read_committed)", len(rows), topic)
	if fileRows, err := readCSV(*output); err == nil {
		if !slices.Equal(rows, fileRows) {
			return fmt.Errorf("the topic's %d rows differ from the %d rows of %s:%s", len(rows), len(fileRows), *output, activity.DiffSorted(rows, fileRows, 5))
		}
		log.Printf("the topic holds the same %d rows as %s, each once", len(rows), *output)
	}
	return printTable(rows)
}

// readCSV returns the rows of the CSV file, sorted.
func readCSV(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rows = append(rows, sc.Text())
	}
	slices.Sort(rows)
	return rows, sc.Err()
}

func printTable(rows []string) error {
	sum, err := activity.Summarize(rows)
	if err != nil {
		return err
	}
	fmt.Println()
	sum.PrintTable(os.Stdout, 6, 5)
	fmt.Println()
	return nil
}

// synthesizeFile writes --synthesize synthetic rows to --synth_file.
func synthesizeFile() error {
	if *synthFile == "" {
		return errors.New("--synthesize needs --synth_file, the file to write")
	}
	f, err := os.Create(*synthFile)
	if err != nil {
		return err
	}
	if err := activity.Synthesize(f, activity.Synthesis{Rows: *synthesize, Seed: *synthSeed}); err != nil {
		f.Close()
		return fmt.Errorf("--synthesize: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	log.Printf("wrote %d synthetic rows (seed %d) to %s", *synthesize, *synthSeed, *synthFile)
	return nil
}

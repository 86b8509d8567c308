// Command benchtable turns the output of `make bench` (go test -bench over
// integration/: BenchmarkStartup, BenchmarkStatelessStage,
// BenchmarkGroupByKeyStage, BenchmarkKafkaSourceStage, BenchmarkInstances,
// BenchmarkPartitions, BenchmarkScale, BenchmarkKafkaStreams) into the one
// table of issue 13's goals and issue 24's Kafka Streams baseline, printed
// as Markdown on stdout (this runner, the baseline measured in the same
// run, the ratio, the goal; a goal whose benchmark did not run says so),
// and a PNG plot of the main
// job's wall time against input size for this runner and Prism.
//
//	go run ./cmd/benchtable --in=.cache/bench.log --plot=cmd/benchtable/bench-scale.png
//
// Flags:
//
//	--in PATH     the benchmark output to read ["-": stdin]
//	--plot PATH   the PNG to write; empty: none [cmd/benchtable/bench-scale.png]
//
// The table's heading and the plot's title say when the benchmarks ended
// (the input file's modification time; stdin: now), the machine's cores
// and, read within 5 minutes of that, its load average. It fails (exit 1)
// if the input holds no benchmark result at all.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strings"
	"time"
)

var (
	in       = flag.String("in", "-", `the go test -bench output to read ("-": stdin)`)
	plotPath = flag.String("plot", "cmd/benchtable/bench-scale.png", "the PNG plot of wall time against input size to write (empty: none)")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("benchtable: ")
	var r io.Reader = os.Stdin
	ran := time.Now() // when the benchmarks ended: the input's last write
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		r = f
		if st, err := f.Stat(); err == nil {
			ran = st.ModTime()
		}
	}
	res, err := Parse(r)
	if err != nil {
		log.Fatal(err)
	}
	if len(res) == 0 {
		log.Fatalf("no benchmark result in %s", *in)
	}
	when := fmt.Sprintf("%s, %d cores", ran.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU())
	if time.Since(ran) < 5*time.Minute { // the load the benchmarks ran under
		when += ", load average " + loadAverage()
	}
	fmt.Printf("\nmake bench, %s:\n\n", when)
	Print(os.Stdout, Table(res))
	if *plotPath == "" {
		return
	}
	if pts := Scale(res); len(pts) == 0 {
		fmt.Printf("\nno scale size measured: no plot written\n")
	} else if err := PlotScale(*plotPath, "the main job (make run's windows) over synthetic commits\n"+when, pts); err != nil {
		log.Fatal(err)
	} else {
		fmt.Printf("\nplot: %s\n", *plotPath)
	}
}

// loadAverage returns /proc/loadavg's 1, 5 and 15 minute figures ("?" if
// it cannot be read).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

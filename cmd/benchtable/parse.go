package main

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Results are the metrics of a `go test -bench` run: benchmark name (its
// GOMAXPROCS suffix "-N" removed, sub-benchmarks as "Parent/sub") to unit
// (as ReportMetric named it, e.g. "stage-records/s", "ns/op") to value.
type Results map[string]map[string]float64

var procsSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads `go test -bench` output (the standard benchmark format: a
// line "BenchmarkName[-procs] <iterations> <value> <unit> [<value>
// <unit>…]") and returns every benchmark line's metrics. Other lines (logs,
// PASS, ok) are skipped; a benchmark that ran twice keeps its last line.
func Parse(r io.Reader) (Results, error) {
	res := Results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // not a result line
		}
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			m[f[i+1]] = v
		}
		res[procsSuffix.ReplaceAllString(f[0], "")] = m
	}
	return res, sc.Err()
}

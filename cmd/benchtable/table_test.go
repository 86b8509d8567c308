package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTable reads testdata/bench.txt (a make bench output with the
// startup, stateless, instances, partitions (4 and 128 only, out of order)
// and scale benchmarks, the sizes out of order and Prism not run at 3 M,
// and BenchmarkKafkaStreams at 1 M with its steady run and restore, issue 24's
// figures) and checks every row of the table.
func TestTable(t *testing.T) {
	f, err := os.Open("testdata/bench.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 13 {
		t.Fatalf("parsed %d benchmarks, want 13: %v", len(res), res)
	}
	var out bytes.Buffer
	Print(&out, Table(res))
	want := `| what | this runner | baseline (same run) | ratio | goal (issue 13) |
|---|---|---|---|---|
| start-up: Execute → first record read, warm broker (median of 5) | 812 ms | bare consumer's first read 173 ms | 4.69x | ≤ 1.5 s from process start |
| ` + "`make run`" + ` job, git-commits.csv (60 746 commits), wall incl. start-up | 4.1 s, 14 816 events/s, peak RSS 0.31 GB | Prism 2.0 s, 30 373 events/s, peak RSS 0.25 GB | 2.05x Prism's wall time, 1.24x its memory | ≤ 2x Prism's wall time |
| stateless stage vs plain transactional copy loop | 40 749 rec/s | 83 980 rec/s | 0.49 | ≥ 0.9 |
| GroupByKey stage vs stateless stage | not measured in this run | not measured in this run | — | ≥ 0.6 |
| Kafka source stage (Read → Write) vs copy loop | not measured in this run | not measured in this run | — | — |
| main job over 1 000 000 synthetic events, wall | 60.0 s, 16 667 events/s, peak RSS 0.90 GB | Prism 90.0 s, 11 111 events/s, peak RSS 3.10 GB | 1.50x Prism's throughput, 0.29x its memory | ≥ 1.5x Prism's throughput at 3 M and above; RSS flat |
| main job over 3 000 000 synthetic events, wall | 160.0 s, 18 750 events/s, peak RSS 0.95 GB | Prism not run: would need ~10.2 GB | — | ≥ 1.5x Prism's throughput at 3 M and above; RSS flat |
| multi-instance: records/s of 1, 2, 3 instances, CPU s per M records | 1: 25 000 rec/s, 2: 35 000 rec/s, 3: 36 000 rec/s | CPU s per M records 1: 40.0, 2: 45.2, 3: 50.1 | 2 vs 1: 1.40x, 3 vs 1: 1.44x | measured |
| partitions: throughput and report records per data record at 4, 32, 128, 512 (a backlog of 1 M records) | P=4: 40 000 rec/s (median of 2 rounds, 38 000-42 000) (job 30 000), 0.012 reports/record; P=128: 5 000 rec/s (job 21 000), 3.250 reports/record, CPU s/M records runner 56.4 + broker 38.8 | P=4: 12 reports/commit (P·(Q+1) = 20); P=128: 8 000 reports/commit (P·(Q+1) = 16 512) | P=128 vs 4: 0.12x (job 0.70x) | O(P + Q) reports per interval; rate at 128 ≥ 0.7x that at 4 (issue 24) |
| windowed sum (10 s windows, 1 000 keys, 4 partitions, exactly once), 1 000 000 records: wall to the last row visible read_committed, CPU s, peak RSS | 6.41 s, 6.4 CPU s, 0.27 GB; broker 3.1 CPU s (JIT 0.9) | Kafka Streams 1 thread 8.24 s, 11.6 CPU s, 0.77 GB; broker 1.0 CPU s (JIT 0.3); 2 threads 8.43 s | ours/KS 1 thread: wall 0.78, CPU 0.55, CPU with the broker's 0.75 (its JIT left out 0.70); wall ours/KS 2 threads 0.76 | issue 24: wall ≤ KS's, CPU s per M records (process + broker) ≤ KS's, ahead of KS with 2 threads |
| windowed sum, steady 2 000 records/s: latency from window end + 1 s grace to the row visible read_committed, p50 / p99 | 215 / 300 ms, 0.19 core | Kafka Streams 1 thread 89 / 135 ms, 0.30 core | 2.42x / 2.22x | issue 24: p99 ≤ KS's |
| task store restored from its changelog partition (1 074 MB of 1 KiB values) into a fresh store | 75.5 MB/s, 14.21 s, 10.3 CPU s | Kafka Streams (RocksDB) 72.6 MB/s, 14.79 s, 20.8 CPU s | ours/KS time 0.96 | issue 24: restore MB/s against KS's |
`
	if got := out.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestNum(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 999: "999", 1000: "1 000", 40749.4: "40 749", 10_000_000: "10 000 000", -1234: "-1 234"} {
		if got := num(x); got != want {
			t.Errorf("num(%v) = %q, want %q", x, got, want)
		}
	}
}

// TestPlotScale writes the plot of testdata/bench.txt and checks it is a
// PNG of the size asked (20 x 12 cm at gonum's default 96 dpi).
func TestPlotScale(t *testing.T) {
	res, err := Parse(strings.NewReader(mustRead(t, "testdata/bench.txt")))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "docs", "scale.png")
	if err := PlotScale(path, "test", Scale(res)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 756 || b.Dy() != 454 {
		t.Errorf("plot is %dx%d pixels, want 756x454", b.Dx(), b.Dy())
	}
	if err := PlotScale(path, "test", nil); err == nil {
		t.Error("PlotScale with no sizes did not fail")
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEvents(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 500: "500", 100_000: "100k", 1_000_000: "1M", 2_500_000: "2.5M", 10_000_000: "10M"} {
		if got := events(x); got != want {
			t.Errorf("events(%v) = %q, want %q", x, got, want)
		}
	}
}

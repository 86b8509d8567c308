package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/textio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/kafkastreams/kafkastreams/runner"
)

// commitsCSV is every non-merge commit of git/git, one CSV row each after a
// header (see /work/shared/data/README.md): 60 746 rows, 3.3 MB.
const commitsCSV = "../cmd/commitactivity/data/git-commits.csv" // the data of make run (cmd/commitactivity/data/README.md)

var textioRows = beam.NewCounter("kafkastreams.test", "textio_rows")

// commitSummary turns a row of git-commits.csv
// (arrival_ms,event_ms,commit,area,files,insertions,deletions) into
// "area commit +insertions -deletions", and drops the header. It fails on a
// row with another number of fields.
func commitSummary(ctx context.Context, line string, emit func(string)) error {
	if strings.HasPrefix(line, "arrival_ms,") {
		return nil
	}
	f := strings.Split(line, ",")
	if len(f) != 7 {
		return fmt.Errorf("commitSummary: row %q has %d fields, want 7", line, len(f))
	}
	textioRows.Inc(ctx, 1)
	emit(fmt.Sprintf("%s %s +%s -%s", f[3], f[2], f[5], f[6]))
	return nil
}

func init() {
	register.Function3x1(commitSummary)
}

// textioPipeline is textio.Read(in) -> commitSummary -> textio.Write(out).
func textioPipeline(in, out string) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	lines := textio.Read(s, in)
	textio.Write(s, out, beam.ParDo(s, commitSummary, lines))
	return p
}

// expectedSummaries computes commitSummary over the file directly, sorted.
func expectedSummaries(t *testing.T, path string) []string {
	t.Helper()
	var want []string
	for _, line := range readLines(t, path) {
		if err := commitSummary(context.Background(), line, func(s string) { want = append(want, s) }); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	return want
}

// readLines returns the lines of a text file, without their newlines.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// diffSorted describes how two sorted multisets differ (at most a few lines).
func diffSorted(got, want []string) string {
	var b strings.Builder
	i, j, shown := 0, 0, 0
	for (i < len(got) || j < len(want)) && shown < 5 {
		switch {
		case j >= len(want) || (i < len(got) && got[i] < want[j]):
			fmt.Fprintf(&b, "\n  extra   %q", got[i])
			i++
			shown++
		case i >= len(got) || want[j] < got[i]:
			fmt.Fprintf(&b, "\n  missing %q", want[j])
			j++
			shown++
		default:
			i++
			j++
		}
	}
	return b.String()
}

// TestTextioReadParDoWrite runs textio.Read -> ParDo -> textio.Write over the
// 60 746 rows of git-commits.csv on this runner (real broker) and on Prism,
// and checks that both wrote exactly the lines computed directly in Go, as a
// sorted multiset: textio.Read is a splittable DoFn (offset-range
// restriction, processed whole), textio.Write a GroupByKey and a ParDo.
func TestTextioReadParDoWrite(t *testing.T) {
	b := needBroker(t)
	in, err := filepath.Abs(commitsCSV)
	if err != nil {
		t.Fatal(err)
	}
	want := expectedSummaries(t, in)
	if len(want) != 60746 {
		t.Fatalf("%s has %d rows, want 60746", in, len(want))
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	check := func(name, out string) {
		t.Helper()
		got := readLines(t, out)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s wrote %d lines, want %d; first differences:%s", name, len(got), len(want), diffSorted(got, want))
		}
	}

	if !beam.Initialized() {
		beam.Init() // Prism's universal runner insists; kafkastreams does it itself
	}
	prismOut := filepath.Join(dir, "prism.txt")
	start := time.Now()
	if _, err := prism.Execute(ctx, textioPipeline(in, prismOut)); err != nil {
		t.Fatalf("prism: %v", err)
	}
	prismTime := time.Since(start)
	check("prism", prismOut)

	ksOut := filepath.Join(dir, "kafkastreams.txt")
	start = time.Now()
	res, err := beam.Run(withJob(ctx, b.BootstrapServers(), uniqueName(t, "app")), runner.Name, textioPipeline(in, ksOut))
	if err != nil {
		t.Fatalf("kafkastreams: %v", err)
	}
	ksTime := time.Since(start)
	check("kafkastreams", ksOut)
	if got := counter(t, res, "textio_rows"); got != int64(len(want)) {
		t.Errorf("textio_rows: %d, want %d", got, len(want))
	}
	var stages []string
	for _, s := range res.(*runner.Result).Plan.Stages {
		stages = append(stages, fmt.Sprintf("%s%v", s.Name, s.TransformNames))
	}
	t.Logf("%d lines; prism %v, kafkastreams %v; stages %s", len(want), prismTime.Round(time.Millisecond), ksTime.Round(time.Millisecond), strings.Join(stages, " "))
}

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ownModuleMain is the pipeline TestOwnModule builds in a module of its
// own: the words of three lines, counted (stats.Count), formatted, grouped
// under one key and written, sorted, to --output by a DoFn.
const ownModuleMain = `// Command wordcount counts the words of three lines and writes "word count"
// lines, sorted, to --output.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	_ "github.com/kafkastreams/kafkastreams/runner" // registers --runner=kafkastreams
)

var output = flag.String("output", "counts.txt", "the file the counts are written to")

func splitWords(line string, emit func(string)) {
	for _, w := range strings.Fields(line) {
		emit(w)
	}
}

func formatCount(word string, n int) string { return fmt.Sprintf("%s %d", word, n) }

// writeFileFn writes every line of its one key to Path, sorted.
type writeFileFn struct {
	Path string
}

func (f *writeFileFn) ProcessElement(_ int, lines func(*string) bool) error {
	var all []string
	var l string
	for lines(&l) {
		all = append(all, l)
	}
	slices.Sort(all)
	return os.WriteFile(f.Path, []byte(strings.Join(all, "\n")+"\n"), 0o644)
}

func init() {
	register.Function2x0(splitWords)
	register.Emitter1[string]()
	register.Function2x1(formatCount)
	register.DoFn2x1[int, func(*string) bool, error](&writeFileFn{})
	register.Iter1[string]()
}

func main() {
	flag.Parse()
	beam.Init()
	p, s := beam.NewPipelineWithRoot()
	lines := beam.Create(s, "the quick brown fox", "jumps over the lazy dog", "the dog sleeps")
	counts := stats.Count(s, beam.ParDo(s, splitWords, lines))
	all := beam.GroupByKey(s, beam.AddFixedKey(s, beam.ParDo(s, formatCount, counts)))
	beam.ParDo0(s, &writeFileFn{Path: *output}, all)
	if err := beamx.Run(context.Background(), p); err != nil {
		log.Fatal(err)
	}
}
`

// ownModuleWant is what ownModuleMain writes.
var ownModuleWant = []string{
	"brown 1", "dog 2", "fox 1", "jumps 1", "lazy 1", "over 1", "quick 1", "sleeps 1", "the 3",
}

// TestOwnModule keeps the README's "Your own pipeline" commands true: a
// pipeline in a module of its own (example.com/wordcount, in a temporary
// directory) that imports github.com/kafkastreams/kafkastreams/runner
// builds with exactly the README's commands (go mod init; go mod edit
// -replace to this checkout; go get of the zero pseudo-version; go mod
// tidy; go build), builds with the Beam SDK version of this repository's
// go.mod, and the binary runs with --runner=kafkastreams against the
// broker and writes the expected counts. It also builds the same program
// the README's other way, a go.work holding both modules.
//
// It guards what a new user hit: the module is on no proxy, so a plain
// `go get` of it fails (403 from proxy.golang.org) and the README said
// nothing; and the README's example lacked flag.Parse(), without which
// beamx.Run ignores --runner and runs the pipeline on Prism, silently (the
// test checks the runner's own completion line in the log).
//
// The module and build caches are the caller's (GOPROXY, GOCACHE and
// GOMODCACHE from the environment): with a warm module cache no step needs
// the network, and the builds compile only the new main package.
func TestOwnModule(t *testing.T) {
	b := needBroker(t)
	// 8 minutes: the builds link Beam and librdkafka; with other builds on
	// the machine the first took 2 min 14 s and the second was killed at the
	// former 4-minute bound (a CI run of session 10, with the scenario
	// tests' brokers and another test binary compiling beside it).
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	gomod := strings.TrimSpace(goCmd(t, ctx, ".", nil, "env", "GOMOD"))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD = %q: the test does not run inside this repository's module", gomod)
	}
	root := filepath.Dir(gomod)
	wantBeam := goCmd(t, ctx, root, nil, "list", "-m", "-f", "{{.Version}}", beamModule)
	// GOFLAGS as the caller has it, plus -mod=mod: the go commands in the
	// temporary modules may write their go.mod and go.sum.
	goflags := "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod")
	off := []string{goflags, "GOWORK=off"}
	start := time.Now()

	// The replace way: the README's commands, in order.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(ownModuleMain), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, ctx, dir, off, "mod", "init", "example.com/wordcount")
	goCmd(t, ctx, dir, off, "mod", "edit", "-replace", "github.com/kafkastreams/kafkastreams="+root)
	goCmd(t, ctx, dir, off, "get", "github.com/kafkastreams/kafkastreams@v0.0.0-00010101000000-000000000000")
	goCmd(t, ctx, dir, off, "mod", "tidy")
	if got := goCmd(t, ctx, dir, off, "list", "-m", "-f", "{{.Version}}", beamModule); got != wantBeam {
		t.Errorf("the own module builds with %s %s, want %s (this repository's go.mod)", beamModule, strings.TrimSpace(got), strings.TrimSpace(wantBeam))
	}
	goCmd(t, ctx, dir, off, "build", "-o", "wordcount", ".")
	built := time.Since(start)

	// The go.work way: no replace, no go get; go build alone.
	wdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(wdir, "main.go"), []byte(ownModuleMain), 0o644); err != nil {
		t.Fatal(err)
	}
	// (-mod=mod is refused in workspace mode.)
	work := []string{"GOWORK=" + filepath.Join(wdir, "go.work")}
	goCmd(t, ctx, wdir, off, "mod", "init", "example.com/wordcount")
	goCmd(t, ctx, wdir, work, "work", "init", ".", root)
	goCmd(t, ctx, wdir, work, "build", "-o", "wordcount", ".")
	workBuilt := time.Since(start) - built

	out := filepath.Join(t.TempDir(), "counts.txt")
	runStart := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "wordcount"),
		"--runner=kafkastreams", "--bootstrap_servers="+b.BootstrapServers(),
		"--application_id="+uniqueName(t, "app"), "--output="+out,
		"--state_dir="+t.TempDir(), "--watermarks_addr=")
	cmd.Dir = dir
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wordcount --runner=kafkastreams: %v\n%s", err, tail(string(log), 4000))
	}
	// Prism would write the same file: the runner's own completion line
	// says the job ran here.
	if !bytes.Contains(log, []byte("every sink stage reached the end of time")) {
		t.Fatalf("wordcount did not run on kafkastreams (no completion line from the runner); its log:\n%s", tail(string(log), 4000))
	}
	if got := readLines(t, out); !slices.Equal(got, ownModuleWant) {
		t.Errorf("%s holds %q, want %q", out, got, ownModuleWant)
	}
	t.Logf("replace: init, edit, get, tidy and build in %v; go.work: init and build in %v; the run %v",
		built.Round(time.Millisecond), workBuilt.Round(time.Millisecond), time.Since(runStart).Round(time.Millisecond))
}

// beamModule is the Beam Go SDK's module path.
const beamModule = "github.com/apache/beam/sdks/v2"

// goCmd runs the go command in dir and returns its standard output, failing
// the test with its output if it fails. The environment is the caller's
// (GOPROXY, GOCACHE, GOMODCACHE) plus env.
func goCmd(t *testing.T, ctx context.Context, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s%s", strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return stdout.String()
}

package archtest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// module is this module's path; the rules below name packages relative to
// it.
const module = "github.com/kafkastreams/kafkastreams"

// importRule says that no package matching From may depend, directly or
// through other packages (go list's Deps), on a package matching one of
// Deny, unless it also matches one of Allow. A pattern is a package path
// relative to the module, or a full import path when its first element has
// a dot (another module's: "github.com/confluentinc/confluent-kafka-go/..."):
// "stage" is that package alone, "stage/..." is it and every package below
// it.
type importRule struct {
	From  string
	Deny  []string
	Allow []string
	// Why is the rule's reason and its source, printed when it breaks.
	Why string
}

// kafkaClient is the Kafka client library (librdkafka through cgo).
const kafkaClient = "github.com/confluentinc/confluent-kafka-go/..."

// importRules are the layering rules of issue 22 ("One leaf Kafka
// package", "A pure step package the compiler guards"): a new rule is a
// new row.
var importRules = []importRule{
	{
		From: "stage/step",
		Deny: []string{kafkaClient, "stage/kafkaclient", "stage"},
		Why:  "issue 22: the step (Head, Step, Ready, the task and its checkpoint) is a pure core like etcd raft's RawNode: it imports no Kafka client (javapartition and envelope are pure) and not the loop shell that drives it",
	},
	{
		From: "stage/...",
		Deny: []string{"stage"},
		Why:  "issue 22: the heads (stage/gbk, userstate, splittable, teststream, kafkasource/sourcehead) and every other package below stage import the step package, never the loop shell (stage), which imports the Kafka client",
	},
	{
		From: "stage/gbk",
		Deny: []string{kafkaClient},
		Why:  "issue 22: gbk.Core (windows, triggers) and its head are pure cores over the step package and the state store: no cgo",
	},
	{
		From: "stage/userstate",
		Deny: []string{kafkaClient},
		Why:  "issue 22: the stateful ParDo's head (user state, timers) is a pure core over the step package and the state store: no cgo",
	},
	{
		From: "stage/splittable",
		Deny: []string{kafkaClient},
		Why:  "issue 22: the splittable DoFn's head is a pure core over the step package and the state store: no cgo",
	},
	{
		From: "stage/state",
		Deny: []string{kafkaClient, "stage/kafkaclient"},
		Why:  "issue 22: the heads' state store reads its changelog through Options.Changelog (kafkaclient.ChangelogReader, given by the runner), so the heads that use it link no Kafka client",
	},
	{
		From: "stage/standby",
		Deny: []string{"stage", "runner/..."},
		Why:  "issue 24: the standby follower shares only the state.Manager with the stage loop (Follow, Restore's take-over); the loop does not know it and it does not know the loop",
	},
	{
		From: "stage/teststream",
		Deny: []string{kafkaClient},
		Why:  "issue 22: a head with no state store (TestStream) is a pure core over the step package: no cgo",
	},
	{
		From: "stage/kafkasource/sourcehead",
		Deny: []string{kafkaClient},
		Why:  "issue 22: the Kafka source's head is pure too (its log ends and reachability come from the loop through step.LogEnds and step.Reachability)",
	},
	{
		From: "stage/...",
		Deny: []string{"runner/..."},
		Why:  "issue 22: the stage layer never climbs back up to the runner; the runner fills narrow specs from its plan (stage/sideinput.Input)",
	},
	{
		From:  "watermarkmgr/...",
		Deny:  []string{"stage/...", "runner/..."},
		Allow: []string{"stage/kafkaclient", "stage/kafkaclient/...", "stage/envelope"},
		Why:   "issue 22: the WatermarkManager depends on nothing of the runner's layers but the leaf Kafka package and the internal topics' record codec (stage/envelope: protobuf only; its WriterHeader says which reports to trust, issue 23); the runner fills service.StageInfo from its plan",
	},
	{
		From: "watermarkmgr",
		Deny: []string{"proto/...", "watermarkmgr/...", "stage/...", "google.golang.org/protobuf/...", "google.golang.org/grpc/...", kafkaClient},
		Why:  "watermarkmgr/doc.go, issue 22: the WatermarkManager's core imports the standard library and Beam's mtime only; the proto's WatermarkReport.Core (proto/kafkastreams/v1/report.go) turns a report into its Report, never the other way round",
	},
	{
		From: "watermarkmgr/explain",
		Deny: []string{"proto/...", "stage/...", "google.golang.org/protobuf/...", "google.golang.org/grpc/...", kafkaClient},
		Why:  "watermarkmgr/explain/explain.go: a pure core that may import the Beam SDK's mtime only",
	},
	{
		From:  "stage/kafkaclient/...",
		Deny:  []string{"stage/...", "runner/...", "watermarkmgr/..."},
		Allow: []string{"stage/kafkaclient/..."},
		Why:   "issue 22: the leaf Kafka package is a leaf: every layer imports it, it imports none of them",
	},
	{
		From: "stage/kafkasource",
		Deny: []string{"stage", kafkaClient},
		Why:  "the source's watermark core stays pure (no cgo): runner/kafkaio shares its Strategy and Partition on every runner; its shell is stage/kafkasource/sourcehead",
	},
	{
		From: "stage/kafkaclient/javapartition",
		Deny: []string{kafkaClient},
		Why:  "the Java partitioner is pure: the commit step (stage/step/output.go) uses it, and the step package imports no Kafka client (issue 22)",
	},
	{
		From: "stage/kafkaclient/recordtime",
		Deny: []string{kafkaClient},
		Why:  "a record's timestamp rule is pure: the step package (stage/step/output.go) and runner/kafkaio's writer share it",
	},
	{
		From: "runner/kafkaio",
		Deny: []string{"stage"},
		Why:  "issue 22: runner/kafkaio is the API a user's binary links, also on Prism: it must not link the stage loop (it uses stage/kafkaclient)",
	},
}

// matches reports whether package path pkg (a full import path) matches
// pattern (relative to the module; a trailing "/..." matches the package
// and everything below it).
func matches(pattern, pkg string) bool {
	if first, _, _ := strings.Cut(pattern, "/"); !strings.Contains(first, ".") {
		pattern = module + "/" + pattern
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchesAny(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if matches(p, pkg) {
			return true
		}
	}
	return false
}

// listedPackage is the part of go list -json's output the rules read.
type listedPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// moduleRoot is the module's root directory, relative to this package's
// (go test runs a package's tests in its directory).
const moduleRoot = "../.."

// listPackages runs go list -deps -json over the module's packages (build
// dependencies only, not the tests': a test may use a higher layer as a
// fixture), from moduleRoot, and returns every package it lists, by
// import path.
func listPackages(t *testing.T) map[string]*listedPackage {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to list the module's packages with: %v", err)
	}
	cmd := exec.Command(goCmd, "list", "-deps", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = moduleRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json ./...: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	return pkgs
}

// importChain is a shortest chain of imports from package from to package
// to (both in pkgs), for the failure message: "a -> b -> c".
func importChain(pkgs map[string]*listedPackage, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var chain []string
			for q := to; q != ""; q = prev[q] {
				chain = append([]string{strings.TrimPrefix(q, module+"/")}, chain...)
			}
			return strings.Join(chain, " -> ")
		}
		if lp := pkgs[p]; lp != nil {
			for _, i := range lp.Imports {
				if _, seen := prev[i]; !seen {
					prev[i] = p
					queue = append(queue, i)
				}
			}
		}
	}
	return strings.TrimPrefix(from, module+"/") + " -> … -> " + strings.TrimPrefix(to, module+"/")
}

// TestImportRules checks importRules against go list -deps: every package
// of the module that a rule's From matches, and every package it depends
// on. A failure names the rule, the package, the forbidden dependency and a
// chain of imports that leads to it.
func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	for _, r := range importRules {
		from := 0
		for path, p := range pkgs {
			if !matches(r.From, path) {
				continue
			}
			from++
			for _, d := range p.Deps {
				if matchesAny(r.Deny, d) && !matchesAny(r.Allow, d) {
					t.Errorf("rule %q must not depend on %v: %s (%s)", r.From, r.Deny, importChain(pkgs, path, d), r.Why)
				}
			}
		}
		if from == 0 {
			t.Errorf("rule %q matches no package of the module: a renamed package?", r.From)
		}
	}
}

// TestImportRuleMatches checks the pattern matching the rules rely on.
func TestImportRuleMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, pkg string
		want         bool
	}{
		{"stage", module + "/stage", true},
		{"stage", module + "/stage/gbk", false},
		{"stage/...", module + "/stage", true},
		{"stage/...", module + "/stage/kafkaclient/javapartition", true},
		{"stage/...", module + "/stagex", false},
		{"runner/...", "github.com/other/runner", false},
		{kafkaClient, "github.com/confluentinc/confluent-kafka-go/v2/kafka", true},
		{kafkaClient, module + "/stage/kafkaclient", false},
	} {
		if got := matches(tc.pattern, tc.pkg); got != tc.want {
			t.Errorf("matches(%q, %q) = %v, want %v", tc.pattern, tc.pkg, got, tc.want)
		}
	}
}

package integration

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner"
)

// Warm standby replicas (issue 24, --standby_replicas): a SIGKILLed
// instance's stateful tasks move to the survivor, which restores them
// from the copies its standby follower kept current, reading only the
// changelog's tail.

const (
	// envStandbyReplicas overrides the child's --standby_replicas
	// (default 1): KAFKASTREAMS_STANDBY_REPLICAS=0 shows the test failing
	// without the feature.
	envStandbyReplicas = "KAFKASTREAMS_STANDBY_REPLICAS"
	// envStandbyMB is the state the test builds, in MiB (default 10); 1024
	// is make scenarios' 1 GB handover.
	envStandbyMB = "KAFKASTREAMS_STANDBY_MB"
	// envStandbyStateDir is the children's --state_dir: the test's own, so
	// that the killed instance's kept stores go with it.
	envStandbyStateDir = "KAFKASTREAMS_STANDBY_STATE_DIR"
)

// standbyShape is the element count, value size (bytes) and per-element
// work (µs) for a state of mb MiB: 1 KiB values up to 64 MiB, 16 KiB
// beyond.
func standbyShape(mb int) (n, pad, slowMicros int) {
	pad = 1 << 10
	if mb > 64 {
		pad = 16 << 10
	}
	n = mb << 20 / pad
	// ~10 s of work before the GroupByKey for the short test (the kill
	// lands in its middle); none for the large ones (writing is the work).
	slowMicros = 1000
	if mb > 64 {
		slowMicros = 0
	}
	return n, pad, slowMicros
}

func standbyMB() int {
	if v, err := strconv.Atoi(os.Getenv(envStandbyMB)); err == nil && v > 0 {
		return v
	}
	return 10
}

// padKV gives element i the key "k<i mod 37>" and the value "<i>|" padded
// to Pad bytes, after SlowMicros of work (as slowKV).
type padKV struct {
	Pad, SlowMicros int
	n               int
}

func (f *padKV) ProcessElement(i int, emit func(string, string)) {
	if f.n++; f.SlowMicros > 0 && f.n%100 == 0 {
		time.Sleep(time.Duration(f.SlowMicros*100) * time.Microsecond)
	}
	v := strconv.Itoa(i) + "|"
	emit("k"+strconv.Itoa(i%37), v+strings.Repeat("x", max(0, f.Pad-len(v))))
}

// sumPadded formats a key's pane: "key|count|sum of the values' i".
func sumPadded(k string, vs func(*string) bool) string {
	n, sum, v := 0, 0, ""
	for vs(&v) {
		i, _ := strconv.Atoi(v[:strings.IndexByte(v, '|')])
		n++
		sum += i
	}
	return fmt.Sprintf("%s|%d|%d", k, n, sum)
}

func init() {
	register.DoFn2x0[int, func(string, string)](&padKV{})
	register.Emitter2[string, string]()
	register.Function2x1(sumPadded)
	register.Iter1[string]()
	childPipelines["standby"] = func(o *runner.Options) *beam.Pipeline {
		o.StandbyReplicas = 1
		if v, err := strconv.Atoi(os.Getenv(envStandbyReplicas)); err == nil {
			o.StandbyReplicas = v
		}
		o.MaxBundleSize = 500
		if d := os.Getenv(envStandbyStateDir); d != "" {
			o.StateDir = d
		}
		n, pad, slow := standbyShape(standbyMB())
		return standbyPipeline(n, pad, slow)
	}
}

// standbyPipeline is Create(0..n-1) -> Reshuffle -> padKV -> GroupByKey in
// the global window (every value stays in the task stores until the end)
// -> sumPadded -> Reshuffle.
func standbyPipeline(n, pad, slowMicros int) *beam.Pipeline {
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	p, s := beam.NewPipelineWithRoot()
	kv := beam.ParDo(s, &padKV{Pad: pad, SlowMicros: slowMicros}, beam.Reshuffle(s, beam.CreateList(s, in)))
	_ = beam.Reshuffle(s, beam.ParDo(s, sumPadded, beam.GroupByKey(s, kv)))
	return p
}

func standbyExpected(n int) map[string]int {
	cnt, sum := map[int]int{}, map[int]int{}
	for i := 0; i < n; i++ {
		cnt[i%37]++
		sum[i%37] += i
	}
	out := map[string]int{}
	for k := range cnt {
		out[fmt.Sprintf("k%d|%d|%d", k, cnt[k], sum[k])] = 1
	}
	return out
}

// restoreLine is one "restored task store from changelog" log line.
var restoreLine = regexp.MustCompile(`restored task store from changelog.* task=(\d+) topic=(\S+) kind=(\w+) from=(\d+) changelog_end=(\d+) records=(\d+) .*elapsed=(\S+)`)

// firstCommitLine is the loop's first commit of a task assigned to it.
var firstCommitLine = regexp.MustCompile(`stage: first commit of an assigned task.* stage=(\S+).* task=(\d+) since_assigned=(\S+)`)

// changelogEnd is the sum of topic's partitions' log end offsets.
func changelogEnd(t *testing.T, admin *kafka.AdminClient, topic string) int64 {
	t.Helper()
	md, err := admin.GetMetadata(&topic, false, 5000)
	if err != nil {
		return 0
	}
	req := map[kafka.TopicPartition]kafka.OffsetSpec{}
	for _, p := range md.Topics[topic].Partitions {
		req[kafka.TopicPartition{Topic: &topic, Partition: p.ID}] = kafka.LatestOffsetSpec
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := admin.ListOffsets(ctx, req)
	if err != nil {
		return 0
	}
	var sum int64
	for _, ri := range res.ResultInfos {
		sum += int64(ri.Offset)
	}
	return sum
}

// TestStandbySIGKILLRestoresTheTail: two instances of a GroupByKey job
// whose every value stays in the task stores until the end (10 MiB of
// state; KAFKASTREAMS_STANDBY_MB sets it, make scenarios runs 1 GiB), with
// --standby_replicas=1. Once half the values are in the changelog and the
// survivor-to-be follows its peer's tasks, instance 0 is SIGKILLed. Each of
// its tasks that moves to instance 1 must be restored from instance 1's
// standby copy ("standby"), reading only the changelog's tail (under a
// third of the partition: a copy follows the committed transactions as
// they come, so at the kill it may lack the last one or two, which at
// 10 MiB are a sixth of a partition: CI read 210 of 1 265 and 308 of
// 1 757; a full restore reads all of it); the output is exact; the time from the kill to
// each moved task's first commit is logged. KAFKASTREAMS_STANDBY_REPLICAS=0
// turns the standbys off: the test then fails, naming the full restore.
func TestStandbySIGKILLRestoresTheTail(t *testing.T) {
	b := needBroker(t)
	mb := standbyMB()
	n, pad, _ := standbyShape(mb)
	replicas := 1
	if v, err := strconv.Atoi(os.Getenv(envStandbyReplicas)); err == nil {
		replicas = v
	}
	app := uniqueName(t, "app")
	timeout := 5*time.Minute + time.Duration(mb)*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.BootstrapServers()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	t.Setenv(envStandbyStateDir, t.TempDir())
	start := time.Now()
	cs := []*child{startPipelineChild(t, b, "standby", app, n, 0, 0), startPipelineChild(t, b, "standby", app, n, 0, 1)}
	defer func() {
		for _, c := range cs {
			_ = c.cmd.Process.Kill()
		}
	}()
	// Mid-stream: half the values committed to the changelog (all of
	// them stay in the stores until the end of time), none of the
	// instances done; and instance 1's follower keeps copies.
	var changelog string
	var atKill int64
	for {
		for i, c := range cs {
			if _, err := os.Stat(c.out); err == nil {
				t.Fatalf("instance %d finished before the kill:\n%s", i, tail(c.log.String(), 4000))
			}
		}
		if time.Since(start) > timeout/2 {
			t.Fatalf("no kill point after %v: changelog %q at %d of %d values", time.Since(start), changelog, atKill, n)
		}
		if changelog == "" {
			changelog = findChangelog(admin, app)
		}
		if changelog != "" {
			atKill = changelogEnd(t, admin, changelog)
		}
		following := replicas == 0 || strings.Contains(cs[1].log.String(), "standby: following a task's changelog")
		if atKill >= int64(n)/2 && following {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	logAt := len(cs[1].log.String())
	if err := cs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := cs[0].cmd.Wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("instance 0 did not die of the SIGKILL: %v", err)
	}
	if atKill >= int64(n)+int64(n)/2 {
		t.Fatalf("the changelog had %d records at the kill, %d values in all: not mid-stream", atKill, n)
	}
	t.Logf("killed instance 0 %v after the start, with %d changelog offsets of %s (%d values of %d MiB in all)", killed.Sub(start).Round(time.Millisecond), atKill, changelog, n, mb)
	stageName := strings.TrimSuffix(strings.TrimPrefix(changelog, app+"-"), "-changelog")

	// Watch instance 1 take the tasks over: the time from the kill to each
	// moved task's first commit.
	firstCommit := map[string]time.Duration{}
	moved := map[string][]string{}
	done := make(chan error, 1)
	go func() { done <- cs[1].cmd.Wait() }()
	var exitErr error
watch:
	for {
		select {
		case exitErr = <-done:
			break watch
		case <-time.After(10 * time.Millisecond):
		}
		after := cs[1].log.String()[logAt:]
		for _, m := range restoreLine.FindAllStringSubmatch(after, -1) {
			if m[2] == changelog {
				moved[m[1]] = m
			}
		}
		for _, m := range firstCommitLine.FindAllStringSubmatch(after, -1) {
			if m[1] == stageName && moved[m[2]] != nil {
				if _, ok := firstCommit[m[2]]; !ok {
					firstCommit[m[2]] = time.Since(killed)
				}
			}
		}
	}
	_ = exitErr
	r := cs[1].result(t)
	if r.Err != "" {
		t.Fatalf("instance 1 failed: %s\n%s", r.Err, tail(cs[1].log.String(), 4000))
	}
	if len(moved) == 0 {
		t.Fatalf("no task of %s moved to instance 1 after the kill (instance 0 owned none?):\n%s", changelog, tail(cs[1].log.String(), 4000))
	}
	for task, m := range moved {
		kind := m[3]
		end, _ := strconv.ParseInt(m[5], 10, 64)
		records, _ := strconv.ParseInt(m[6], 10, 64)
		t.Logf("instance 1 restored task %s (about %d MiB of values): %s, from offset %s, %d records of the changelog partition's %d, in %s; first commit %v after the kill", task, end*int64(pad)>>20, kind, m[4], records, end, m[7], firstCommit[task].Round(time.Millisecond))
		if kind != "standby" || records*3 > end {
			t.Errorf("instance 1 restored task %s from a %q store reading %d records of the %d in its changelog partition, want its standby copy and only the tail (under a third)", task, kind, records, end)
		}
		if _, ok := firstCommit[task]; !ok {
			t.Errorf("instance 1 logged no first commit of moved task %s", task)
		}
	}
	checkPanes(t, outputStringsByName(t, ctx, b, app, "Reshuffle_1"), standbyExpected(n))
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// The five scenarios of issue 11: the scenario job (scenariojob_test.go)
// runs as OS processes sharing one --application_id while a producer writes
// keyed events at a steady rate, event times close to the wall clock, into
// an input topic of 6 partitions:
//
//   - steady: 1 instance;
//   - scale-out: 1 → 3 instances while it runs;
//   - clean scale-in: 3 → 1, two stopped by SIGTERM;
//   - SIGKILL: kill -9 one of three, not restarted; then kill -9 another
//     and restart it at once in its slot (its own --state_dir);
//   - reassignment: the input topic grows from 6 to 9 partitions.
//
// After each, the output (read_committed, to its end) is checked against
// what the producer wrote: every (key, window) once, its sum and its
// running total exact. Each scenario logs its figures on lines that start
// with "figures <scenario>:" (grep for them): records/s, end-to-end latency
// (window end → output record visible to a read_committed reader, p50/p99),
// every stage's watermark lag behind the newest event time written
// (p50/p99), the longest any task went without a commit, and the
// scenario's handover times.
//
// Short versions (seconds of load each) run in make test;
// KAFKASTREAMS_SCENARIOS=long (make scenarios) runs them for minutes.

const envScenarios = "KAFKASTREAMS_SCENARIOS"

// scLoad is one scenario's load: how long the producer writes, at what
// rate, and how many instances a scenario may have.
type scLoad struct {
	// Phase is how long each phase of a scenario runs under load (a
	// scenario has two or three).
	Phase time.Duration
	// Rate is the producer's records per second.
	Rate int
}

func scenarioLoad() scLoad {
	if os.Getenv(envScenarios) == "long" {
		return scLoad{Phase: 60 * time.Second, Rate: 1000}
	}
	return scLoad{Phase: 6 * time.Second, Rate: 300}
}

// scInputPartitions is the input topic's partition count.
const scInputPartitions = 6

// scKid is one instance of a scenario.
type scKid struct {
	*child
	idx      int
	stateDir string
	started  time.Time
	done     chan struct{} // closed when the process has exited
	err      error
}

func (k *scKid) exited() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// scRun is one scenario's run.
type scRun struct {
	t            *testing.T
	name         string
	load         scLoad
	broker       *kafkaenv.Broker
	bs, app      string
	in, out      string
	start        time.Time
	prod         *scProducer
	offs         *scOffsets
	outs         *scOutput
	wms          *scWatermarks
	mu           sync.Mutex
	kids         []*scKid
	stages       []string // the job's stages, in their order
	measureFrom  time.Time
	measureUntil time.Time
	// catchUp bounds finish's wait for the output to have every window
	// (default 2 minutes).
	catchUp time.Duration
}

func newScenario(t *testing.T, name string) *scRun {
	return newScenarioOn(t, name, needBroker(t))
}

// newScenarioOn is newScenario on broker b (a cluster's Broker, say).
func newScenarioOn(t *testing.T, name string, b *kafkaenv.Broker) *scRun {
	bs := b.BootstrapServers()
	r := &scRun{t: t, name: name, load: scenarioLoad(), broker: b, bs: bs, app: uniqueName(t, "app"), in: uniqueName(t, "in"), out: uniqueName(t, "out"), start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: r.in, Partitions: scInputPartitions}, kafkaenv.TopicSpec{Name: r.out, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envScenarioIn, r.in)
	t.Setenv(envScenarioOut, r.out)
	r.outs = startOutput(t, bs, r.out)
	r.wms = &scWatermarks{}
	r.prod = startProducer(t, bs, r.in, r.load.Rate)
	t.Cleanup(func() {
		r.prod.stop()
		r.mu.Lock()
		kids := r.kids
		r.mu.Unlock()
		for _, k := range kids {
			if !k.exited() {
				_ = k.cmd.Process.Signal(syscall.SIGKILL)
				<-k.done
			}
		}
		r.wms.stop()
		r.outs.stop()
		if r.offs != nil {
			r.offs.stop()
		}
	})
	t.Logf("%s: %v per phase at %d records/s; input %s (%d partitions), output %s, application %s", name, r.load.Phase, r.load.Rate, r.in, scInputPartitions, r.out, r.app)
	return r
}

func (r *scRun) since() string { return time.Since(r.start).Round(time.Millisecond).String() }

// stillRunning returns the instances of live that have not exited, in
// order, and fails t for each one that has: nobody signalled it, so it
// had no reason to exit (its log's tail is printed). It reuses live's
// array.
func (r *scRun) stillRunning(t *testing.T, live []*scKid) []*scKid {
	t.Helper()
	kept := live[:0]
	for _, k := range live {
		if k.exited() {
			t.Errorf("%s: instance %d exited by itself (%v):\n%s", r.since(), k.idx, k.err, tail(k.log.String(), 4000))
			continue
		}
		kept = append(kept, k)
	}
	return kept
}

// startKid starts instance idx with its own --state_dir (a directory of
// its own: as on a machine of its own); stateDir, if not empty, is a
// previous instance's, whose slot the new one takes over.
func (r *scRun) startKid(stateDir string) *scKid {
	r.t.Helper()
	r.mu.Lock()
	idx := len(r.kids)
	r.mu.Unlock()
	if stateDir == "" {
		stateDir = r.t.TempDir()
	}
	r.t.Setenv(envScenarioStateDir, stateDir)
	k := &scKid{child: startPipelineChild(r.t, r.broker, "scenario", r.app, 0, 0, idx), idx: idx, stateDir: stateDir, started: time.Now(), done: make(chan struct{})}
	go func() { k.err = k.cmd.Wait(); close(k.done) }()
	r.mu.Lock()
	r.kids = append(r.kids, k)
	r.mu.Unlock()
	r.t.Logf("%s: started instance %d (pid %d)", r.since(), idx, k.cmd.Process.Pid)
	return k
}

// waitTasks waits until instance k has tasks in every stage of the job
// (all three once the stages are known), and returns when it had them.
func (r *scRun) waitTasks(k *scKid, timeout time.Duration) time.Time {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ev := parseTaskEvents(k.log.String())
		owned := ownedAt(ev, time.Now().Add(time.Hour))
		stages := map[string]bool{}
		var last time.Time
		for _, e := range ev {
			if e.assigned && len(owned[e.stage]) > 0 && !stages[e.stage] {
				stages[e.stage] = true
				if e.at.After(last) {
					last = e.at
				}
			}
		}
		want := 3
		if len(stages) >= want {
			return last
		}
		if k.exited() {
			r.t.Fatalf("instance %d exited (%v) before it had tasks in every stage:\n%s", k.idx, k.err, tail(k.log.String(), 4000))
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("instance %d has tasks in %d stages after %v, want %d:\n%s", k.idx, len(stages), timeout, want, tail(k.log.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// begin starts the monitors once the first instance runs: the stages'
// committed offsets and the watermarks (GET /watermarks of instance k).
func (r *scRun) begin(k *scKid) {
	r.t.Helper()
	r.waitTasks(k, 2*time.Minute)
	ev := parseTaskEvents(k.log.String())
	seen := map[string]bool{}
	for _, e := range ev {
		if !seen[e.stage] {
			seen[e.stage] = true
			r.stages = append(r.stages, e.stage)
		}
	}
	sort.Slice(r.stages, func(i, j int) bool { return stageNum(r.stages[i]) < stageNum(r.stages[j]) })
	if len(r.stages) != 3 {
		r.t.Fatalf("the scenario job has stages %v, want 3 (source, combine, stateful)", r.stages)
	}
	topics := map[string]string{}
	for i, s := range r.stages {
		topics[s] = r.app + "-" + s
		if i == 0 {
			topics[s] = r.in
		}
	}
	r.offs = startOffsets(r.t, r.bs, r.app, topics)
	r.watch(k)
	// The figures leave out the first 2 s: the catch-up of what was
	// written while the instance started.
	r.measureFrom = time.Now().Add(2 * time.Second)
	r.t.Logf("%s: instance %d runs stages %v", r.since(), k.idx, r.stages)
}

// watch makes the watermark monitor read instance k's GET /watermarks.
func (r *scRun) watch(k *scKid) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if m := curlRe.FindStringSubmatch(k.log.String()); m != nil {
			r.wms.watch(m[1], r.prod)
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("instance %d logged no GET /watermarks address:\n%s", k.idx, tail(k.log.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var curlRe = regexp.MustCompile(`curl -s (http://[0-9.:]+/watermarks)`)

func stageNum(s string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(s, "-", 2)[0], "s"))
	return n
}

// phase lets the load run for one phase.
func (r *scRun) phase() { time.Sleep(r.load.Phase) }

// signal sends sig to instance k and returns when.
func (r *scRun) signal(k *scKid, sig syscall.Signal) time.Time {
	r.t.Helper()
	at := time.Now()
	if err := k.cmd.Process.Signal(sig); err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("%s: %v to instance %d", r.since(), sig, k.idx)
	return at
}

// waitExit waits for instance k to exit and returns when it had.
func (r *scRun) waitExit(k *scKid, timeout time.Duration) time.Time {
	r.t.Helper()
	select {
	case <-k.done:
		return time.Now()
	case <-time.After(timeout):
		// Its goroutines' stacks say where it hangs (SIGQUIT: the Go
		// runtime prints them and exits).
		_ = k.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-k.done:
		case <-time.After(10 * time.Second):
		}
		dir, err := os.MkdirTemp("", "kafkastreams-stuck-")
		if err == nil {
			err = os.WriteFile(fmt.Sprintf("%s/instance-%d.log", dir, k.idx), k.log.Bytes(), 0o644)
		}
		r.t.Fatalf("instance %d did not exit within %v (its whole log, with a goroutine dump, in %s: %v):\n%s", k.idx, timeout, dir, err, tail(k.log.String(), 4000))
	}
	return time.Time{}
}

// owned returns the tasks instance k had at time at, as "stage/partition".
func (r *scRun) owned(k *scKid, at time.Time) []scTask {
	var out []scTask
	for st, ps := range ownedAt(parseTaskEvents(k.log.String()), at) {
		for p := range ps {
			out = append(out, scTask{st, p})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].stage != out[j].stage {
			return stageNum(out[i].stage) < stageNum(out[j].stage)
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// handover waits until every task of tasks has committed after at (or
// timeout), and returns how long after at the first and the last did.
func (r *scRun) handover(what string, tasks []scTask, at time.Time, timeout time.Duration) (first, all time.Duration) {
	r.t.Helper()
	if len(tasks) == 0 {
		r.t.Fatalf("%s: no tasks to hand over (the instance's log has no task assignment)", what)
	}
	deadline := at.Add(timeout)
	for {
		first, all = -1, 0
		done := true
		for _, tk := range tasks {
			c, ok := r.offs.firstCommitAfter(tk, at)
			if !ok {
				done = false
				continue
			}
			d := c.Sub(at)
			if first < 0 || d < first {
				first = d
			}
			if d > all {
				all = d
			}
		}
		if done {
			return first, all
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not every task of %v committed within %v (first after %v)", what, tasks, timeout, first)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// finish stops the producer, moves every partition's watermark past the
// last window (a tick far ahead in event time on each), waits for the
// output and checks it, and logs the figures every scenario has; extra are
// the scenario's own figures.
func (r *scRun) finish(extra string) {
	r.t.Helper()
	r.measureUntil = time.Now()
	r.prod.stop()
	want := r.inputChecked()
	r.prod.ticks()
	catchUp := r.catchUp
	if catchUp == 0 {
		catchUp = 2 * time.Minute
	}
	got := r.outs.waitFor(want, catchUp)
	if len(got) < len(want) {
		r.t.Logf("%s: the output has %d of %d windows after %v", r.since(), len(got), len(want), catchUp)
	}
	// Whatever came after (a duplicate) must be there for the final read.
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs, err := kafkaenv.Consume(ctx, r.bs, r.out, 0, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		r.t.Fatalf("read %s: %v", r.out, err)
	}
	if wrong := checkScenarioOutput(r.t, r.name, recs, want); len(wrong) > 0 {
		r.diagnose(wrong)
	}

	lat := r.outs.latencies(r.measureFrom, r.measureUntil.Add(-scWindow-scOutOfOrder))
	rate, committed := r.offs.rate(r.stages[0], r.measureFrom, r.measureUntil)
	var lags []string
	for _, s := range r.stages {
		p50, p99, n := r.wms.lag(s, r.measureFrom, r.measureUntil)
		lags = append(lags, fmt.Sprintf("%s p50=%v p99=%v (%d samples)", s, p50, p99, n))
	}
	gapTask, gap := r.offs.longestGap(r.measureFrom, r.measureUntil)
	r.t.Logf("figures %s: records/s=%.0f (offered %d; the source committed %d records in the measured %v, of %d written in all)", r.name, rate, r.load.Rate, committed, r.measureUntil.Sub(r.measureFrom).Round(time.Second), r.prod.written())
	r.t.Logf("figures %s: latency window end → output p50=%v p99=%v max=%v (%d windows; includes the %v out-of-orderness bound)", r.name, lat.p50, lat.p99, lat.max, lat.n, scOutOfOrder)
	r.t.Logf("figures %s: watermark lag behind the newest event time: %s", r.name, strings.Join(lags, "; "))
	r.t.Logf("figures %s: longest task without a commit=%v (%s)", r.name, gap.Round(time.Millisecond), gapTask)
	if extra != "" {
		r.t.Logf("figures %s: %s", r.name, extra)
	}
}

// inputChecked returns the output the input topic's records imply
// (expectedFrom), read to its end read_committed once the load has stopped,
// after checking them against the producer's delivery reports (its
// expected): a record the broker holds twice, or holds though its delivery
// failed, or lacks though its delivery succeeded, fails the test as the
// input's fault, naming the records, and the output is judged against
// what the topic holds, which is what the job read. Without it a record
// the producer wrote twice would pass for a sum the runner counted twice.
func (r *scRun) inputChecked() map[scWin]string {
	r.t.Helper()
	want := r.prod.expected()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	recs, err := kafkaenv.Consume(ctx, r.bs, r.in, 0, kafkaenv.ReadCommitted, 2*time.Minute)
	if err != nil {
		r.t.Errorf("read the input topic %s to check it: %v", r.in, err)
		return want
	}
	sums, dups := inputSums(recs)
	got := expectedFrom(sums)
	var differ []string
	for w, line := range want {
		if got[w] != line {
			differ = append(differ, fmt.Sprintf("%s [%d]: delivered %q, topic %q", w.key, w.start, line, got[w]))
		}
	}
	for w, line := range got {
		if _, ok := want[w]; !ok {
			differ = append(differ, fmt.Sprintf("%s [%d]: delivered none, topic %q", w.key, w.start, line))
		}
	}
	if len(differ) > 0 || len(dups) > 0 {
		sort.Strings(differ)
		r.t.Errorf("%s: the input topic %s (%d records) differs from the producer's delivery reports, the input's fault, not the runner's; the output is checked against the topic: %d windows differ: %s; records twice in a partition (key, timestamp and amount): %s; where: %s",
			r.name, r.in, len(recs), len(differ), strings.Join(differ[:min(len(differ), 10)], "; "), strings.Join(dups[:min(len(dups), 10)], " "), strings.Join(r.prod.locate(recs, sums), "; "))
		return got
	}
	r.t.Logf("%s: the input topic holds %d records, the producer's delivered records exactly", r.name, len(recs))
	return got
}

// locate names, for the windows whose sums in the topic (topicSums, of
// recs) differ from the delivery reports', each record reported delivered
// that the topic lacks, with where the report put it (partition@offset,
// or no offset) and what the topic holds there, and each record of the
// topic no report names; then each partition's offsets in the topic (its
// first and last and how many records: a partition holding fewer than
// last-first+1 has a gap). At most 10 of each kind.
func (sp *scProducer) locate(recs []kafkaenv.Record, topicSums map[scWin]int64) []string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	win := func(ts int64) int64 { return ts - ts%scWindow.Milliseconds() }
	bad := map[scWin]bool{}
	for w, sum := range sp.sums {
		if topicSums[w] != sum {
			bad[w] = true
		}
	}
	for w, sum := range topicSums {
		if sp.sums[w] != sum {
			bad[w] = true
		}
	}
	type at struct {
		part int32
		off  int64
	}
	type content struct {
		part   int32
		key    string
		ts     int64
		amount int32
	}
	byOffset := map[at]content{}
	inTopic := map[content]int64{}
	type span struct{ first, last, n int64 }
	spans := map[int32]*span{}
	for _, m := range recs {
		amount, _ := strconv.ParseInt(string(m.Value), 10, 64)
		c := content{m.Partition, string(m.Key), m.Timestamp.UnixMilli(), int32(amount)}
		byOffset[at{m.Partition, m.Offset}] = c
		inTopic[c] = m.Offset
		s, ok := spans[m.Partition]
		if !ok {
			s = &span{first: m.Offset, last: m.Offset}
			spans[m.Partition] = s
		}
		s.first, s.last, s.n = min(s.first, m.Offset), max(s.last, m.Offset), s.n+1
	}
	describe := func(c content) string {
		return fmt.Sprintf("%s ts=%d amount=%d", c.key, c.ts, c.amount)
	}
	var missing, extra []string
	reported := map[content]bool{}
	for _, r := range sp.sent {
		c := content{r.part, r.key, r.ts, r.amount}
		reported[c] = true
		if !bad[scWin{r.key, win(r.ts)}] {
			continue
		}
		if r.off >= 0 {
			held, ok := byOffset[at{r.part, r.off}]
			switch {
			case ok && held == c:
				continue
			case ok:
				missing = append(missing, fmt.Sprintf("%s reported delivered to %d@%d, where the topic holds %s", describe(c), r.part, r.off, describe(held)))
			default:
				missing = append(missing, fmt.Sprintf("%s reported delivered to %d@%d, where the topic holds no record", describe(c), r.part, r.off))
			}
			continue
		}
		if _, ok := inTopic[c]; ok {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s reported delivered to partition %d with no offset (librdkafka's implicit ack), not in that partition", describe(c), r.part))
	}
	for c, off := range inTopic {
		if bad[scWin{c.key, win(c.ts)}] && !reported[c] {
			extra = append(extra, fmt.Sprintf("%s at %d@%d: no delivery report names it", describe(c), c.part, off))
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	out := []string{fmt.Sprintf("%d records delivered and not in the topic: %s", len(missing), strings.Join(missing[:min(len(missing), 10)], ", ")),
		fmt.Sprintf("%d records in the topic with no delivery report: %s", len(extra), strings.Join(extra[:min(len(extra), 10)], ", "))}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(spans)) {
		s := spans[p]
		parts = append(parts, fmt.Sprintf("%d: %d..%d (%d records)", p, s.first, s.last, s.n))
	}
	return append(out, fmt.Sprintf("the topic's partitions, offsets read read_committed from the log start: %s; %d delivery reports had no offset", strings.Join(parts, ", "), sp.noOffset))
}

// inputSums are the amounts of recs (the scenario's input topic) summed
// by key and window, ticks left out, and the records that repeat an
// earlier one of their partition (the same key, timestamp and amount:
// the load's records with one key and amount are 1 261 records apart, so
// seconds apart in event time), as "partition@offset=offset of the first".
func inputSums(recs []kafkaenv.Record) (map[scWin]int64, []string) {
	type rec struct {
		part  int32
		key   string
		ts    int64
		value string
	}
	seen := map[rec]int64{}
	sums := map[scWin]int64{}
	var dups []string
	for _, m := range recs {
		if string(m.Key) == scTickKey {
			continue
		}
		ts := m.Timestamp.UnixMilli()
		k := rec{m.Partition, string(m.Key), ts, string(m.Value)}
		if first, ok := seen[k]; ok {
			dups = append(dups, fmt.Sprintf("%d@%d=%d", m.Partition, m.Offset, first))
		} else {
			seen[k] = m.Offset
		}
		amount, _ := strconv.ParseInt(string(m.Value), 10, 64)
		sums[scWin{string(m.Key), ts - ts%scWindow.Milliseconds()}] += amount
	}
	return sums, dups
}

// stopAll stops the running instances by SIGTERM and checks each exits
// by itself.
func (r *scRun) stopAll() {
	r.t.Helper()
	for _, k := range r.kids {
		if !k.exited() {
			_ = k.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, k := range r.kids {
		r.waitExit(k, time.Minute)
	}
}

// TestScenarioSteady: one instance under a steady load; its throughput,
// latency and watermark lags are the baseline of the other scenarios.
func TestScenarioSteady(t *testing.T) {
	r := newScenario(t, "steady")
	k := r.startKid("")
	r.begin(k)
	r.phase()
	r.phase()
	r.finish("")
	r.stopAll()
	checkCleanExit(t, k)
}

// TestScenarioScaleOut: 1 → 3 instances while the job runs. The new
// instances take tasks in every stage (their state restored from the
// changelogs), and the output stays exact.
func TestScenarioScaleOut(t *testing.T) {
	r := newScenario(t, "scale-out")
	k0 := r.startKid("")
	r.begin(k0)
	r.phase()
	added := time.Now()
	k1, k2 := r.startKid(""), r.startKid("")
	var took []string
	for _, k := range []*scKid{k1, k2} {
		at := r.waitTasks(k, 2*time.Minute)
		took = append(took, fmt.Sprintf("instance %d %v after its start (tasks %v)", k.idx, at.Sub(k.started).Round(time.Millisecond), r.owned(k, time.Now())))
	}
	r.phase()
	r.phase()
	restored := 0
	for _, k := range []*scKid{k1, k2} {
		restored += len(restoredRe.FindAllString(k.log.String(), -1))
	}
	r.finish(fmt.Sprintf("new instances had tasks in every stage: %s; %d task stores restored from changelogs by them; scale-out began %v after the start", strings.Join(took, ", "), restored, added.Sub(r.start).Round(time.Millisecond)))
	if len(r.owned(k0, time.Now())) == 0 {
		t.Errorf("instance 0 has no tasks left after the scale-out")
	}
	r.stopAll()
}

// TestScenarioScaleIn: 3 → 1 instances, two stopped by SIGTERM at once:
// each commits, leaves its groups and hands its tasks over; the pause is
// SIGTERM → the survivor's first and last commit of their tasks.
func TestScenarioScaleIn(t *testing.T) {
	r := newScenario(t, "scale-in")
	k0 := r.startKid("")
	r.begin(k0)
	k1, k2 := r.startKid(""), r.startKid("")
	r.waitTasks(k1, 2*time.Minute)
	r.waitTasks(k2, 2*time.Minute)
	r.phase()
	at := time.Now()
	tasks := append(r.owned(k1, at), r.owned(k2, at)...)
	r.signal(k1, syscall.SIGTERM)
	r.signal(k2, syscall.SIGTERM)
	e1, e2 := r.waitExit(k1, time.Minute), r.waitExit(k2, time.Minute)
	// Commits after both exited are the survivor's (the stopping ones
	// commit what they have before they exit).
	exited := e1
	if e2.After(exited) {
		exited = e2
	}
	first, all := r.handover("scale-in", tasks, exited, 2*time.Minute)
	off := exited.Sub(at)
	r.phase()
	r.finish(fmt.Sprintf("pause SIGTERM → first commit of a stopped instance's task by the survivor=%v, → all %d of their tasks=%v; the stopped instances exited %v and %v after SIGTERM",
		(off + first).Round(time.Millisecond), len(tasks), (off + all).Round(time.Millisecond), e1.Sub(at).Round(time.Millisecond), e2.Sub(at).Round(time.Millisecond)))
	// Regression bound: a static member that closes without leaving its
	// groups holds its tasks for the session timeout (6 s; the pause was
	// 6.0 s without Loop.leaveGroup, 1-2 s with it); from 5 s on, it did
	// not leave.
	if p := off + first; p >= 5*time.Second {
		t.Errorf("scale-in: SIGTERM → first commit of a stopped instance's task by the survivor took %v, want under 5 s: the stopping instances did not leave their groups (a session timeout's wait)", p.Round(time.Millisecond))
	}
	checkCleanExit(t, k1)
	checkCleanExit(t, k2)
	r.stopAll()
}

// TestScenarioSIGKILL: kill -9 one of three instances, not restarted: the
// survivors take its tasks over (waiting out its open transactions,
// restoring its state); measured: kill → first commit of a killed task by
// a survivor. The kill leaves a transaction open, checked (issue 23): the
// instance is stopped (SIGSTOP) at a moment the broker has a transaction
// of it open (openTxnProbe: its record in the metrics topic at the last
// stable offset), then killed, and at the end that transaction's record is
// not in a read_committed read (the broker aborted it). Then kill -9
// another and restart it at once in its slot (its --state_dir): measured,
// restart → its tasks back.
func TestScenarioSIGKILL(t *testing.T) {
	r := newScenario(t, "sigkill")
	k0 := r.startKid("")
	r.begin(k0)
	k1, k2 := r.startKid(""), r.startKid("")
	r.waitTasks(k1, 2*time.Minute)
	r.waitTasks(k2, 2*time.Minute)
	r.phase()
	probe := newOpenTxnProbe(t, r.bs, r.app, instanceID(t, k1.log.String()))
	open := freezeInTransaction(t, k1.cmd.Process, probe.open, time.Minute)
	at := r.signal(k1, syscall.SIGKILL)
	tasks := r.owned(k1, at)
	r.waitExit(k1, 10*time.Second)
	if !killedBy(k1.err, syscall.SIGKILL) {
		t.Fatalf("instance 1 did not die of the SIGKILL: %v", k1.err)
	}
	t.Logf("%s: killed instance 1, stopped with its transaction open", r.since())
	first, all := r.handover("sigkill", tasks, at, 3*time.Minute)
	t.Logf("%s: kill → first commit of a killed task by a survivor %v, all %d tasks %v", r.since(), first.Round(time.Millisecond), len(tasks), all.Round(time.Millisecond))
	r.phase()

	// The restart in the slot: kill instance 2 and start a copy with its
	// --state_dir at once.
	at2 := r.signal(k2, syscall.SIGKILL)
	tasks2 := r.owned(k2, at2)
	r.waitExit(k2, 10*time.Second)
	if !killedBy(k2.err, syscall.SIGKILL) {
		t.Fatalf("instance 2 did not die of the SIGKILL: %v", k2.err)
	}
	if len(tasks) == 0 || len(tasks2) == 0 {
		t.Fatalf("a killed instance had no tasks at its kill (instance 1: %v, instance 2: %v)", tasks, tasks2)
	}
	k3 := r.startKid(k2.stateDir)
	back := r.waitTasks(k3, 3*time.Minute)
	first2, all2 := r.handover("sigkill+restart", tasks2, at2, 3*time.Minute)
	if !strings.Contains(k3.log.String(), "instance slot taken over") {
		t.Errorf("the restarted instance did not take over the killed one's slot:\n%s", tail(k3.log.String(), 4000))
	}
	// Loose bounds (the goals are 10 s and 5 s; a loaded machine is
	// slower): with Kafka's 45 s session timeout and no static membership
	// both were 45 s.
	if first >= 30*time.Second {
		t.Errorf("sigkill: kill → first commit of a killed task by a survivor took %v, want under 30 s (goal 10 s): --session_timeout not in force?", first.Round(time.Millisecond))
	}
	if d := back.Sub(k3.started); d >= 20*time.Second {
		t.Errorf("sigkill: the copy restarted in the killed one's slot had its tasks back %v after its start, want under 20 s (goal 5 s): a dead member held its tasks past the session timeout?", d.Round(time.Millisecond))
	}
	r.phase()
	r.finish(fmt.Sprintf("handover kill → first commit of a killed task by a survivor=%v, → all %d killed tasks=%v; restart in the slot → tasks back in every stage=%v (kill → first commit of its tasks %v, all %d %v)",
		first.Round(time.Millisecond), len(tasks), all.Round(time.Millisecond), back.Sub(k3.started).Round(time.Millisecond), first2.Round(time.Millisecond), len(tasks2), all2.Round(time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if committedTxn(t, ctx, r.bs, r.app, probe.found) {
		t.Errorf("the transaction instance 1 had open at its kill (%s) was committed: it was not open", open)
	} else {
		t.Logf("the transaction instance 1 had open at its kill was aborted (its record at offset %d of the metrics topic is not read read_committed)", probe.found.offset)
	}
	r.stopAll()
}

// TestScenarioReassignment: the input topic grows by scGrowBy partitions
// while two instances run (issue 21 §4), in rounds (6 → 9, then 9 → 12, …)
// until one round could catch a missing hold, at most scGrowRounds. In a
// round, right after CreatePartitions returns, the producer writes
// scEarlyRecords records to each new partition stamped scEarlyBehind
// before the call: ahead of what the downstream watermark can reach if the
// new count re-opens the hold within a second (the old partitions'
// watermark is at least 1.1 s behind the wall clock: the 1 s bound and the
// newest record's age; the test checks it), then to every partition. The
// sources find the new count (stage.PartitionCheck) and their reports
// carry it at once (seed 000). Once both instances have found it (so every
// later report of theirs carries it), one record stamped scJump ahead goes
// to each old partition: the old partitions' watermark passes the early
// records, and the hold keeps the watermark downstream until the new
// partitions have reported, so no early record is late: the output is
// exact and no stage dropped an element. Without the hold re-opened by the
// new count, the early records are late and dropped, and the output is
// wrong.
//
// Whether a round can catch a missing hold is a race the runner usually
// wins: the group assigns the new partitions about 0.3 s after the growth
// and they report soon after, so the jump must be read and reported
// before that. A round counts when the old partitions' watermark was past
// the early records by the time every new partition had reported; a round
// that lost the race is logged and the topic grows again (a CI run lost
// it once: the hold lifted 636 ms after the growth, the jump not read yet).
func TestScenarioReassignment(t *testing.T) {
	r := newScenario(t, "reassignment")
	k0 := r.startKid("")
	r.begin(k0)
	k1 := r.startKid("")
	r.waitTasks(k1, 2*time.Minute)
	kids := []*scKid{k0, k1}
	r.phase()
	var rounds []string
	caught := false
	for round, from := 1, int32(scInputPartitions); round <= scGrowRounds && !caught; round, from = round+1, from+scGrowBy {
		ahead, summary := r.growRound(kids, from, from+scGrowBy)
		rounds = append(rounds, fmt.Sprintf("round %d: %s", round, summary))
		if caught = ahead > 0; !caught {
			t.Logf("%s: round %d could not catch a missing hold (the old partitions' watermark was %v past the early records when the new partitions had all reported): growing again", r.since(), round, ahead)
		}
	}
	if !caught {
		t.Errorf("in none of %d rounds was the old partitions' watermark past the early records when the new partitions had all reported: this run cannot catch a missing hold", scGrowRounds)
	}
	r.phase()
	r.phase()
	r.finish(strings.Join(rounds, "; "))
	for _, k := range kids {
		n, err := lateDropped(kidAddr(t, k))
		if err != nil {
			t.Errorf("instance %d: %v", k.idx, err)
		} else if n > 0 {
			t.Errorf("instance %d: %v elements dropped as late (kafkastreams_late_elements_dropped_total): records of the new partitions read after the watermark had passed them", k.idx, n)
		}
	}
	r.stopAll()
}

// growRound is one round of TestScenarioReassignment: the input topic
// grows from from to to partitions. It returns how far the old
// partitions' watermark was past the early records when every new
// partition had reported (≤ 0: the round could not catch a missing hold)
// and the round's figures.
func (r *scRun) growRound(kids []*scKid, from, to int32) (time.Duration, string) {
	t := r.t
	t.Helper()
	addr0 := kidAddr(t, kids[0])
	src := r.stages[0]
	asked := time.Now()
	growPartitions(t, r.bs, r.in, int(to))
	grown := time.Now()
	early := asked.Add(-scEarlyBehind).UnixMilli()
	var newParts, oldParts []int32
	for p := int32(0); p < to; p++ {
		if p < from {
			oldParts = append(oldParts, p)
		} else {
			newParts = append(newParts, p)
		}
	}
	r.prod.setPartitions(to)
	r.prod.writeAt(newParts, early, scEarlyRecords)
	wrote := time.Now()
	t.Logf("%s: %s has %d partitions (CreatePartitions took %v); %d records written to each of %v at %s, %v after the growth",
		r.since(), r.in, to, grown.Sub(asked).Round(time.Millisecond), scEarlyRecords, newParts, time.UnixMilli(early).UTC().Format("15:04:05.000"), wrote.Sub(grown).Round(time.Millisecond))

	// Both instances have found the new count, so each of their later
	// reports carries it: one record stamped scJump ahead of the wall
	// clock to each old partition moves their watermarks past the early
	// records at once, whenever the group assigns the new partitions.
	// With the hold that is harmless (the downstream watermark waits for
	// the new partitions); without it the early records are late.
	var found []string
	for _, k := range kids {
		at := waitLogTime(t, k, time.Minute, "the input topic has more partitions", fmt.Sprintf("partitions=%d", to))
		found = append(found, fmt.Sprintf("instance %d %v", k.idx, at.Sub(asked).Round(time.Millisecond)))
	}
	jumped := time.Since(asked)
	r.prod.writeAt(oldParts, time.Now().Add(scJump).UnixMilli(), 1)

	// The count in-band: the first report carrying the new count, as the
	// WatermarkManager service reads them; the hold must stand below the
	// early records.
	st := waitSource(t, addr0, fmt.Sprintf("a report of the source stage carrying %d partitions", to), time.Minute, func(_ string, st service.StageJSON) bool {
		return st.TotalSourcePartitions == to
	})
	reported := time.Since(asked)
	if st.GlobalMs >= early {
		t.Errorf("the source stage's watermark was %s when its reports first carried %d partitions (%v after the growth), at or past the early records' event time %s: the hold re-opened too late, they are late",
			time.UnixMilli(st.GlobalMs).UTC().Format("15:04:05.000"), to, reported.Round(time.Millisecond), time.UnixMilli(early).UTC().Format("15:04:05.000"))
	}

	var newTasks []string
	var assigned time.Duration
	for deadline := time.Now().Add(time.Minute); len(newTasks) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, k := range kids {
			for _, e := range parseTaskEvents(k.log.String()) {
				if e.stage != src || !e.assigned || e.at.Before(asked) {
					continue
				}
				for _, p := range e.partitions {
					if p >= from && p < to {
						newTasks = append(newTasks, fmt.Sprintf("%d on instance %d", p, k.idx))
						if d := e.at.Sub(asked); assigned == 0 || d < assigned {
							assigned = d
						}
					}
				}
			}
		}
	}
	if len(newTasks) == 0 {
		t.Fatalf("no instance was assigned a new partition of %s within a minute", r.in)
	}
	// When the new partitions have all reported (the hold is lifted), the
	// old partitions' watermark is past the early records: without the
	// hold the downstream watermark would have passed them before they
	// were read.
	st = waitSource(t, addr0, fmt.Sprintf("every one of %d source partitions reported", to), time.Minute, func(_ string, st service.StageJSON) bool {
		return st.TotalSourcePartitions == to && !st.Held
	})
	released := time.Since(asked)
	oldMin := int64(math.MaxInt64)
	for _, p := range oldParts {
		for name, pj := range st.Partitions {
			if strings.HasSuffix(name, ":"+strconv.Itoa(int(p))) && pj.WatermarkMs < oldMin {
				oldMin = pj.WatermarkMs
			}
		}
	}
	ahead := time.Duration(oldMin-early) * time.Millisecond
	t.Logf("%s: the new partitions had all reported %v after the growth; the old partitions' watermark was then %v past the early records' event time", r.since(), released.Round(time.Millisecond), ahead)
	return ahead, fmt.Sprintf("%d → %d partitions, from the CreatePartitions call (it took %v) → the count found by the source loops: %s; → jump written to the old partitions %v; → first report carrying %d read by the WatermarkManager %v; → first new source task assigned %v; → hold lifted (all %d reported) %v; old partitions' watermark then %v past the early records (%d on each new partition, stamped %v before the call); new source tasks %v",
		from, to, grown.Sub(asked).Round(time.Millisecond), strings.Join(found, ", "), jumped.Round(time.Millisecond), to, reported.Round(time.Millisecond), assigned.Round(time.Millisecond), to, released.Round(time.Millisecond), ahead, scEarlyRecords, scEarlyBehind, newTasks)
}

// The rounds of TestScenarioReassignment.
const (
	// scGrowBy is how many partitions a round adds to the input topic.
	scGrowBy = 3
	// scGrowRounds bounds the rounds.
	scGrowRounds = 4
	// scEarlyRecords is how many records go to each new partition right
	// after CreatePartitions returns.
	scEarlyRecords = 20
	// scEarlyBehind is how far before the CreatePartitions call their event
	// time is.
	scEarlyBehind = 100 * time.Millisecond
	// scJump is how far ahead of the wall clock the record written to each
	// old partition once both instances report the new count is stamped.
	scJump = 5 * time.Second
)

// kidAddr is the host:port of instance k's HTTP server (GET /watermarks,
// /metrics), from its log.
func kidAddr(t *testing.T, k *scKid) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if m := curlRe.FindStringSubmatch(k.log.String()); m != nil {
			return strings.TrimSuffix(strings.TrimPrefix(m[1], "http://"), "/watermarks")
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %d logged no GET /watermarks address:\n%s", k.idx, tail(k.log.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLogTime waits until instance k has logged a line with every one of
// subs, and returns the time of the first such line (the instance's clock,
// slog's time=).
func waitLogTime(t *testing.T, k *scKid, timeout time.Duration, subs ...string) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
	lines:
		for _, line := range strings.Split(k.log.String(), "\n") {
			for _, s := range subs {
				if !strings.Contains(line, s) {
					continue lines
				}
			}
			if m := logTimeRe.FindStringSubmatch(line); m != nil {
				if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
					return at
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %d did not log a line with %q within %v", k.idx, subs, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var logTimeRe = regexp.MustCompile(`time=(\S+)`)

// TestScenarioBrokerFailover, the sixth scenario: the job runs on a
// 3-node KRaft cluster (every node broker and controller; replication
// factor 3 and min.insync.replicas 2 for the input, output, internal and
// the runner's topics) and the node leading a partition of the input is
// SIGKILLed mid-stream, not restarted. Two live replicas of every
// partition remain, so writes with acks=all go on, and two of three
// controllers keep the quorum: the job keeps going on the new leaders (its
// transactions and group coordinators move too when they were on that
// node), and the output is exact. The partition is the first whose
// replicas are all in sync and whose leader is not the active controller
// (waitKillable): a live active controller fences the dead node when its
// session (9 s) times out and elects the new leader then, while the death
// of the active controller itself first needs a KRaft election, which on
// a loaded machine took the leader's move to 44 s of the test's minute
// (TestSoak kills the active controller).
func TestScenarioBrokerFailover(t *testing.T) {
	needBroker(t) // -short skips it, as every broker test
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	begun := time.Now()
	c, err := kafkaenv.StartCluster(ctx, kafkaenv.Options{Logf: t.Logf}, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	t.Cleanup(func() { keepClusterLogs(t, c) }) // before Stop removes them
	t.Logf("cluster ready in %v: %s", time.Since(begun).Round(time.Millisecond), c.Describe())
	r := newScenarioOn(t, "broker-failover", c.Broker())
	k0 := r.startKid("")
	r.begin(k0)
	k1 := r.startKid("")
	r.waitTasks(k1, 2*time.Minute)
	r.phase()

	p, st, ctl := waitKillable(t, ctx, c, r.in, scInputPartitions, time.Minute)
	leader := st.Leader
	t.Logf("%s: before the kill: %s/%d %s; active controller node %d", r.since(), r.in, p, st, ctl)
	killed := time.Now()
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: killed node %d, the leader of %s/%d", r.since(), leader, r.in, p)
	var moved time.Duration
	newLeader := leader
	last := st.String()
	for deadline := time.Now().Add(time.Minute); newLeader == leader || newLeader < 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%s/%d has no leader but node %d a minute after that node was killed (last seen: %s; before the kill: %s, active controller node %d)", r.in, p, leader, last, st, ctl)
		}
		time.Sleep(100 * time.Millisecond)
		if st, err := c.Partition(r.in, p); err == nil {
			newLeader = st.Leader
			if st.String() != last {
				last = st.String()
				t.Logf("%s: %s/%d %s", r.since(), r.in, p, last)
			}
		}
	}
	moved = time.Since(killed)
	src := scTask{stage: r.stages[0], partition: p}
	var first time.Duration
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if at, ok := r.offs.firstCommitAfter(src, killed); ok {
			first = at.Sub(killed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source task %s made no commit within 2 minutes of the kill of node %d", src, leader)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: %s/%d led by node %d %v after the kill; the source task %s committed again %v after it", r.since(), r.in, p, newLeader, moved.Round(time.Millisecond), src, first.Round(time.Millisecond))
	r.phase()
	r.phase()
	r.finish(fmt.Sprintf("node %d (leader of the input's partition %d) SIGKILLed: new leader node %d after %v; kill → next commit of the source task of partition %d %v", leader, p, newLeader, moved.Round(time.Millisecond), p, first.Round(time.Millisecond)))
	r.stopAll()
	checkCleanExit(t, k0)
	checkCleanExit(t, k1)
}

// waitKillable waits up to timeout for a partition of topic (of n) whose
// leader's kill the controller can act on at once, and returns the first
// one with its state and the active controller: the partition has a
// leader and every one of its c.Replication replicas in sync (a replica
// out of the ISR cannot be elected once the leader dies: unclean leader
// election is off), the KRaft quorum has a leader, the active controller
// (it fences the dead node and elects the new leader), and the
// partition's leader is not that controller (whose death would first
// need a KRaft election). It fails t naming what was missing.
func waitKillable(t *testing.T, ctx context.Context, c *kafkaenv.Cluster, topic string, n int, timeout time.Duration) (int32, kafkaenv.PartitionState, int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ctl, _, err := c.Controller(qctx)
		cancel()
		if err != nil {
			missing = append(missing, fmt.Sprintf("no active controller: %v", err))
		} else {
			for p := int32(0); p < int32(n); p++ {
				st, err := c.Partition(topic, p)
				switch {
				case err != nil:
					missing = append(missing, err.Error())
				case st.Leader < 0 || len(st.Replicas) != c.Replication || !st.AllInSync():
					missing = append(missing, fmt.Sprintf("%s/%d: %s, want a leader and all %d replicas in sync", topic, p, st, c.Replication))
				case st.Leader == ctl:
					missing = append(missing, fmt.Sprintf("%s/%d: led by the active controller, node %d", topic, p, ctl))
				default:
					return p, st, ctl
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("precondition of the kill not met within %v: no partition of %s to kill the leader of:\n%s", timeout, topic, strings.Join(missing, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// keepClusterLogs copies the log of every node of c into a new directory
// and names it, when t failed or KAFKASTREAMS_CLUSTER_LOGS=1 (Stop
// removes them).
func keepClusterLogs(t *testing.T, c *kafkaenv.Cluster) {
	if !t.Failed() && os.Getenv("KAFKASTREAMS_CLUSTER_LOGS") != "1" {
		return
	}
	dir, err := os.MkdirTemp("", "kafkastreams-cluster-")
	if err != nil {
		t.Logf("the nodes' logs not kept: %v", err)
		return
	}
	for i, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", i+1)), b, 0o644)
		}
		if err != nil {
			t.Logf("node %d's log not kept: %v", i+1, err)
		}
	}
	t.Logf("the nodes' logs are in %s", dir)
}

// checkCleanExit: an instance stopped by SIGTERM exits with the job's
// cancellation and no other error.
func checkCleanExit(t *testing.T, k *scKid) {
	t.Helper()
	res := k.result(t)
	if res.Err != "" && !strings.Contains(res.Err, "context canceled") {
		t.Errorf("instance %d stopped with %q, want a clean stop:\n%s", k.idx, res.Err, tail(k.log.String(), 4000))
	}
}

func growPartitions(t *testing.T, bs, topic string, n int) {
	t.Helper()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := admin.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: topic, IncreaseTo: n}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("grow %s to %d partitions: %v", topic, n, r.Error)
		}
	}
}

// --- the instances' task assignments, from their logs ---

// scTask is one task: a stage and its input partition.
type scTask struct {
	stage     string
	partition int32
}

func (t scTask) String() string { return fmt.Sprintf("%s/%d", t.stage, t.partition) }

type scTaskEvent struct {
	at         time.Time
	stage      string
	assigned   bool
	partitions []int32
}

var taskEventRe = regexp.MustCompile(`time=(\S+) level=INFO msg="stage: tasks (assigned|revoked)"[^\n]*? stage=(\S+) partitions="?\[([0-9 ]*)\]`)

// parseTaskEvents reads the "stage: tasks assigned|revoked" lines of an
// instance's log (slog's text format, as the scenario child sets).
func parseTaskEvents(log string) []scTaskEvent {
	var out []scTaskEvent
	for _, m := range taskEventRe.FindAllStringSubmatch(log, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		e := scTaskEvent{at: at, stage: m[3], assigned: m[2] == "assigned"}
		for _, f := range strings.Fields(m[4]) {
			p, _ := strconv.Atoi(f)
			e.partitions = append(e.partitions, int32(p))
		}
		out = append(out, e)
	}
	return out
}

// ownedAt replays events up to at: the partitions owned per stage
// (cooperative assignment: each line adds or removes partitions).
func ownedAt(ev []scTaskEvent, at time.Time) map[string]map[int32]bool {
	out := map[string]map[int32]bool{}
	for _, e := range ev {
		if e.at.After(at) {
			break
		}
		if out[e.stage] == nil {
			out[e.stage] = map[int32]bool{}
		}
		for _, p := range e.partitions {
			if e.assigned {
				out[e.stage][p] = true
			} else {
				delete(out[e.stage], p)
			}
		}
	}
	return out
}

// --- the producer ---

// scProducer writes the load: record i has key "k<i mod 13>", amount
// 1 + i mod 97, partition i mod the partition count, and an event time
// (CreateTime) up to 400 ms behind the wall clock, so never later than
// the source's out-of-orderness bound behind its partition's newest.
type scProducer struct {
	t     *testing.T
	p     *kafka.Producer
	topic string
	rate  int

	mu       sync.Mutex
	parts    int32
	sums     map[scWin]int64
	newestMs int64
	n        int
	failed   int
	stopped  bool
	// noOffset counts the records reported delivered with no offset.
	noOffset int
	// sent are the records reported delivered, where the reports put
	// them: a record the topic lacks is named with its partition and
	// offset (locate).
	sent []scSent
	keys map[string]string // the keys of sent, one string each
	// produced are the records Produce took, reported those whose delivery
	// report the events goroutine has counted: stop waits for them to
	// meet, or the last records' sums could be missing from expected.
	produced, reported int

	quit chan struct{}
	done chan struct{}
}

// scSent is a record reported delivered: its partition and offset (-1 if
// the report had none), key, timestamp (Unix ms) and amount.
type scSent struct {
	off, ts      int64
	part, amount int32
	key          string
}

// scWin is a key's window, by its start in Unix ms.
type scWin struct {
	key   string
	start int64
}

func startProducer(t *testing.T, bs, topic string, rate int) *scProducer {
	t.Helper()
	// A metadata refresh every second: the producer knows the partitions
	// added to the topic soon (librdkafka's default: 5 minutes). One
	// request in flight: a partition's first batch refused as
	// NOT_LEADER_OR_FOLLOWER (a partition the broker lists before it has
	// created its log: a new topic, or one CreatePartitions added, as
	// TestScenarioReassignment's growth does) is retried before the next
	// is sent. With five, the next could be appended first (the broker
	// takes any first sequence from a producer it has no state for on the
	// partition: Kafka before 4.5, KAFKA-15591) and librdkafka would report
	// the earlier records delivered with no offset, never sending them
	// (kafkaclient.WaitServed; TestChaos lost two records so).
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "enable.idempotence": true, "linger.ms": 5, "topic.metadata.refresh.interval.ms": 1000, "max.in.flight.requests.per.connection": 1})
	if err != nil {
		t.Fatal(err)
	}
	sp := &scProducer{t: t, p: p, topic: topic, rate: rate, parts: scInputPartitions, sums: map[scWin]int64{}, keys: map[string]string{}, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		for ev := range p.Events() {
			m, ok := ev.(*kafka.Message)
			if !ok || string(m.Key) == scTickKey {
				continue
			}
			sp.mu.Lock()
			sp.reported++
			if m.TopicPartition.Error != nil {
				sp.failed++
			} else {
				if m.TopicPartition.Offset < 0 {
					// A success the broker did not answer for this
					// record: librdkafka's implicit ack (a later batch
					// of the partition succeeded), which may be a
					// record never written.
					sp.noOffset++
				}
				// Only what the broker has: a record it refused is no input.
				amount, _ := strconv.ParseInt(string(m.Value), 10, 64)
				ts := m.Opaque.(int64)
				key, ok := sp.keys[string(m.Key)]
				if !ok {
					key = string(m.Key)
					sp.keys[key] = key
				}
				sp.sums[scWin{key, ts - ts%scWindow.Milliseconds()}] += amount
				off := int64(m.TopicPartition.Offset)
				if off < 0 {
					off = -1
				}
				sp.sent = append(sp.sent, scSent{off: off, ts: ts, part: m.TopicPartition.Partition, amount: int32(amount), key: key})
			}
			sp.mu.Unlock()
		}
	}()
	go sp.run()
	return sp
}

func (sp *scProducer) run() {
	defer close(sp.done)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	begin := time.Now()
	for {
		select {
		case <-sp.quit:
			return
		case now := <-tick.C:
			due := int(now.Sub(begin).Seconds() * float64(sp.rate))
			sp.mu.Lock()
			for ; sp.n < due; sp.n++ {
				i := sp.n
				key := fmt.Sprintf("k%d", i%13)
				amount := int64(1 + i%97)
				ts := now.UnixMilli() - rng.Int63n(400)
				part := int32(i) % sp.parts
				m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &sp.topic, Partition: part}, Key: []byte(key), Value: []byte(strconv.FormatInt(amount, 10)), Timestamp: time.UnixMilli(ts), Opaque: ts}
				if err := sp.p.Produce(m, nil); err != nil {
					sp.failed++
					continue
				}
				sp.produced++
				if ts > sp.newestMs {
					sp.newestMs = ts
				}
			}
			sp.mu.Unlock()
		}
	}
}

// newest is the newest event time written so far (Unix ms).
func (sp *scProducer) newest() int64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.newestMs
}

// setPartitions makes the producer write to n partitions, once its
// metadata has them.
func (sp *scProducer) setPartitions(n int32) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := sp.p.GetMetadata(&sp.topic, false, 5000)
		if err == nil && len(md.Topics[sp.topic].Partitions) >= int(n) {
			break
		}
		if time.Now().After(deadline) {
			sp.t.Fatalf("the producer's metadata of %s has not %d partitions after 30 s (%v)", sp.topic, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sp.mu.Lock()
	sp.parts = n
	sp.mu.Unlock()
}

// writeAt writes n records to each of parts at once, stamped ts (Unix
// ms), counted in the expected output as the load's records are.
func (sp *scProducer) writeAt(parts []int32, ts int64, n int) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, part := range parts {
		for i := 0; i < n; i++ {
			key := fmt.Sprintf("k%d", (int(part)+i)%13)
			amount := int64(1 + i%97)
			m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &sp.topic, Partition: part}, Key: []byte(key), Value: []byte(strconv.FormatInt(amount, 10)), Timestamp: time.UnixMilli(ts), Opaque: ts}
			if err := sp.p.Produce(m, nil); err != nil {
				sp.t.Errorf("producer: a record to partition %d: %v", part, err)
				continue
			}
			sp.produced++
		}
	}
}

func (sp *scProducer) written() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.n
}

// stop ends the load and waits until every record is delivered.
func (sp *scProducer) stop() {
	sp.mu.Lock()
	stopped := sp.stopped
	sp.stopped = true
	sp.mu.Unlock()
	if stopped {
		return
	}
	close(sp.quit)
	<-sp.done
	if n := kafkaclient.Drain(sp.p, 30*time.Second); n > 0 {
		sp.t.Errorf("producer: %d records not delivered", n)
	}
	// Flush returns when the deliveries are done; their reports may still
	// be on their way through the events goroutine.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		sp.mu.Lock()
		caught := sp.reported >= sp.produced
		sp.mu.Unlock()
		if caught || time.Now().After(deadline) {
			break
		}
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.reported < sp.produced {
		sp.t.Errorf("producer: %d delivery reports of %d records never came", sp.produced-sp.reported, sp.produced)
	}
	if sp.failed > 0 {
		sp.t.Errorf("producer: %d records failed", sp.failed)
	}
	if sp.noOffset > 0 {
		// Not an error by itself (after a transport error the records may
		// be in the topic): the input check finds out.
		sp.t.Logf("producer: %d records reported delivered with no offset (librdkafka's implicit ack after a later batch's success: maybe never written)", sp.noOffset)
	}
}

// ticks writes a tick to every partition, a minute past the newest event
// time: every window ends behind every partition's watermark.
func (sp *scProducer) ticks() {
	sp.mu.Lock()
	ts, parts := sp.newestMs+60_000, sp.parts
	sp.mu.Unlock()
	for p := int32(0); p < parts; p++ {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &sp.topic, Partition: p}, Key: []byte(scTickKey), Value: []byte("0"), Timestamp: time.UnixMilli(ts)}
		if err := sp.p.Produce(m, nil); err != nil {
			sp.t.Fatal(err)
		}
	}
	if n := kafkaclient.Drain(sp.p, 30*time.Second); n > 0 {
		sp.t.Fatalf("producer: %d ticks not delivered", n)
	}
	sp.p.Close()
}

// expected is the output the records written imply (expectedFrom of the
// sums of the records whose delivery succeeded).
func (sp *scProducer) expected() map[scWin]string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return expectedFrom(sp.sums)
}

// expectedFrom is the output sums imply (by key and window): per key and
// window, "start|sum|total", total the running total of the key's windows.
func expectedFrom(sums map[scWin]int64) map[scWin]string {
	byKey := map[string][]int64{}
	for w := range sums {
		byKey[w.key] = append(byKey[w.key], w.start)
	}
	out := map[scWin]string{}
	for key, starts := range byKey {
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
		var total int64
		for _, s := range starts {
			sum := sums[scWin{key, s}]
			total += sum
			out[scWin{key, s}] = fmt.Sprintf("%d|%d|%d", s, sum, total)
		}
	}
	return out
}

// checkScenarioOutput fails unless recs hold exactly the records of want:
// every key's window once, with its sum and running total. An empty want
// (the producer wrote nothing) fails too: an empty output would equal it
// (issue 23).
//
// It returns the windows whose sum (not only the running total) is wrong,
// or that came twice: where a diagnosis starts (scRun.diagnose).
func checkScenarioOutput(t *testing.T, name string, recs []kafkaenv.Record, want map[scWin]string) (wrongSums []scWin) {
	t.Helper()
	if len(want) == 0 {
		t.Errorf("%s: the producer wrote no window (output of %d records): nothing to compare the output with", name, len(recs))
		return nil
	}
	got := map[scWin][]string{}
	for _, r := range recs {
		s, _, _ := strings.Cut(string(r.Value), "|")
		start, _ := strconv.ParseInt(s, 10, 64)
		w := scWin{string(r.Key), start}
		got[w] = append(got[w], string(r.Value))
	}
	var dup, missing, wrong, extra []string
	for w, vs := range got {
		if len(vs) > 1 {
			dup = append(dup, fmt.Sprintf("%s %v", w.key, vs))
			wrongSums = append(wrongSums, w)
		}
		switch exp, ok := want[w]; {
		case !ok:
			extra = append(extra, fmt.Sprintf("%s %s", w.key, vs[0]))
		case vs[0] != exp:
			wrong = append(wrong, fmt.Sprintf("%s %s, want %s", w.key, vs[0], exp))
			if strings.Split(vs[0], "|")[1] != strings.Split(exp, "|")[1] && len(vs) == 1 {
				wrongSums = append(wrongSums, w)
			}
		}
	}
	for w, exp := range want {
		if got[w] == nil {
			missing = append(missing, fmt.Sprintf("%s %s", w.key, exp))
		}
	}
	for _, s := range [][]string{dup, missing, wrong, extra} {
		sort.Strings(s)
	}
	if len(dup)+len(missing)+len(wrong)+len(extra) > 0 {
		t.Errorf("%s: output of %d records, want %d windows each once: %d twice or more (e.g. %v), %d missing (e.g. %v), %d with a wrong sum or total (e.g. %v), %d not expected (e.g. %v)",
			name, len(recs), len(want), len(dup), firstN(dup, 3), len(missing), firstN(missing, 3), len(wrong), firstN(wrong, 3), len(extra), firstN(extra, 3))
		return wrongSums
	}
	t.Logf("%s: output exact: %d windows of %d keys, each once, every sum and running total as the input implies", name, len(want), 13)
	return nil
}

// --- the output, read as it is written ---

// scOutput reads the output topic read_committed while the job runs and
// keeps when each record became visible.
type scOutput struct {
	mu   sync.Mutex
	seen map[scWin]time.Time
	quit chan struct{}
	done chan struct{}
}

func startOutput(t *testing.T, bs, topic string) *scOutput {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": "scenario-output-" + topic, "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.auto.commit": false, "fetch.wait.max.ms": 50})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, nil); err != nil {
		t.Fatal(err)
	}
	o := &scOutput{seen: map[scWin]time.Time{}, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		defer c.Close()
		for {
			select {
			case <-o.quit:
				return
			default:
			}
			m, err := c.ReadMessage(100 * time.Millisecond)
			if err != nil {
				continue
			}
			now := time.Now()
			s, _, _ := strings.Cut(string(m.Value), "|")
			start, _ := strconv.ParseInt(s, 10, 64)
			o.mu.Lock()
			w := scWin{string(m.Key), start}
			if _, ok := o.seen[w]; !ok {
				o.seen[w] = now
			}
			o.mu.Unlock()
		}
	}()
	return o
}

func (o *scOutput) stop() {
	select {
	case <-o.quit:
	default:
		close(o.quit)
	}
	<-o.done
}

// waitFor waits until every window of want has been seen (or timeout) and
// returns the windows seen.
func (o *scOutput) waitFor(want map[scWin]string, timeout time.Duration) map[scWin]time.Time {
	deadline := time.Now().Add(timeout)
	for {
		o.mu.Lock()
		n := 0
		for w := range want {
			if _, ok := o.seen[w]; ok {
				n++
			}
		}
		seen := make(map[scWin]time.Time, len(o.seen))
		for w, at := range o.seen {
			seen[w] = at
		}
		o.mu.Unlock()
		if n == len(want) || time.Now().After(deadline) {
			return seen
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type scPercentiles struct {
	p50, p99, max time.Duration
	n             int
}

func percentiles(ds []time.Duration) scPercentiles {
	if len(ds) == 0 {
		return scPercentiles{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1))].Round(time.Millisecond) }
	return scPercentiles{p50: at(0.5), p99: at(0.99), max: ds[len(ds)-1].Round(time.Millisecond), n: len(ds)}
}

// latencies: for the windows that ended between from and until, the time
// from the window's end to the output record's visibility.
func (o *scOutput) latencies(from, until time.Time) scPercentiles {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ds []time.Duration
	for w, at := range o.seen {
		end := time.UnixMilli(w.start + scWindow.Milliseconds())
		if end.Before(from) || end.After(until) {
			continue
		}
		ds = append(ds, at.Sub(end))
	}
	return percentiles(ds)
}

// --- the stages' committed offsets ---

// scCommit is a change of a task's committed offset, as a poll saw it:
// polled is when the poll that saw it began, at when it answered.
type scCommit struct {
	polled, at time.Time
	offset     int64
}

// scOffsets polls every stage's committed offsets on its input topic
// (every 100 ms) and keeps every change. It asks through a consumer of
// the stage's group that never joins it (Consumer.Committed: an
// OffsetFetch to the group's coordinator, not requiring stable offsets, so
// an open transaction's offsets are not waited for), not the admin
// client's ListConsumerGroupOffsets: librdkafka (2.4 to 2.11 at least,
// its issue 5040) dereferences the admin handle's absent consumer group
// when that answer says NOT_COORDINATOR, and the test process died of a
// SIGSEGV in rd_kafka_cgrp_op when a node holding a group's coordinator
// stopped (TestSoak: rd_kafka_ListConsumerGroupOffsetsResponse_parse →
// rd_kafka_handle_OffsetFetch → rd_kafka_cgrp_op, twice in two runs).
type scOffsets struct {
	mu      sync.Mutex
	commits map[scTask][]scCommit
	// polls are the start times of every stage's polls.
	polls map[string][]time.Time
	quit  chan struct{}
	done  chan struct{}
}

func startOffsets(t *testing.T, bs, app string, topics map[string]string) *scOffsets {
	t.Helper()
	consumers := map[string]*kafka.Consumer{}
	for stage := range topics {
		c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": app + "." + stage, "enable.auto.commit": false, "isolation.level": "read_uncommitted"})
		if err != nil {
			t.Fatal(err)
		}
		consumers[stage] = c
	}
	o := &scOffsets{commits: map[scTask][]scCommit{}, polls: map[string][]time.Time{}, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		defer func() {
			for _, c := range consumers {
				c.Close()
			}
		}()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		parts := map[string][]kafka.TopicPartition{}
		var listed time.Time
		for {
			if time.Since(listed) > time.Second {
				// The topics' partitions, again every second: an input
				// topic may grow (TestScenarioReassignment).
				listed = time.Now()
				for stage, topic := range topics {
					md, err := consumers[stage].GetMetadata(&topic, false, 5000)
					if err != nil {
						continue
					}
					var tps []kafka.TopicPartition
					for _, pm := range md.Topics[topic].Partitions {
						tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: pm.ID})
					}
					parts[stage] = tps
				}
			}
			for stage, topic := range topics {
				if len(parts[stage]) == 0 {
					continue
				}
				polled := time.Now()
				res, err := consumers[stage].Committed(parts[stage], 5000)
				now := time.Now()
				if err != nil {
					continue
				}
				o.mu.Lock()
				o.polls[stage] = append(o.polls[stage], polled)
				for _, tp := range res {
					if tp.Error != nil || tp.Topic == nil || *tp.Topic != topic || tp.Offset < 0 {
						continue
					}
					k := scTask{stage, tp.Partition}
					cs := o.commits[k]
					if len(cs) == 0 || cs[len(cs)-1].offset != int64(tp.Offset) {
						o.commits[k] = append(cs, scCommit{polled, now, int64(tp.Offset)})
					}
				}
				o.mu.Unlock()
			}
			select {
			case <-o.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return o
}

func (o *scOffsets) stop() {
	select {
	case <-o.quit:
	default:
		close(o.quit)
	}
	<-o.done
}

// handover measures how the tasks a fault took from an instance moved on:
// for each task, its first commit after from (the fault, or the
// instance's exit for a SIGTERM, which commits before it exits), as a
// delay since the fault at at, sorted; and a line saying it: "no tasks",
// none committed again, or the first and the last (since names the
// moment at is, "" for "after the signal").
func (o *scOffsets) handover(tasks []scTask, from, at time.Time, since string) (ds []time.Duration, line string) {
	for _, tk := range tasks {
		if c, ok := o.firstCommitAfter(tk, from); ok {
			ds = append(ds, c.Sub(at))
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	switch {
	case len(ds) == 0 && len(tasks) > 0:
		return ds, fmt.Sprintf("none of its %d tasks committed again", len(tasks))
	case len(ds) == 0:
		return ds, "no tasks"
	case since == "":
		return ds, fmt.Sprintf("its %d tasks committed again: the first %v, all %d by %v after the signal", len(tasks), ds[0].Round(time.Millisecond), len(ds), ds[len(ds)-1].Round(time.Millisecond))
	}
	return ds, fmt.Sprintf("its %d tasks committed again, after %s: the first %v, all %d by %v", len(tasks), since, ds[0].Round(time.Millisecond), len(ds), ds[len(ds)-1].Round(time.Millisecond))
}

// firstCommitAfter is when a commit of task tk made after at was first
// seen: the first change of its committed offset seen by a poll that began
// after the first poll that began after at (that one may still see a
// commit made before at). Polls are 100 ms apart: the time is late by up
// to that and the poll's answer time.
func (o *scOffsets) firstCommitAfter(tk scTask, at time.Time) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var base time.Time
	for _, p := range o.polls[tk.stage] {
		if !p.Before(at) {
			base = p
			break
		}
	}
	if base.IsZero() {
		return time.Time{}, false
	}
	for _, c := range o.commits[tk] {
		if c.polled.After(base) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// rate is the stage's committed input records per second between from and
// until, with the records written and committed then.
func (o *scOffsets) rate(stage string, from, until time.Time) (perSec float64, committed int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at := func(cs []scCommit, t time.Time) int64 {
		var off int64
		for _, c := range cs {
			if c.at.After(t) {
				break
			}
			off = c.offset
		}
		return off
	}
	for tk, cs := range o.commits {
		if tk.stage != stage {
			continue
		}
		committed += at(cs, until) - at(cs, from)
	}
	return float64(committed) / until.Sub(from).Seconds(), committed
}

// longestGap is the longest time between from and until that a task went
// without a commit, and which task.
func (o *scOffsets) longestGap(from, until time.Time) (scTask, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var worst scTask
	var gap time.Duration
	for tk, cs := range o.commits {
		// A task that had no commit before from (a partition added
		// later) counts from its first.
		var last time.Time
		for _, c := range cs {
			if c.at.Before(from) {
				last = from
				continue
			}
			if last.IsZero() {
				last = c.at
			}
			if c.at.After(until) {
				break
			}
			if d := c.at.Sub(last); d > gap {
				worst, gap = tk, d
			}
			last = c.at
		}
		if d := until.Sub(last); !last.IsZero() && d > gap {
			worst, gap = tk, d
		}
	}
	return worst, gap
}

// --- the watermarks ---

type scWMSample struct {
	at       time.Time
	newestMs int64
	stages   map[string]int64
}

// scWatermarks polls an instance's GET /watermarks every 250 ms.
type scWatermarks struct {
	mu      sync.Mutex
	samples []scWMSample
	quit    chan struct{}
	done    chan struct{}
}

func (w *scWatermarks) watch(url string, prod *scProducer) {
	w.stop()
	w.mu.Lock()
	w.quit, w.done = make(chan struct{}), make(chan struct{})
	quit, done := w.quit, w.done
	w.mu.Unlock()
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			newest := prod.newest()
			resp, err := http.Get(url)
			if err != nil {
				continue
			}
			var body service.WatermarksJSON
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil {
				continue
			}
			s := scWMSample{at: time.Now(), newestMs: newest, stages: map[string]int64{}}
			for name, st := range body.Stages {
				// Held, or nothing known yet (0: a new task after a
				// rebalance has not reported): no lag to measure.
				if !st.Held && st.GlobalMs > 0 {
					s.stages[name] = st.GlobalMs
				}
			}
			w.mu.Lock()
			w.samples = append(w.samples, s)
			w.mu.Unlock()
		}
	}()
}

func (w *scWatermarks) stop() {
	w.mu.Lock()
	quit, done := w.quit, w.done
	w.quit, w.done = nil, nil
	w.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

// lag is the stage's watermark lag behind the newest event time written,
// p50 and p99, over the samples between from and until.
func (w *scWatermarks) lag(stage string, from, until time.Time) (p50, p99 time.Duration, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ds []time.Duration
	for _, s := range w.samples {
		wm, ok := s.stages[stage]
		if !ok || s.at.Before(from) || s.at.After(until) {
			continue
		}
		ds = append(ds, time.Duration(s.newestMs-wm)*time.Millisecond)
	}
	p := percentiles(ds)
	return p.p50, p.p99, p.n
}

// TestInputSumsFindsARecordTwice: inputChecked's count of the input topic
// names a record its partition holds twice and sums it twice, so the
// output is judged against what the job read.
func TestInputSumsFindsARecordTwice(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	recs := []kafkaenv.Record{
		{Partition: 0, Offset: 7, Key: []byte("k6"), Value: []byte("45"), Timestamp: at},
		{Partition: 1, Offset: 7, Key: []byte("k6"), Value: []byte("45"), Timestamp: at},
		{Partition: 0, Offset: 9, Key: []byte("k6"), Value: []byte("45"), Timestamp: at},
		{Partition: 0, Offset: 10, Key: []byte(scTickKey), Value: []byte("0"), Timestamp: at},
	}
	sums, dups := inputSums(recs)
	w := scWin{"k6", at.UnixMilli() - at.UnixMilli()%scWindow.Milliseconds()}
	if sums[w] != 135 || len(sums) != 1 {
		t.Errorf("sums %v, want 135 for %v alone", sums, w)
	}
	if strings.Join(dups, " ") != "0@9=7" {
		t.Errorf("records twice %q, want [0@9=7]", dups)
	}
}

// TestLocateNamesAMissingRecord: when the input topic lacks records the
// producer's reports delivered (TestChaos: the first record of two
// partitions, reported with no offset), the input check names each with
// its partition and offset and what the topic holds there, and each
// partition's offsets.
func TestLocateNamesAMissingRecord(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123).UnixMilli()
	sp := &scProducer{sums: map[scWin]int64{}, noOffset: 1}
	for _, r := range []scSent{
		{part: 4, off: -1, ts: at, amount: 5, key: "k4"},  // implicitly acked, never written
		{part: 4, off: 0, ts: at, amount: 11, key: "k10"}, // the partition's first record
		{part: 5, off: 3, ts: at, amount: 6, key: "k5"},   // the topic holds another there
		{part: 5, off: 4, ts: at, amount: 7, key: "k6"},
	} {
		sp.sent = append(sp.sent, r)
		sp.sums[scWin{r.key, at - at%scWindow.Milliseconds()}] += int64(r.amount)
	}
	ts := time.UnixMilli(at)
	recs := []kafkaenv.Record{
		{Partition: 4, Offset: 0, Key: []byte("k10"), Value: []byte("11"), Timestamp: ts},
		{Partition: 5, Offset: 3, Key: []byte("k7"), Value: []byte("8"), Timestamp: ts},
		{Partition: 5, Offset: 4, Key: []byte("k6"), Value: []byte("7"), Timestamp: ts},
	}
	sums, _ := inputSums(recs)
	got := strings.Join(sp.locate(recs, sums), "; ")
	for _, want := range []string{
		"2 records delivered and not in the topic",
		fmt.Sprintf("k4 ts=%d amount=5 reported delivered to partition 4 with no offset (librdkafka's implicit ack), not in that partition", at),
		fmt.Sprintf("k5 ts=%d amount=6 reported delivered to 5@3, where the topic holds k7 ts=%d amount=8", at, at),
		fmt.Sprintf("1 records in the topic with no delivery report: k7 ts=%d amount=8 at 5@3", at),
		"4: 0..0 (1 records), 5: 3..4 (2 records); 1 delivery reports had no offset",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("locate says:\n%s\nwant it to say %q", got, want)
		}
	}
	if strings.Contains(got, "k10") || strings.Contains(got, "k6 ") {
		t.Errorf("locate names a record the topic holds where its report put it:\n%s", got)
	}
}

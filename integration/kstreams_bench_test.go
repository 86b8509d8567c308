package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
)

// This file is issue 24's first goal: Kafka Streams as a baseline in
// `make bench`. One job, a windowed sum (4 partitions, 1 000 keys, 10 s
// fixed windows, exactly once, output to a topic), run both ways over the
// same input on the package's broker: as a Beam Go pipeline on this runner
// (kafkaio.Read → parse → window.NewFixedWindows(10 s) → stats.SumPerKey →
// kafkaio.Write, a child process of the test binary) and as the Kafka
// Streams application of integration/kstreamsbench (a java child process).

const (
	// EnvBenchKS lists BenchmarkKafkaStreams' batch sizes in records,
	// comma-separated, each a count with an optional k or M suffix
	// ("1M,10M"); default DefaultBenchKS.
	EnvBenchKS = "KAFKASTREAMS_BENCH_KS"
	// DefaultBenchKS is BenchmarkKafkaStreams' batch size when EnvBenchKS
	// is unset: 1 M records (the 10 M row takes about 5 minutes more).
	DefaultBenchKS = "1M"
	// EnvBenchKSSteady is the steady-rate run's length (a Go duration,
	// default 60s; "0" skips it).
	EnvBenchKSSteady = "KAFKASTREAMS_BENCH_KS_STEADY"
	// EnvBenchKSSteadyLogs, if set, names a directory where the steady run
	// writes each side's log (<side>.log; with stage.EnvTraceCommits set,
	// this runner's commit trace) and each window's rows' latencies
	// (<side>-windows.txt: window end + grace in Unix ms, then the
	// earliest and the latest row's latency in ms), for finding where the
	// latency goes.
	EnvBenchKSSteadyLogs = "KAFKASTREAMS_BENCH_KS_STEADY_LOGS"
	// EnvBenchKSLogs, if set, names a directory where every batch run
	// writes its side's log (ksbench-<side>-<Unix ns>.log). Apart from
	// it, stage.EnvTraceCommits makes each batch round's line of this
	// runner say where its stage loops' time went (commitSplit: poll,
	// decide, produce and commit).
	EnvBenchKSLogs = "KAFKASTREAMS_BENCH_KS_LOGS"
	// EnvBenchKSProfile, if set, names a directory where BenchmarkKafkaStreams
	// writes a CPU profile (pprof) of this runner's process for each batch
	// size, from one extra run before the measured rounds, and of the
	// steady run's (ours-steady.pprof: the measured run itself, so its
	// latencies carry pprof's sampling, a few percent of CPU).
	EnvBenchKSProfile = "KAFKASTREAMS_BENCH_KS_PROFILE"
	// EnvBenchKSOverlap, if set, adds a fourth side to each batch round:
	// this runner with --poll_during_commit (metrics prefix overlap-, and
	// overlap/ours, the ratio of the wall medians, and of the CPU's):
	// what the poll during a commit (stage/prefetch.go) changes, in the
	// same run.
	EnvBenchKSOverlap = "KAFKASTREAMS_BENCH_KS_OVERLAP"
	// envKSJar names the built kstreamsbench jar (make bench passes
	// integration/kstreamsbench/target/kstreamsbench.jar, its runtime jars
	// beside it in lib/); unset, the benchmark builds it with mvn.
	envKSJar = "KAFKASTREAMS_BENCH_KS_JAR"

	// The child pipeline's settings (envChildN and envChildApp besides).
	envWSIn      = "KAFKASTREAMS_CHILD_WS_IN"      // input topic
	envWSOut     = "KAFKASTREAMS_CHILD_WS_OUT"     // output topic
	envWSSteady  = "KAFKASTREAMS_CHILD_WS_STEADY"  // "1": an unbounded Read
	envWSOverlap = "KAFKASTREAMS_CHILD_WS_OVERLAP" // "1": --poll_during_commit
	envChildProf = "KAFKASTREAMS_CHILD_CPUPROFILE" // a CPU profile to write (runChild)
)

const (
	// wsPartitions is the input and output topics' partition count and
	// this runner's --internal_topic_partitions.
	wsPartitions = 4
	// wsKeys is how many keys the records spread over, uniformly.
	wsKeys = 1000
	// wsWindow and wsGrace are the windows: 10 s fixed windows; Kafka
	// Streams' grace (TimeWindows.ofSizeAndGrace) and this runner's
	// bounded out-of-orderness (kafkaio.WithBoundedOutOfOrderness) are
	// both wsGrace, so both accept the same records.
	wsWindow = 10 * time.Second
	wsGrace  = time.Second
	// wsSpacingMs is the event-time step between consecutive batch records
	// (all partitions together): 10 000 records a window, 10 a key.
	wsSpacingMs = 1
	// wsRounds is how many rounds each batch size runs, the sides
	// alternating in each; the medians are reported.
	wsRounds = 2
	// wsSteadyRate is the steady run's input rate, records per second.
	wsSteadyRate = 2000
)

// ksJVMFlags are the Kafka Streams child's JVM flags: a 2 GiB heap cap
// (the JVM's own default is a quarter of the machine's memory) and G1, the
// JVM's default collector on a machine of two cores or more, named.
var ksJVMFlags = []string{"-Xmx2g", "-XX:+UseG1GC"}

// wsParse reads an input record: its key the key, its value the decimal
// value to sum.
func wsParse(k, v []byte) (string, int64, error) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("windowed sum: value %q of key %q is not a decimal integer", v, k)
	}
	return string(k), n, nil
}

// wsFormat writes a window's sum as the Kafka Streams side does: the key,
// and the value "windowStartMs sum".
func wsFormat(w beam.Window, k string, sum int64) ([]byte, []byte) {
	iw := w.(window.IntervalWindow)
	return []byte(k), []byte(strconv.FormatInt(iw.Start.Milliseconds(), 10) + " " + strconv.FormatInt(sum, 10))
}

func init() {
	register.Function2x3(wsParse)
	register.Function3x2(wsFormat)
	childPipelines["bench-windowed-sum"] = func(o *runner.Options) *beam.Pipeline {
		o.InternalTopicPartitions = wsPartitions
		o.PollDuringCommit = os.Getenv(envWSOverlap) != ""
		opts := []kafkaio.Option{kafkaio.WithBoundedOutOfOrderness(wsGrace)}
		if os.Getenv(envWSSteady) == "" {
			opts = append(opts, kafkaio.Bounded())
		}
		p, s := beam.NewPipelineWithRoot()
		kv := beam.ParDo(s, wsParse, kafkaio.Read(s, os.Getenv(envWSIn), opts...))
		sums := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(wsWindow), kv))
		kafkaio.Write(s, os.Getenv(envWSOut), beam.ParDo(s, wsFormat, sums))
		return p
	}
}

// wsRow is one output row's identity: a window (its start, ms since the
// epoch) and a key.
type wsRow struct {
	start int64
	key   string
}

// wsKey returns key i (0 <= i < wsKeys).
func wsKey(i int) string { return "k" + strconv.Itoa(i) }

// mix is splitmix64's finalizer: a well-spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// wsRecord is batch record i of an input whose first event time is baseMs:
// a key uniform over wsKeys (a hash of i), a value from 1 to 100, and the
// event time baseMs + i·wsSpacingMs, so records are in event-time order in
// every partition and a window closes once a later one has records.
func wsRecord(i int, baseMs int64) (key string, value int64, tsMs int64) {
	h := mix(uint64(i))
	return wsKey(int(h % wsKeys)), int64(h>>32%100) + 1, baseMs + int64(i)*wsSpacingMs
}

// wsExpect is the rows a run must write: the sum by window and key of
// every record added, and the windows before cutoff only (a window at or
// after it closes on neither side, or only on the bounded one).
type wsExpect struct {
	sums   map[wsRow]int64
	cutoff int64 // ms: windows starting at or after it are not compared
}

func (e *wsExpect) add(key string, value, tsMs int64) {
	w := tsMs - tsMs%wsWindow.Milliseconds()
	e.sums[wsRow{w, key}] += value
}

// wsSentinels returns, for each of wsPartitions partitions, a key the
// Java partitioner sends there (the first of k0, k1, …): the keys of the
// records that close the last windows on Kafka Streams, whose suppress
// emits a window only when its partition's stream time passes the
// window's end plus the grace.
func wsSentinels() []string {
	keys := make([]string, wsPartitions)
	found := 0
	for i := 0; found < wsPartitions; i++ {
		k := wsKey(i)
		if p := javapartition.ForKey([]byte(k), wsPartitions); keys[p] == "" {
			keys[p] = k
			found++
		}
	}
	return keys
}

// wsBatch describes a batch input of n records from baseMs: the records
// from wsRecord, then one sentinel per partition (value 0) at an event
// time past the last window's end plus the grace. Every output row of a
// window before the sentinels' is expected.
func wsBatch(n int, baseMs int64) (expect wsExpect, sentinelMs int64) {
	expect = wsExpect{sums: map[wsRow]int64{}}
	for i := 0; i < n; i++ {
		k, v, ts := wsRecord(i, baseMs)
		expect.add(k, v, ts)
	}
	last := baseMs + int64(n-1)*wsSpacingMs
	// A second past the close, against an off-by-one in either side's rule.
	sentinelMs = last - last%wsWindow.Milliseconds() + wsWindow.Milliseconds() + wsGrace.Milliseconds() + 1000
	expect.cutoff = sentinelMs - sentinelMs%wsWindow.Milliseconds()
	return expect, sentinelMs
}

// wsCheck compares the rows a side wrote with the expected ones, naming up
// to five differences.
func wsCheck(side string, got map[wsRow]int64, e wsExpect) error {
	var diffs []string
	for r, want := range e.sums {
		if g, ok := got[r]; !ok {
			diffs = append(diffs, fmt.Sprintf("window %d key %s: no row, want sum %d", r.start, r.key, want))
		} else if g != want {
			diffs = append(diffs, fmt.Sprintf("window %d key %s: sum %d, want %d", r.start, r.key, g, want))
		}
	}
	for r, g := range got {
		if _, ok := e.sums[r]; !ok {
			diffs = append(diffs, fmt.Sprintf("window %d key %s: sum %d, no such window and key in the input", r.start, r.key, g))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	slices.Sort(diffs)
	return fmt.Errorf("%s wrote %d rows, want %d; %d differ: %s", side, len(got), len(e.sums), len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
}

// parseWSRow reads an output record: key, value "windowStartMs sum".
func parseWSRow(key, value []byte) (wsRow, int64, error) {
	start, sum, ok := strings.Cut(string(value), " ")
	s, err1 := strconv.ParseInt(start, 10, 64)
	n, err2 := strconv.ParseInt(sum, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return wsRow{}, 0, fmt.Errorf("output record %q = %q is not \"windowStartMs sum\"", key, value)
	}
	return wsRow{s, string(key)}, n, nil
}

// procTimes returns process pid's CPU time (user + system, /proc/<pid>/stat
// utime and stime at USER_HZ = 100) and its peak resident set (VmHWM,
// bytes); zeros once it cannot be read.
func procTimes(pid int) (cpu time.Duration, peak int64) {
	if pid <= 0 {
		return 0, 0
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name, which may hold spaces: state is
		// field 3, utime 14 and stime 15.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			f := strings.Fields(string(b)[i+1:])
			if len(f) > 12 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				s, _ := strconv.ParseInt(f[12], 10, 64)
				cpu = time.Duration(u+s) * 10 * time.Millisecond
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			var kb int64
			if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
				peak = kb << 10
			}
		}
	}
	return cpu, peak
}

// parseKSSizes parses EnvBenchKS's list (empty: DefaultBenchKS).
func parseKSSizes(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultBenchKS
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "M"):
			mult, f = 1_000_000, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "k"):
			mult, f = 1000, strings.TrimSuffix(f, "k")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive record count (list: %q)", EnvBenchKS, f, s)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// percentile returns the q-quantile (0 <= q <= 1) of ds by the nearest
// rank; 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// wsProducer writes records to one topic with an idempotent producer
// (acks=all), each to the partition the Java partitioner gives its key,
// and counts delivery failures.
type wsProducer struct {
	p      *kafka.Producer
	topic  string
	failed chan error
	done   chan struct{}
}

func newWSProducer(bs, topic string) (*wsProducer, error) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  bs,
		"enable.idempotence": true,
		"acks":               "all",
		"linger.ms":          5,
	})
	if err != nil {
		return nil, fmt.Errorf("producer of %s: %w", topic, err)
	}
	w := &wsProducer{p: p, topic: topic, failed: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range p.Events() {
			if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
				select {
				case w.failed <- fmt.Errorf("deliver to %s partition %d: %w", topic, m.TopicPartition.Partition, m.TopicPartition.Error):
				default:
				}
			}
		}
	}()
	return w, nil
}

func (w *wsProducer) produce(key string, value, tsMs int64) error {
	msg := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: javapartition.ForKey([]byte(key), wsPartitions)},
		Key:            []byte(key),
		Value:          []byte(strconv.FormatInt(value, 10)),
		Timestamp:      time.UnixMilli(tsMs),
	}
	if err := kafkaclient.Produce(w.p, msg, nil, nil); err != nil {
		return fmt.Errorf("produce to %s: %w", w.topic, err)
	}
	return nil
}

// close flushes every record and returns the first delivery error.
func (w *wsProducer) close() error {
	for kafkaclient.Drain(w.p, time.Second) > 0 {
	}
	w.p.Close()
	<-w.done
	select {
	case err := <-w.failed:
		return err
	default:
		return nil
	}
}

// rowWatcher reads an output topic read_committed from its beginning,
// without a group, and notes each row and when it was first read.
type rowWatcher struct {
	mu   sync.Mutex
	rows map[wsRow]int64
	seen map[wsRow]time.Time
	dups []string
	err  error
	stop context.CancelFunc
	done chan struct{}
}

func watchRows(bs, topic string) (*rowWatcher, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":  bs,
		"group.id":           "ksbench-watch", // required by librdkafka; never joined
		"enable.auto.commit": false,
		"isolation.level":    "read_committed",
		"fetch.wait.max.ms":  10,
	})
	if err != nil {
		return nil, fmt.Errorf("watcher of %s: %w", topic, err)
	}
	var assign []kafka.TopicPartition
	for p := int32(0); p < wsPartitions; p++ {
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(assign); err != nil {
		c.Close()
		return nil, fmt.Errorf("watcher of %s: %w", topic, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &rowWatcher{rows: map[wsRow]int64{}, seen: map[wsRow]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer c.Close()
		for ctx.Err() == nil {
			switch ev := c.Poll(50).(type) {
			case *kafka.Message:
				now := time.Now()
				r, sum, err := parseWSRow(ev.Key, ev.Value)
				w.mu.Lock()
				switch {
				case err != nil:
					w.err = fmt.Errorf("%s partition %d offset %d: %w", topic, ev.TopicPartition.Partition, ev.TopicPartition.Offset, err)
				case w.seen[r] != time.Time{}:
					w.dups = append(w.dups, fmt.Sprintf("window %d key %s (sums %d and %d)", r.start, r.key, w.rows[r], sum))
				default:
					w.rows[r], w.seen[r] = sum, now
				}
				w.mu.Unlock()
			case kafka.Error:
				if ev.IsFatal() {
					w.mu.Lock()
					w.err = fmt.Errorf("watcher of %s: %w", topic, ev)
					w.mu.Unlock()
					return
				}
			}
		}
	}()
	return w, nil
}

// count returns how many distinct rows of windows before cutoff were read.
func (w *rowWatcher) count(cutoff int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for r := range w.rows {
		if r.start < cutoff {
			n++
		}
	}
	return n
}

// close stops the watcher and returns its rows before cutoff and when each
// was read, or the first malformed or duplicate row.
func (w *rowWatcher) close(cutoff int64) (map[wsRow]int64, map[wsRow]time.Time, error) {
	w.stop()
	<-w.done
	rows, seen := map[wsRow]int64{}, map[wsRow]time.Time{}
	for r, s := range w.rows {
		if r.start < cutoff {
			rows[r], seen[r] = s, w.seen[r]
		}
	}
	if w.err != nil {
		return nil, nil, w.err
	}
	if len(w.dups) > 0 {
		return nil, nil, fmt.Errorf("%d rows written twice (exactly once broken), e.g. %s", len(w.dups), strings.Join(w.dups[:min(3, len(w.dups))], "; "))
	}
	return rows, seen, nil
}

// wsSide is one side of the comparison: this runner, or Kafka Streams
// with some threads.
type wsSide struct {
	name    string // "ours", "ks1", "ks2", "overlap": the metrics' prefix
	threads int    // Kafka Streams' num.stream.threads; 0 for this runner
	// overlap runs this runner with --poll_during_commit
	// (EnvBenchKSOverlap).
	overlap bool
}

func (s wsSide) String() string {
	if s.threads == 0 && s.overlap {
		return "this runner, --poll_during_commit"
	}
	if s.threads == 0 {
		return "this runner"
	}
	return fmt.Sprintf("Kafka Streams (%d thread%s)", s.threads, map[bool]string{true: "s"}[s.threads > 1])
}

// wsProc is a running side: its child process and its output.
type wsProc struct {
	side wsSide
	cmd  *exec.Cmd
	log  *syncBuffer
	out  string // the ours side's result file
}

// startSide starts side as a child process reading in and writing out
// under application id app; profile, if set, is where this runner's child
// writes a CPU profile.
func startSide(b *testing.B, side wsSide, jar, in, out, app string, steady bool, profile string) *wsProc {
	b.Helper()
	dir := b.TempDir()
	p := &wsProc{side: side, log: &syncBuffer{}}
	if side.threads == 0 {
		p.out = filepath.Join(dir, "result.json")
		p.cmd = exec.Command(os.Args[0], "-test.run=^$")
		p.cmd.Env = append(os.Environ(), envChild+"=bench-windowed-sum", envChildOut+"="+p.out, envChildApp+"="+app,
			envWSIn+"="+in, envWSOut+"="+out, kafkaenv.EnvBootstrapServers+"="+broker.BootstrapServers())
		if steady {
			p.cmd.Env = append(p.cmd.Env, envWSSteady+"=1")
		}
		if side.overlap {
			p.cmd.Env = append(p.cmd.Env, envWSOverlap+"=1")
		}
		if profile != "" {
			p.cmd.Env = append(p.cmd.Env, envChildProf+"="+profile)
		}
	} else {
		p.cmd = ksCommand(jar, "WindowedSum", broker.BootstrapServers(), app, in, out, filepath.Join(dir, "state"), strconv.Itoa(side.threads))
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("%s: %v", side, err)
	}
	return p
}

// ksCommand is the java command running class (of package
// io.github.kafkastreams.kstreamsbench) of the kstreamsbench jar with
// arguments args, under ksJVMFlags, its runtime jars beside it in lib/.
func ksCommand(jar, class string, args ...string) *exec.Cmd {
	a := append(slices.Clone(ksJVMFlags), "-cp", jar+string(os.PathListSeparator)+filepath.Join(filepath.Dir(jar), "lib", "*"),
		"io.github.kafkastreams.kstreamsbench."+class)
	return exec.Command("java", append(a, args...)...)
}

// exited reports whether the child has exited (without reaping it).
func (p *wsProc) exited() bool {
	return syscall.Kill(p.cmd.Process.Pid, 0) != nil || procState(p.cmd.Process.Pid) == "Z"
}

// procState returns /proc/<pid>/stat's state letter ("" if unreadable).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return ""
}

// stop ends the child: this runner's bounded job has exited or exits by
// itself (waited up to a minute, its result checked), an unbounded one and
// Kafka Streams get SIGTERM.
func (p *wsProc) stop(b *testing.B, bounded bool) {
	b.Helper()
	if !bounded || p.side.threads > 0 {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	waited := make(chan error, 1)
	go func() { waited <- p.cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-waited
		b.Fatalf("%s did not exit within a minute of its last row; its log's end:\n%s", p.side, tail(p.log.String(), 3000))
	}
	if p.side.threads == 0 && bounded {
		c := &child{out: p.out}
		c.log.Write(p.log.Bytes())
		if r := c.result(b); r.Err != "" {
			b.Fatalf("%s: %s\n%s", p.side, r.Err, tail(p.log.String(), 3000))
		}
	}
}

// wsRun is one measured batch run of a side.
type wsRun struct {
	wall      time.Duration // child start to its last row read read_committed
	cpu       time.Duration // the child's CPU time then
	brokerCPU time.Duration // the broker's CPU time over the same span (0: unknown)
	// brokerThreads is where brokerCPU went, by thread group
	// (threadCPUSince); brokerJIT is its JIT compilers' part (jitCPU).
	brokerThreads map[string]time.Duration
	brokerJIT     time.Duration
	peakRSS       int64         // the child's VmHWM then, bytes
	firstRow      time.Duration // child start to its first row read
	// split is where this runner's stage loops' time went
	// (commitSplit), with stage.EnvTraceCommits set; nil otherwise and
	// for Kafka Streams.
	split []loopSplit
	// appends is what the side appended to the broker's logs, its own
	// topics and the broker's (formatAppends); "" if it could not be read.
	appends string
}

// runBatchSide runs side over the batch input topic in until every
// expected row is visible read_committed in a fresh output topic, then
// checks the rows and stops the child.
func runBatchSide(b *testing.B, side wsSide, jar, in string, e wsExpect, profile string) wsRun {
	b.Helper()
	ctx := context.Background()
	bs := broker.BootstrapServers()
	tag := fmt.Sprintf("ksbench-%s-%d", side.name, time.Now().UnixNano())
	out := tag + "-out"
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: out, Partitions: wsPartitions}); err != nil {
		b.Fatal(err)
	}
	w, err := watchRows(bs, out)
	if err != nil {
		b.Fatal(err)
	}
	endsBefore, endsErr := logEnds(ctx, bs, "")
	brokerStart, _ := procTimes(broker.PID())
	brokerThreads := threadCPU(broker.PID())
	start := time.Now()
	p := startSide(b, side, jar, in, out, tag, false, profile)
	want := len(e.sums)
	var run wsRun
	var cpu time.Duration
	var peak int64
	deadline := start.Add(15 * time.Minute)
	for {
		// The last readable figures: a child that has exited (this
		// runner's bounded job, before the watcher's last fetch) keeps
		// those of its last sample.
		c, pk := procTimes(p.cmd.Process.Pid)
		cpu, peak = max(cpu, c), max(peak, pk)
		n := w.count(e.cutoff)
		if n > 0 && run.firstRow == 0 {
			run.firstRow = time.Since(start)
		}
		if n >= want {
			run.wall = time.Since(start)
			run.cpu, run.peakRSS = cpu, peak
			bc, _ := procTimes(broker.PID())
			run.brokerCPU = bc - brokerStart
			run.brokerThreads = threadCPUSince(broker.PID(), brokerThreads)
			run.brokerJIT = jitCPU(run.brokerThreads)
			break
		}
		if p.side.threads > 0 && p.exited() || time.Now().After(deadline) {
			p.stop(b, false)
			b.Fatalf("%s: %d of %d rows after %v; its log's end:\n%s", side, n, want, time.Since(start).Round(time.Millisecond), tail(p.log.String(), 3000))
		}
		if side.threads == 0 && p.exited() && n < want {
			// Bounded: exited with its output committed; the watcher may
			// need a moment for the last fetch.
			time.Sleep(2 * time.Second)
			if w.count(e.cutoff) < want {
				p.stop(b, true)
				b.Fatalf("%s exited having written %d of %d rows; its log's end:\n%s", side, w.count(e.cutoff), want, tail(p.log.String(), 3000))
			}
			continue
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop(b, true)
	if endsErr == nil {
		var after map[string]int64
		if after, endsErr = logEnds(ctx, bs, tag); endsErr == nil {
			run.appends = formatAppends(endsBefore, after, tag, 6)
		}
	}
	if endsErr != nil {
		b.Logf("%s: the log ends after its run are unknown: %v", side, endsErr)
	}
	if dir := os.Getenv(EnvBenchKSLogs); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, tag+".log"), []byte(p.log.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if side.threads == 0 && os.Getenv(stage.EnvTraceCommits) != "" {
		if run.split, err = commitSplit(p.log.String()); err != nil {
			b.Fatal(err)
		}
	}
	rows, _, err := w.close(e.cutoff)
	if err == nil {
		err = wsCheck(side.String(), rows, e)
	}
	if err != nil {
		b.Fatal(err)
	}
	return run
}

// kstreamsJar returns the built Kafka Streams application (envKSJar, or
// built here with mvn when unset, with Kafka Streams of the broker's
// version, kafkaenv.DefaultKafkaVersion).
func kstreamsJar(b *testing.B) string {
	b.Helper()
	if j := os.Getenv(envKSJar); j != "" {
		abs, err := filepath.Abs(j)
		if err != nil {
			b.Fatal(err)
		}
		return abs
	}
	pom, err := filepath.Abs("kstreamsbench/pom.xml")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("mvn", "-B", "-q", "-Dstyle.color=never", "-Dkafka.version="+kafkaenv.DefaultKafkaVersion, "-f", pom, "package", "dependency:copy-dependencies")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("mvn package of %s: %v\n%s", pom, err, tail(string(out), 3000))
	}
	return filepath.Join(filepath.Dir(pom), "target", "kstreamsbench.jar")
}

// BenchmarkKafkaStreams is issue 24's side-by-side: the windowed sum
// (wsPartitions partitions, wsKeys keys, 10 s fixed windows, exactly once,
// output to a topic) on this runner (the child pipeline
// "bench-windowed-sum") and as the Kafka Streams application
// integration/kstreamsbench with 1 and 2 stream threads (the JVM flags
// ksJVMFlags), over the same input on the package's broker.
//
// First, once, warmBroker: both sides over warmRecords records, not
// measured (the broker's JIT: see warmBroker). Then for each batch size of EnvBenchKS (records from wsRecord, event times
// 1 ms apart, one sentinel a partition to close the last windows on Kafka
// Streams), wsRounds rounds, in each this runner then Kafka Streams with 1
// and with 2 threads, each side into its own output topic; the medians of
// the rounds, per side (prefix ours-, ks1-, ks2-):
//
//	-s            wall time: the child's start to its last row read by a
//	              read_committed consumer
//	-cpu-s        the child's CPU seconds (user + system) by then
//	-broker-cpu-s the broker's CPU seconds over the same span
//	-broker-jit-s the part of them its JIT compiler threads took (jitCPU):
//	              what a warm broker would not spend; each round's log line
//	              gives the broker's busiest threads
//	-peakRSS-MB   the child's peak RSS (VmHWM) by then
//	-first-row-s  the child's start to its first row read
//
// and ours/ks1 (wall), ours/ks1-cpu (CPU), each a ratio of the medians.
// Every run's rows must equal the sums computed here from the input (so
// the sides' rows are equal): the benchmark fails if not.
//
// Then, unless EnvBenchKSSteady is 0, the steady run (sub-benchmark
// "steady"): this runner and Kafka Streams (1 thread) started together on
// one input topic, records written at wsSteadyRate a second with the
// wall clock as event time for EnvBenchKSSteady; for every row of a window
// that closed while records were written (its end plus the grace before
// the last record), its latency: read read_committed minus the window's end
// plus wsGrace; per side p50 and p99 (ours-p50-ms, …, ks1-p99-ms) and the
// cores used (CPU seconds over the run's length, ours-cores, ks1-cores).
// Both sides' rows are checked against the input's sums too.
//
// Then, unless EnvBenchKSRestore is 0, the restore (sub-benchmark
// "restore", runKSRestore): one changelog partition of that many bytes
// restored into a fresh store by this runner and by Kafka Streams.
//
// It ignores b.N: run it with -benchtime=1x (make bench).
func BenchmarkKafkaStreams(b *testing.B) {
	if broker == nil {
		b.Skip("needs a Kafka broker; not under -short")
	}
	sizes, err := parseKSSizes(os.Getenv(EnvBenchKS))
	if err != nil {
		b.Fatal(err)
	}
	steady := time.Minute
	if s := os.Getenv(EnvBenchKSSteady); s != "" {
		if steady, err = time.ParseDuration(s); err != nil || steady < 0 {
			b.Fatalf("%s=%q: want a duration (0 skips the steady run)", EnvBenchKSSteady, s)
		}
	}
	restore, err := parseBytes(os.Getenv(EnvBenchKSRestore))
	if err != nil {
		b.Fatal(err)
	}
	jar := kstreamsJar(b)
	if broker.PID() == 0 {
		b.Logf("the broker's process is unknown (%s): its CPU is not measured", broker.Describe())
	}
	b.ResetTimer()
	for _, n := range sizes {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) { runKSBatch(b, jar, n) })
	}
	if steady > 0 {
		b.Run("steady", func(b *testing.B) { runKSSteady(b, jar, steady) })
	}
	if restore > 0 {
		b.Run("restore", func(b *testing.B) { runKSRestore(b, jar, restore) })
	}
}

// warmRecords is the size of warmBroker's batch.
const warmRecords = 300_000

// ksWarmed is set once warmBroker has run (before the first batch size).
var ksWarmed bool

// warmBroker runs this runner and Kafka Streams (1 thread) once each over
// warmRecords records, unmeasured, before the measured rounds, and logs
// the broker's CPU in them, by thread, in one line (a benchmark's log
// keeps its first 10 lines). A fresh broker JVM compiles its hot paths
// in the first runs that reach them, and the order of the sides in a
// round put that on whichever ran first, this runner: in runs of 3 M
// records without it (2026-12-04) this runner's first run took 21.9-30.3
// broker CPU seconds and its second 8.0-11.6. Measured by the broker's
// threads (jitCPU) after this warm-up, at 3 M: this runner's first run
// cost the broker 8.9 CPU s, 4.6 of them in its C2 compiler thread, its
// second 4.6 (C2 0.9); Kafka Streams' first 4.9 (C2 1.8), its second 3.3
// (C2 0.4). More passes of 300 k records do not end it: in five, the
// compilers still took 26-50% of each pass's broker CPU, and the 3 M
// rounds after them 0.8-2.2 CPU s. So every run reports its JIT part
// (-broker-jit-s), and the comparison is made with and without it.
func warmBroker(b *testing.B, jar string) {
	in, e := writeWSInput(b, warmRecords)
	start := time.Now()
	var parts []string
	for _, s := range []wsSide{{name: "ours"}, {name: "ks1", threads: 1}} {
		r := runBatchSide(b, s, jar, in, e, "")
		parts = append(parts, fmt.Sprintf("%s %.2f s wall, broker %.1f CPU s (%s)", s, r.wall.Seconds(), r.brokerCPU.Seconds(), formatThreadCPU(r.brokerThreads, 3)))
	}
	b.Logf("broker warmed in %v, both sides over %d records, not measured: %s", time.Since(start).Round(time.Millisecond), warmRecords, strings.Join(parts, "; "))
}

// writeWSInput writes n records (wsRecord, then wsSentinels) to a new
// input topic and returns it and what the rows must be.
func writeWSInput(b *testing.B, n int) (string, wsExpect) {
	ctx := context.Background()
	bs := broker.BootstrapServers()
	in := fmt.Sprintf("ksbench-in-%d-%d", n, time.Now().UnixNano())
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: wsPartitions}); err != nil {
		b.Fatal(err)
	}
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	base -= base % wsWindow.Milliseconds()
	e, sentinelMs := wsBatch(n, base)
	pr, err := newWSProducer(bs, in)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		k, v, ts := wsRecord(i, base)
		if err := pr.produce(k, v, ts); err != nil {
			b.Fatal(err)
		}
	}
	for _, k := range wsSentinels() {
		if err := pr.produce(k, 0, sentinelMs); err != nil {
			b.Fatal(err)
		}
	}
	if err := pr.close(); err != nil {
		b.Fatal(err)
	}
	return in, e
}

// runKSBatch is one batch size of BenchmarkKafkaStreams.
func runKSBatch(b *testing.B, jar string, n int) {
	if !ksWarmed {
		warmBroker(b, jar)
		ksWarmed = true
	}
	in, e := writeWSInput(b, n)
	b.Logf("%d records in %s (%d partitions, %d keys), %d rows expected", n, in, wsPartitions, wsKeys, len(e.sums))
	sides := []wsSide{{name: "ours"}, {name: "ks1", threads: 1}, {name: "ks2", threads: 2}}
	if os.Getenv(EnvBenchKSOverlap) != "" {
		sides = append(sides, wsSide{name: "overlap", overlap: true})
	}
	if dir := os.Getenv(EnvBenchKSProfile); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		prof, err := filepath.Abs(filepath.Join(dir, fmt.Sprintf("ours-%d.pprof", n)))
		if err != nil {
			b.Fatal(err)
		}
		r := runBatchSide(b, sides[0], jar, in, e, prof)
		b.Logf("profiled run of this runner: %.2f s, %.1f CPU s; profile %s", r.wall.Seconds(), r.cpu.Seconds(), prof)
	}
	runs := map[string][]wsRun{}
	for round := 1; round <= wsRounds; round++ {
		for _, s := range sides {
			r := runBatchSide(b, s, jar, in, e, "")
			runs[s.name] = append(runs[s.name], r)
			loops := ""
			if len(r.split) > 0 {
				// On the round's line: a benchmark keeps 10 log lines.
				loops = "; stage loops: " + formatSplit(r.split)
			}
			b.Logf("round %d, %s: %.2f s wall, %.1f CPU s, broker %.1f CPU s (of it JIT %.1f; %s), peak RSS %.2f GB, first row at %.2f s; log appends %s%s",
				round, s, r.wall.Seconds(), r.cpu.Seconds(), r.brokerCPU.Seconds(), r.brokerJIT.Seconds(), formatThreadCPU(r.brokerThreads, 5), float64(r.peakRSS)/1e9, r.firstRow.Seconds(), r.appends, loops)
		}
	}
	med := map[string]wsRun{}
	for _, s := range sides {
		med[s.name] = medianRun(runs[s.name])
		m := med[s.name]
		b.ReportMetric(m.wall.Seconds(), s.name+"-s")
		b.ReportMetric(m.cpu.Seconds(), s.name+"-cpu-s")
		b.ReportMetric(m.brokerCPU.Seconds(), s.name+"-broker-cpu-s")
		b.ReportMetric(m.brokerJIT.Seconds(), s.name+"-broker-jit-s")
		b.ReportMetric(float64(m.peakRSS)/1e6, s.name+"-peakRSS-MB")
		b.ReportMetric(m.firstRow.Seconds(), s.name+"-first-row-s")
	}
	o, k := med["ours"], med["ks1"]
	b.ReportMetric(o.wall.Seconds()/k.wall.Seconds(), "ours/ks1")
	b.ReportMetric(o.cpu.Seconds()/k.cpu.Seconds(), "ours/ks1-cpu")
	if v, ok := med["overlap"]; ok {
		b.ReportMetric(v.wall.Seconds()/o.wall.Seconds(), "overlap/ours")
		b.ReportMetric(v.cpu.Seconds()/o.cpu.Seconds(), "overlap/ours-cpu")
		b.Logf("%d records: this runner with --poll_during_commit %.2f s, %.1f CPU s (broker %.1f); overlap/ours: wall %.2f, CPU %.2f",
			n, v.wall.Seconds(), v.cpu.Seconds(), v.brokerCPU.Seconds(), v.wall.Seconds()/o.wall.Seconds(), v.cpu.Seconds()/o.cpu.Seconds())
	}
	b.Logf("%d records, medians of %d rounds: this runner %.2f s, %.1f CPU s (broker %.1f), %.2f GB; Kafka Streams 1 thread %.2f s, %.1f CPU s (broker %.1f), %.2f GB; 2 threads %.2f s; ours/KS 1 thread: wall %.2f, CPU %.2f",
		n, wsRounds, o.wall.Seconds(), o.cpu.Seconds(), o.brokerCPU.Seconds(), float64(o.peakRSS)/1e9,
		k.wall.Seconds(), k.cpu.Seconds(), k.brokerCPU.Seconds(), float64(k.peakRSS)/1e9, med["ks2"].wall.Seconds(),
		o.wall.Seconds()/k.wall.Seconds(), o.cpu.Seconds()/k.cpu.Seconds())
}

// medianOf returns the median of f over runs (of an even count, the mean
// of the middle two); 0 for none. The benchmarks' rounds (BenchmarkKafkaStreams,
// BenchmarkPartitions) each report it per figure.
func medianOf[R any, T int64 | float64](runs []R, f func(R) T) T {
	if len(runs) == 0 {
		return 0
	}
	v := make([]T, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// medianRun returns, each figure taken on its own, the median of runs'
// figures (of an even count, the mean of the middle two: of wsRounds = 2,
// the mean).
func medianRun(runs []wsRun) wsRun {
	pick := func(f func(wsRun) int64) int64 { return medianOf(runs, f) }
	return wsRun{
		wall:      time.Duration(pick(func(r wsRun) int64 { return int64(r.wall) })),
		cpu:       time.Duration(pick(func(r wsRun) int64 { return int64(r.cpu) })),
		brokerCPU: time.Duration(pick(func(r wsRun) int64 { return int64(r.brokerCPU) })),
		brokerJIT: time.Duration(pick(func(r wsRun) int64 { return int64(r.brokerJIT) })),
		peakRSS:   pick(func(r wsRun) int64 { return r.peakRSS }),
		firstRow:  time.Duration(pick(func(r wsRun) int64 { return int64(r.firstRow) })),
	}
}

// ksRunning is the line the Kafka Streams child prints once it runs.
var ksRunning = regexp.MustCompile(`(?m)^RUNNING$`)

// runKSSteady is BenchmarkKafkaStreams' steady run.
func runKSSteady(b *testing.B, jar string, length time.Duration) {
	ctx := context.Background()
	bs := broker.BootstrapServers()
	tag := fmt.Sprintf("ksbench-steady-%d", time.Now().UnixNano())
	in := tag + "-in"
	sides := []wsSide{{name: "ours"}, {name: "ks1", threads: 1}}
	specs := []kafkaenv.TopicSpec{{Name: in, Partitions: wsPartitions}}
	for _, s := range sides {
		specs = append(specs, kafkaenv.TopicSpec{Name: tag + "-" + s.name + "-out", Partitions: wsPartitions})
	}
	if err := kafkaenv.CreateTopics(ctx, bs, specs...); err != nil {
		b.Fatal(err)
	}
	watchers := make([]*rowWatcher, len(sides))
	procs := make([]*wsProc, len(sides))
	for i, s := range sides {
		w, err := watchRows(bs, tag+"-"+s.name+"-out")
		if err != nil {
			b.Fatal(err)
		}
		watchers[i] = w
		prof := ""
		if dir := os.Getenv(EnvBenchKSProfile); dir != "" && s.name == "ours" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			if prof, err = filepath.Abs(filepath.Join(dir, "ours-steady.pprof")); err != nil {
				b.Fatal(err)
			}
		}
		procs[i] = startSide(b, s, jar, in, tag+"-"+s.name+"-out", tag+"-"+s.name, true, prof)
	}
	defer func() {
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	}()
	// Kafka Streams takes 2-3 s to its first assignment; write nothing
	// before it runs, so neither side starts behind.
	deadline := time.Now().Add(time.Minute)
	for !ksRunning.MatchString(procs[1].log.String()) {
		if time.Now().After(deadline) || procs[1].exited() {
			b.Fatalf("Kafka Streams did not reach RUNNING within a minute; its log's end:\n%s", tail(procs[1].log.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	pr, err := newWSProducer(bs, in)
	if err != nil {
		b.Fatal(err)
	}
	e := wsExpect{sums: map[wsRow]int64{}}
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i], _ = procTimes(p.cmd.Process.Pid)
	}
	begin := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	sent, i := 0, 0
	var lastMs int64
	for now := range tick.C {
		if now.Sub(begin) >= length {
			break
		}
		for due := int(now.Sub(begin).Seconds() * wsSteadyRate); sent < due; sent++ {
			h := mix(uint64(i) ^ 0x5eed)
			k, v := wsKey(int(h%wsKeys)), int64(h>>32%100)+1
			lastMs = time.Now().UnixMilli()
			if err := pr.produce(k, v, lastMs); err != nil {
				b.Fatal(err)
			}
			e.add(k, v, lastMs)
			i++
		}
	}
	tick.Stop()
	elapsed := time.Since(begin)
	cores := make([]float64, len(procs))
	for i, p := range procs {
		c, _ := procTimes(p.cmd.Process.Pid)
		cores[i] = (c - cpu0[i]).Seconds() / elapsed.Seconds()
	}
	if err := pr.close(); err != nil {
		b.Fatal(err)
	}
	// Compared: the windows from the first that started after the input
	// began to the last that closed (end + grace) while it was written.
	first := begin.UnixMilli() - begin.UnixMilli()%wsWindow.Milliseconds() + wsWindow.Milliseconds()
	// A window closes once every partition's stream time passes its end
	// plus the grace; a second of margin for the partitions' last records.
	e.cutoff = lastMs - wsGrace.Milliseconds() - wsWindow.Milliseconds() - 1000
	e.cutoff += wsWindow.Milliseconds() - e.cutoff%wsWindow.Milliseconds()
	for r := range e.sums {
		if r.start < first || r.start >= e.cutoff {
			delete(e.sums, r)
		}
	}
	if len(e.sums) == 0 {
		b.Fatalf("steady run of %v: no window both began and closed while records were written", length)
	}
	wait := time.Now().Add(30 * time.Second)
	for _, w := range watchers {
		for w.countFrom(first, e.cutoff) < len(e.sums) && time.Now().Before(wait) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i, s := range sides {
		procs[i].stop(b, false)
		rows, seen, err := watchers[i].close(e.cutoff)
		if err != nil {
			b.Fatal(err)
		}
		var lat []time.Duration
		for r := range rows {
			if r.start < first {
				delete(rows, r)
				continue
			}
			lat = append(lat, seen[r].Sub(time.UnixMilli(r.start).Add(wsWindow+wsGrace)))
		}
		if err := wsCheck(s.String(), rows, e); err != nil {
			b.Fatalf("steady run: %v", err)
		}
		if dir := os.Getenv(EnvBenchKSSteadyLogs); dir != "" {
			writeSteadyLogs(b, dir, s.name, procs[i].log.String(), seen, first)
		}
		p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
		b.ReportMetric(float64(p50.Milliseconds()), s.name+"-p50-ms")
		b.ReportMetric(float64(p99.Milliseconds()), s.name+"-p99-ms")
		b.ReportMetric(cores[i], s.name+"-cores")
		b.Logf("steady %d records/s for %v, %d windows of %d rows: %s latency from window end + %v to the row read read_committed p50 %v, p99 %v, max %v; %.2f cores",
			wsSteadyRate, length.Round(time.Second), (e.cutoff-first)/wsWindow.Milliseconds(), len(rows), s, wsGrace, p50, p99, percentile(lat, 1), cores[i])
	}
}

// countFrom returns how many rows of windows in [from, cutoff) were read.
func (w *rowWatcher) countFrom(from, cutoff int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for r := range w.rows {
		if r.start >= from && r.start < cutoff {
			n++
		}
	}
	return n
}

// TestWindowedSumInput checks BenchmarkKafkaStreams' input and its
// expected rows: keys spread over every one of wsKeys, the sentinels one a
// partition past the last window's close, the sums those of the records.
func TestWindowedSumInput(t *testing.T) {
	const n = 100_000
	e, sentinel := wsBatch(n, 1_000_000)
	keys := map[string]bool{}
	var total, want int64
	for r, s := range e.sums {
		keys[r.key] = true
		total += s
		if r.start >= e.cutoff {
			t.Errorf("row %v at or after the cutoff %d", r, e.cutoff)
		}
	}
	for i := 0; i < n; i++ {
		_, v, _ := wsRecord(i, 1_000_000)
		want += v
	}
	if len(keys) != wsKeys || total != want {
		t.Errorf("%d keys, total %d; want %d keys, total %d", len(keys), total, wsKeys, want)
	}
	if last := int64(1_000_000 + (n-1)*wsSpacingMs); sentinel < last-last%10_000+10_000+wsGrace.Milliseconds() {
		t.Errorf("sentinel at %d does not close the last window (last record at %d)", sentinel, last)
	}
	parts := map[int32]bool{}
	for _, k := range wsSentinels() {
		parts[javapartition.ForKey([]byte(k), wsPartitions)] = true
	}
	if len(parts) != wsPartitions {
		t.Errorf("sentinels reach partitions %v, want all %d", parts, wsPartitions)
	}
	if got, err := parseKSSizes("1M, 200k,5"); err != nil || !slices.Equal(got, []int{1_000_000, 200_000, 5}) {
		t.Errorf("parseKSSizes = %v, %v", got, err)
	}
	if err := wsCheck("x", map[wsRow]int64{{0, "k1"}: 3}, wsExpect{sums: map[wsRow]int64{{0, "k1"}: 4}}); err == nil {
		t.Error("wsCheck accepted a wrong sum")
	}
	if p := percentile([]time.Duration{5, 1, 3, 2, 4}, 0.5); p != 3 {
		t.Errorf("percentile p50 = %v, want 3", p)
	}
	if m := medianRun([]wsRun{{wall: 4}, {wall: 2}}); m.wall != 3 {
		t.Errorf("medianRun of walls 4 and 2 = %v, want 3", m.wall)
	}
}

// writeSteadyLogs writes side's log and its windows' latencies (from the
// rows' first sightings seen, windows from first) to dir
// (EnvBenchKSSteadyLogs).
func writeSteadyLogs(b *testing.B, dir, side, log string, seen map[wsRow]time.Time, first int64) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	type span struct{ lo, hi time.Duration }
	wins := map[int64]*span{}
	for r, at := range seen {
		if r.start < first {
			continue
		}
		closeAt := time.UnixMilli(r.start).Add(wsWindow + wsGrace)
		d := at.Sub(closeAt)
		if w := wins[closeAt.UnixMilli()]; w == nil {
			wins[closeAt.UnixMilli()] = &span{d, d}
		} else {
			w.lo, w.hi = min(w.lo, d), max(w.hi, d)
		}
	}
	var lines []string
	for end, w := range wins {
		lines = append(lines, fmt.Sprintf("%d %d %d", end, w.lo.Milliseconds(), w.hi.Milliseconds()))
	}
	slices.Sort(lines)
	if err := os.WriteFile(filepath.Join(dir, side+"-windows.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, side+".log"), []byte(log), 0o644); err != nil {
		b.Fatal(err)
	}
}

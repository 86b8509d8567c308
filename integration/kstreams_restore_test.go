package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// This file is issue 24's restore baseline ("state that moves in
// seconds"): one changelog partition of EnvBenchKSRestore bytes, restored
// into a fresh task store by this runner (state.Manager.Restore, the
// runner's changelog reader, a Pebble store) and by Kafka Streams (the
// kstreamsbench Restore application: a key-value store "store" whose
// changelog is that very topic, restored into RocksDB by Kafka Streams'
// own restore consumer before the application runs). Both read
// read_committed from the same partition of the same broker.

const (
	// EnvBenchKSRestore is the restore benchmark's changelog size: bytes
	// of keys and values, with an optional k, M or G suffix (KiB, MiB,
	// GiB); default DefaultBenchKSRestore; "0" skips it.
	EnvBenchKSRestore = "KAFKASTREAMS_BENCH_KS_RESTORE"
	// DefaultBenchKSRestore is the changelog size when EnvBenchKSRestore
	// is unset: the 1 GiB store of issue 24.
	DefaultBenchKSRestore = "1G"
	// restoreValue is the size of each changelog record's value in bytes,
	// restoreKey of its key ("k-" and 14 digits): 1 GiB is about a
	// million records.
	restoreValue = 1024
	restoreKey   = 16
	// restoreRounds is how many times each side restores the changelog
	// (alternating, a fresh store each time); medians are reported.
	restoreRounds = 2
)

// parseBytes parses EnvBenchKSRestore's size.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		s = DefaultBenchKSRestore
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, strings.TrimSuffix(s, "k")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a size in bytes with an optional k, M or G suffix (0 skips)", EnvBenchKSRestore, s)
	}
	return n * mult, nil
}

// restoreRun is one side's restore of the changelog.
type restoreRun struct {
	// restore is the restore's own time: Restore's call (ours), the
	// StateRestoreListener's start to end (Kafka Streams).
	restore time.Duration
	// ready is from the start (of Restore; of the JVM) until the store
	// is usable (Restore returned; state RUNNING).
	ready   time.Duration
	cpu     time.Duration
	records int64
}

// runKSRestore is BenchmarkKafkaStreams/restore: it fills a changelog of
// size bytes, then restores it restoreRounds times each way, alternating,
// and reports the changelog's size (changelog-MB) and per side the restore's MB/s (ours-restore-MB/s,
// ks-restore-MB/s; MB = 10^6 bytes of keys and values), its seconds, the
// CPU seconds of the restoring process (ours: this test process's own
// while it restores; Kafka Streams: the JVM's whole life, start-up
// included) and the ratio of the restore times (restore-ours/ks: under 1
// is faster). Every restore must bring back every record.
func runKSRestore(b *testing.B, jar string, size int64) {
	ctx := context.Background()
	bs := broker.BootstrapServers()
	// The batch and steady rows before it leave their topics (several
	// GB at 10 M) and this process's garbage: the restores should not
	// pay for them (inside make bench this runner's restore took 12-13
	// CPU s against 9-10 alone, and 1.33 of Kafka Streams' time against
	// 0.80-1.04 alone).
	if n, err := kafkaenv.DeleteTopicsWithPrefix(ctx, bs, "ksbench-"); err != nil {
		b.Logf("deleting the batch rows' topics: %v", err)
	} else if n > 0 {
		b.Logf("the batch rows' %d topics deleted: %s", n, waitLogsDeleted("ksbench-"))
	}
	runtime.GC()
	app := fmt.Sprintf("ksrestore-%d", time.Now().UnixNano())
	in, changelog := app+"-in", app+"-store-changelog"
	defer func() {
		if _, err := kafkaenv.DeleteTopicsWithPrefix(context.Background(), bs, app); err != nil {
			b.Logf("deleting the benchmark's topics: %v", err)
		}
		// The next benchmark does not pay for this one's gigabyte.
		b.Logf("restore benchmark: %s", waitLogsDeleted(app))
	}()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	createCompactedTopic(b, bs, changelog, 1)
	n := size / (restoreKey + restoreValue)
	start := time.Now()
	if err := fillChangelog(bs, changelog, n); err != nil {
		b.Fatal(err)
	}
	mb := float64(n*(restoreKey+restoreValue)) / 1e6
	b.Logf("changelog %s: %d records of %d bytes (%.0f MB) written in %v", changelog, n, restoreKey+restoreValue, mb, time.Since(start).Round(time.Millisecond))
	var ours, ks []restoreRun
	for r := 0; r < restoreRounds; r++ {
		o := restoreOurs(b, bs, changelog, n)
		b.Logf("round %d: this runner restored %d records in %v (%.1f MB/s), %.1f CPU s", r+1, o.records, o.restore.Round(time.Millisecond), mb/o.restore.Seconds(), o.cpu.Seconds())
		ours = append(ours, o)
		k := restoreKS(b, jar, bs, app, in, n)
		b.Logf("round %d: Kafka Streams restored %d records in %v (%.1f MB/s), RUNNING %v after the JVM's start, %.1f CPU s", r+1, k.records, k.restore.Round(time.Millisecond), mb/k.restore.Seconds(), k.ready.Round(time.Millisecond), k.cpu.Seconds())
		ks = append(ks, k)
	}
	o, k := medianRestore(ours), medianRestore(ks)
	b.ReportMetric(mb, "changelog-MB")
	b.ReportMetric(mb/o.restore.Seconds(), "ours-restore-MB/s")
	b.ReportMetric(mb/k.restore.Seconds(), "ks-restore-MB/s")
	b.ReportMetric(o.restore.Seconds(), "ours-restore-s")
	b.ReportMetric(k.restore.Seconds(), "ks-restore-s")
	b.ReportMetric(k.ready.Seconds(), "ks-running-s")
	b.ReportMetric(o.cpu.Seconds(), "ours-cpu-s")
	b.ReportMetric(k.cpu.Seconds(), "ks-cpu-s")
	b.ReportMetric(o.restore.Seconds()/k.restore.Seconds(), "restore-ours/ks")
}

// fillChangelog writes n records to partition 0 of topic, keys "k-" and
// 14 digits, values restoreValue bytes that differ from record to record,
// not transactional (every record committed, as a read_committed reader
// sees it).
func fillChangelog(bs, topic string, n int64) error {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 1 << 20,
		"queue.buffering.max.kbytes": 256 << 10, "enable.idempotence": true})
	if err != nil {
		return err
	}
	defer p.Close()
	go func() {
		for e := range p.Events() {
			if m, ok := e.(*kafka.Message); ok && m.TopicPartition.Error != nil {
				fmt.Fprintf(os.Stderr, "fillChangelog: %v\n", m.TopicPartition.Error)
			}
		}
	}()
	seed := make([]byte, restoreValue+256)
	for i := range seed {
		seed[i] = byte(mix(uint64(i)))
	}
	for i := int64(0); i < n; i++ {
		key := []byte(fmt.Sprintf("k-%014d", i))
		val := seed[i%256 : i%256+restoreValue]
		if err := kafkaclient.Produce(p, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: key, Value: val}, nil, nil); err != nil {
			return err
		}
	}
	for kafkaclient.Drain(p, time.Second) > 0 {
	}
	return nil
}

// restoreOurs restores partition 0 of changelog into a fresh task store
// as the runner does (state.Open with the runner's changelog reader) and
// checks that every key is there.
func restoreOurs(b *testing.B, bs, changelog string, n int64) restoreRun {
	b.Helper()
	m := newStateManager(b, bs, changelog)
	m.RemoveOnClose()
	cpu0 := selfCPU()
	start := time.Now()
	tk, err := m.Restore(context.Background(), 0)
	el := time.Since(start)
	cpu := selfCPU() - cpu0
	if err != nil {
		b.Fatal(err)
	}
	var count int64
	if err := tk.Scan(nil, func(k, v []byte) error {
		count++
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if count != n {
		b.Fatalf("this runner's restore holds %d keys, want %d", count, n)
	}
	m.Close()
	return restoreRun{restore: el, ready: el, cpu: cpu, records: count}
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var restoredLine = regexp.MustCompile(`(?m)^RESTORED (\d+) (\d+)$`)

// restoreKS runs the kstreamsbench Restore application (application id
// app, input topic in) with an empty state directory until it is RUNNING,
// its store restored from app's changelog, and stops it.
func restoreKS(b *testing.B, jar, bs, app, in string, n int64) restoreRun {
	b.Helper()
	cmd := ksCommand(jar, "Restore", bs, app, in, filepath.Join(b.TempDir(), "state"))
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	p := &wsProc{cmd: cmd, log: log}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	var run restoreRun
	for {
		out := log.String()
		if ksRunning.MatchString(out) {
			run.ready = time.Since(start)
			break
		}
		if p.exited() || time.Since(start) > 15*time.Minute {
			b.Fatalf("Kafka Streams did not reach RUNNING after %v; its log's end:\n%s", time.Since(start).Round(time.Millisecond), tail(out, 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	run.cpu, _ = procTimes(cmd.Process.Pid)
	m := restoredLine.FindStringSubmatch(log.String())
	if m == nil {
		b.Fatalf("Kafka Streams ran without restoring (no RESTORED line); its log's end:\n%s", tail(log.String(), 3000))
	}
	run.records, _ = strconv.ParseInt(m[1], 10, 64)
	ns, _ := strconv.ParseInt(m[2], 10, 64)
	run.restore = time.Duration(ns)
	if run.records != n {
		b.Fatalf("Kafka Streams restored %d records, want %d", run.records, n)
	}
	return run
}

// medianRestore returns the run of median restore time (the lower middle
// one of an even count).
func medianRestore(rs []restoreRun) restoreRun {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b restoreRun) int { return int(a.restore - b.restore) })
	return s[(len(s)-1)/2]
}

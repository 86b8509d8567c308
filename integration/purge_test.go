package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// Issue 23, "internal topics that neither lose nor hoard": the data topics
// between stages have infinite retention, each stage purges what its
// commits consumed (DeleteRecords), and a committed offset below an
// internal topic's log start fails the stage, naming it, never skips.

// purgeFail makes purgeFailFn fail on every value starting with "b" while
// it is set (the in-process harness runs the test's DoFns).
var purgeFail atomic.Bool

// purgeFailFn passes every record on, but fails on a value starting with
// "b" while purgeFail is set.
func purgeFailFn(k, v []byte) ([]byte, []byte, error) {
	if purgeFail.Load() && strings.HasPrefix(string(v), "b") {
		return nil, nil, fmt.Errorf("purgeFailFn: %s refused while purgeFail is set", v)
	}
	return k, v, nil
}

// purgeSideCountFn appends to each value the number of elements its side
// input holds ("v/3").
func purgeSideCountFn(k, v []byte, side func(*string) bool) ([]byte, []byte) {
	n := 0
	var e string
	for side(&e) {
		n++
	}
	return k, []byte(fmt.Sprintf("%s/%d", v, n))
}

func init() {
	register.Function2x3(purgeFailFn)
	register.Function3x2(purgeSideCountFn)
	register.Iter1[string]()
}

// dataTopics returns the internal data topics of application app on the
// cluster (its topics "<app>-s…" but its changelogs and side input
// topics), each with the consumer group of the stage reading it
// ("<app>.<stage>").
func dataTopics(t *testing.T, admin *kafka.AdminClient, app string) map[string]string {
	t.Helper()
	md, err := admin.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name := range md.Topics {
		rest, ok := strings.CutPrefix(name, app+"-")
		if !ok || !strings.HasPrefix(rest, "s") || strings.HasSuffix(rest, "-changelog") || strings.Contains(rest, "-side") {
			continue
		}
		out[name] = app + "." + rest
	}
	return out
}

// offsetsOf returns each partition's offset of topic as ListOffsets
// answers spec (kafka.EarliestOffsetSpec: the log start;
// kafka.LatestOffsetSpec: the high watermark), for partitions 0..n-1.
func offsetsOf(t *testing.T, ctx context.Context, admin *kafka.AdminClient, topic string, n int, spec kafka.OffsetSpec) map[int32]int64 {
	t.Helper()
	ask := map[kafka.TopicPartition]kafka.OffsetSpec{}
	for p := 0; p < n; p++ {
		ask[kafka.TopicPartition{Topic: &topic, Partition: int32(p)}] = spec
	}
	res, err := admin.ListOffsets(ctx, ask, kafka.SetAdminIsolationLevel(kafka.IsolationLevelReadUncommitted))
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	for tp, r := range res.ResultInfos {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("list offsets of %s/%d: %v", topic, tp.Partition, r.Error)
		}
		out[tp.Partition] = int64(r.Offset)
	}
	return out
}

// topicConfig returns the configs of topic as the broker describes them.
func topicConfig(t *testing.T, ctx context.Context, admin *kafka.AdminClient, topic string) map[string]string {
	t.Helper()
	res, err := admin.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("describe the configs of %s: %v %v", topic, err, res)
	}
	out := map[string]string{}
	for k, e := range res[0].Config {
		out[k] = e.Value
	}
	return out
}

// produceValues writes values to topic, spread over its partitions
// (n of them) by their index, each stamped now, and waits for them.
func produceValues(t *testing.T, bs, topic string, n int, values []string) {
	t.Helper()
	by := make([][]kioRec, n)
	for i, v := range values {
		by[i%n] = append(by[i%n], kioRec{key: []byte(v), value: []byte(v), ts: time.Now().UnixMilli()})
	}
	for p, recs := range by {
		produceAt(t, bs, topic, int32(p), recs...)
	}
}

func valuesNamed(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// TestInternalTopicsPurgedAfterCommit (issue 23): a job of two Reshuffle
// stages between a Kafka source and sink, run over two batches of records
// with --purge_interval=1s: its two internal data topics are created with
// retention.ms and retention.bytes -1 (they had the broker's default, 7
// days) and segment.bytes 64 MiB, and each partition's log start reaches
// the offset its stage's group committed (DeleteRecords after the
// commits; before, nothing was ever deleted but by retention), while the
// output holds every record once.
func TestInternalTopicsPurgedAfterCommit(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 2)); err != nil {
		t.Fatal(err)
	}
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const n = 1000
	first, second := valuesNamed("a", n), valuesNamed("b", n)
	produceValues(t, bs, in, 2, first)
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.Reshuffle(s.Scope("second"), beam.Reshuffle(s.Scope("first"), kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second)))))
	jctx, jcancel := context.WithCancel(ctx)
	defer jcancel()
	done := startJob(jctx, bs, app, p, func(o *runner.Options) {
		o.InternalTopicPartitions = 2
		o.PurgeInterval = time.Second
	})
	if got := readValues(t, bs, out, n, 90*time.Second); len(got) != n {
		t.Fatalf("the first batch: %d records in %s, want %d", len(got), out, n)
	}
	produceValues(t, bs, in, 2, second)
	if got := readValues(t, bs, out, 2*n, 90*time.Second); len(got) != 2*n {
		t.Fatalf("both batches: %d records in %s, want %d", len(got), out, 2*n)
	}
	topics := dataTopics(t, admin, app)
	if len(topics) != 2 {
		t.Fatalf("internal data topics of %s: %v, want the two Reshuffles' input topics", app, topics)
	}
	for topic, group := range topics {
		c := topicConfig(t, ctx, admin, topic)
		for k, want := range map[string]string{"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": strconv.Itoa(kafkaclient.InternalTopicMaxMessageBytes)} {
			if c[k] != want {
				t.Errorf("topic %s: %s=%s, want %s", topic, k, c[k], want)
			}
		}
		// The purge follows the commits within --purge_interval (and one
		// poll): every partition's log start is its committed offset.
		var committed, starts map[int32]int64
		deadline := time.Now().Add(30 * time.Second)
		for {
			committed, err = kafkaenv.CommittedOffsets(ctx, bs, group, topic)
			if err != nil {
				t.Fatal(err)
			}
			starts = offsetsOf(t, ctx, admin, topic, 2, kafka.EarliestOffsetSpec)
			if len(committed) == 2 && committed[0] > 0 && committed[1] > 0 && reflect.DeepEqual(committed, starts) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("topic %s: log starts %v, committed offsets of %s %v: want equal and positive 30 s after the output was complete (--purge_interval=1s)", topic, starts, group, committed)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("topic %s: log starts %v = committed offsets of %s", topic, starts, group)
	}
	select {
	case err := <-done:
		t.Fatalf("the job ended: %v", err)
	default:
	}
	recs, err := kafkaenv.Consume(ctx, bs, out, -1, kafkaenv.ReadCommitted, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, string(r.Value))
	}
	sort.Strings(got)
	if want := append(append([]string{}, first...), second...); !reflect.DeepEqual(got, want) {
		t.Fatalf("output %s: %d records, want each of the %d input records once", out, len(got), len(want))
	}
	jcancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the job: %v", err)
	}
}

// TestCommittedOffsetBelowLogStartFails (issue 23): an application stops
// with records of an internal topic not yet consumed (its stage failed on
// them), the records past the stage's committed offset are deleted
// (DeleteRecords, as a retention would), and the topic's retention set to
// a minute; restarted, the application puts the retention back to -1 and
// its stage fails with stage.ErrOffsetOutOfRange naming the topic, the
// partition, the committed offset and the log start. Before, the
// consumer's auto.offset.reset=earliest skipped to the log start with a
// log line, the job ran on, and the deleted records were lost.
func TestCommittedOffsetBelowLogStartFails(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	pipeline := func() *beam.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		kafkaio.Write(s, out, beam.ParDo(s, purgeFailFn, beam.Reshuffle(s, kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second)))))
		return p
	}
	set := func(o *runner.Options) { o.InternalTopicPartitions = 1 }
	const n = 50
	produceValues(t, bs, in, 1, valuesNamed("a", n))
	jctx, jcancel := context.WithCancel(ctx)
	defer jcancel()
	done := startJob(jctx, bs, app, pipeline(), set)
	if got := readValues(t, bs, out, n, 90*time.Second); len(got) != n {
		t.Fatalf("before the failure: %d records in %s, want %d", len(got), out, n)
	}
	// The Reshuffle's stage fails on the "b" records (its bundle's
	// attempts run out) after its upstream committed them to the topic.
	purgeFail.Store(true)
	defer purgeFail.Store(false)
	produceValues(t, bs, in, 1, valuesNamed("b", n))
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "purgeFailFn") {
			t.Fatalf("the job ended with %v, want purgeFailFn's error", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the job still runs 90 s after its stage began to fail on every \"b\" record")
	}
	purgeFail.Store(false)
	topics := dataTopics(t, admin, app)
	if len(topics) != 1 {
		t.Fatalf("internal data topics of %s: %v, want the Reshuffle's input topic", app, topics)
	}
	var topic, group string
	for topic, group = range topics {
	}
	committed, err := kafkaenv.CommittedOffsets(ctx, bs, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	end := offsetsOf(t, ctx, admin, topic, 1, kafka.LatestOffsetSpec)[0]
	c := committed[0]
	if c < 0 || end-c < n {
		t.Fatalf("topic %s: committed offset %d, end %d: want the %d \"b\" records unconsumed", topic, c, end, n)
	}
	cut := c + (end-c)/2
	res, err := admin.DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(cut)}})
	if err != nil || res.DeleteRecordsResults[0].TopicPartition.Error != nil {
		t.Fatalf("delete the records of %s/0 below %d: %v %v", topic, cut, err, res)
	}
	alt, err := admin.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic, Config: []kafka.ConfigEntry{
		{Name: "retention.ms", Value: "60000", IncrementalOperation: kafka.AlterConfigOpTypeSet}}}})
	if err != nil || alt[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("set the retention of %s: %v %v", topic, err, alt)
	}
	t.Logf("topic %s: committed offset %d, end %d, records below %d deleted, retention.ms 60000", topic, c, end, cut)
	restarted := time.Now()
	done = startJob(jctx, bs, app, pipeline(), set)
	select {
	case err := <-done:
		for _, want := range []string{"topic " + topic, "partition 0", fmt.Sprintf("committed offset %d", c), fmt.Sprintf("log start %d", cut)} {
			if !errors.Is(err, stage.ErrOffsetOutOfRange) || !strings.Contains(err.Error(), want) {
				t.Fatalf("the restarted job ended with %v; want stage.ErrOffsetOutOfRange naming %q", err, want)
			}
		}
		t.Logf("the restarted job ended %v after its start: %v", time.Since(restarted).Round(time.Millisecond), err)
	case <-time.After(60 * time.Second):
		got := readValues(t, bs, out, 2*n, 5*time.Second)
		t.Fatalf("the restarted job still runs 60 s after its start, with %d of the %d records in %s: the deleted records were skipped", len(got), 2*n, out)
	}
	if got := topicConfig(t, ctx, admin, topic)["retention.ms"]; got != "-1" {
		t.Errorf("topic %s: retention.ms=%s after the restart, want -1 (altered back at start)", topic, got)
	}
}

// TestSideInputRecordsDeletedFails (issue 23, the other reader of the
// internal data topics): an application whose side input topic lost its
// first record while it was stopped (DeleteRecords, as a retention would)
// fails at its restart with kafkaclient.ErrOffsetOutOfRange naming the
// topic and its log start. Side input topics are never purged, and each
// instance reads them whole from their start, where the deleted records
// were skipped quietly: the side input held 2 of its 3 elements.
func TestSideInputRecordsDeletedFails(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	pipeline := func() *beam.Pipeline {
		p, s := beam.NewPipelineWithRoot()
		side := beam.Create(s, "x", "y", "z")
		main := kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second))
		kafkaio.Write(s, out, beam.ParDo(s, purgeSideCountFn, main, beam.SideInput{Input: side}))
		return p
	}
	set := func(o *runner.Options) { o.InternalTopicPartitions = 1 }
	produceValues(t, bs, in, 1, valuesNamed("a", 5))
	jctx, jcancel := context.WithCancel(ctx)
	done := startJob(jctx, bs, app, pipeline(), set)
	got := readValues(t, bs, out, 5, 90*time.Second)
	if want := []string{"a-00000/3", "a-00001/3", "a-00002/3", "a-00003/3", "a-00004/3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("before the stop: %v in %s, want %v", got, out, want)
	}
	jcancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the job: %v", err)
	}
	md, err := admin.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var side string
	for name := range md.Topics {
		if strings.HasPrefix(name, app+"-") && strings.Contains(name, "-side") {
			side = name
		}
	}
	if side == "" {
		t.Fatalf("no side input topic of %s", app)
	}
	res, err := admin.DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &side, Partition: 0, Offset: 1}})
	if err != nil || res.DeleteRecordsResults[0].TopicPartition.Error != nil {
		t.Fatalf("delete the first record of %s: %v %v", side, err, res)
	}
	jctx, jcancel = context.WithCancel(ctx)
	defer jcancel()
	restarted := time.Now()
	done = startJob(jctx, bs, app, pipeline(), set)
	produceValues(t, bs, in, 1, valuesNamed("b", 5))
	select {
	case err := <-done:
		for _, want := range []string{"topic " + side, "the log start is 1"} {
			if !errors.Is(err, stage.ErrOffsetOutOfRange) || !strings.Contains(err.Error(), want) {
				t.Fatalf("the restarted job ended with %v; want stage.ErrOffsetOutOfRange naming %q", err, want)
			}
		}
		t.Logf("the restarted job ended %v after its start: %v", time.Since(restarted).Round(time.Millisecond), err)
	case <-time.After(60 * time.Second):
		t.Fatalf("the restarted job still runs 60 s after its start; its output: %v", readValues(t, bs, out, 10, 5*time.Second))
	}
}

// TestPurgeKeepsInternalTopicsFlat measures, for
// KAFKASTREAMS_PURGE_MINUTES minutes (skipped when unset), what the
// internal topics of an unbounded job hold while a producer writes 1 KiB
// records steadily: every 15 s the records processed (the sink's), the
// records between the internal topics' log starts and ends, and, with a
// local broker (a process: its log dir; or KAFKASTREAMS_KAFKA_LOG_DIR),
// the bytes of their partitions on disk. KAFKASTREAMS_PURGE_INTERVAL sets
// --purge_interval (a Go duration; default 30 s, 0: the purge off, for
// the growth without it). With the purge, what the topics hold stays flat
// while the records processed grow.
func TestPurgeKeepsInternalTopicsFlat(t *testing.T) {
	mins, _ := strconv.ParseFloat(os.Getenv("KAFKASTREAMS_PURGE_MINUTES"), 64)
	if mins <= 0 {
		t.Skip("a measurement of minutes, not part of make test: run it with KAFKASTREAMS_PURGE_MINUTES=5 (and KAFKASTREAMS_PURGE_INTERVAL=0 for the run without the purge), e.g. KAFKASTREAMS_PURGE_MINUTES=5 go test -run '^TestPurgeKeepsInternalTopicsFlat$' -v ./integration/")
	}
	every := 30 * time.Second
	if v := os.Getenv("KAFKASTREAMS_PURGE_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		every = d
	}
	b := needBroker(t)
	bs := b.BootstrapServers()
	logDir := os.Getenv("KAFKASTREAMS_KAFKA_LOG_DIR")
	if logDir == "" && b.Mode() == kafkaenv.ModeProcess && b.LogPath() != "" {
		logDir = filepath.Join(filepath.Dir(b.LogPath()), "data")
	}
	run := time.Duration(mins * float64(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), run+3*time.Minute)
	defer cancel()
	in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
	const parts = 4
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, parts), userTopic(out, parts)); err != nil {
		t.Fatal(err)
	}
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, beam.Reshuffle(s.Scope("second"), beam.Reshuffle(s.Scope("first"), kafkaio.Read(s, in, kafkaio.WithIdleness(time.Second)))))
	jctx, jcancel := context.WithCancel(ctx)
	defer jcancel()
	done := startJob(jctx, bs, app, p, func(o *runner.Options) {
		o.InternalTopicPartitions = parts
		o.PurgeInterval = every
	})
	// The producer: 1 KiB values, as fast as the job takes them (at most
	// 4 000 a second).
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	produced := make(chan int64, 1)
	go func() {
		pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "go.delivery.reports": false, "linger.ms": 20})
		if err != nil {
			produced <- -1
			return
		}
		defer pr.Close()
		value := []byte(strings.Repeat("x", 1024))
		var n int64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for pctx.Err() == nil {
			<-tick.C
			for i := 0; i < 200; i++ {
				_ = pr.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &in, Partition: int32(n % parts)}, Value: value}, nil)
				n++
			}
		}
		kafkaclient.Drain(pr, 30*time.Second)
		produced <- n
	}()
	sum := func(m map[int32]int64) (s int64) {
		for _, v := range m {
			s += v
		}
		return s
	}
	diskBytes := func(topics map[string]string) int64 {
		if logDir == "" {
			return -1
		}
		var total int64
		for topic := range topics {
			for p := 0; p < parts; p++ {
				_ = filepath.Walk(filepath.Join(logDir, fmt.Sprintf("%s-%d", topic, p)), func(_ string, fi os.FileInfo, err error) error {
					if err == nil && !fi.IsDir() {
						total += fi.Size()
					}
					return nil
				})
			}
		}
		return total
	}
	t.Logf("--purge_interval=%v, %v, broker log dir %q", every, run, logDir)
	t.Logf("%8s %12s %16s %14s", "elapsed", "processed", "held (records)", "on disk (MiB)")
	start := time.Now()
	var topics map[string]string
	var heldMax, heldLast int64
	for time.Since(start) < run {
		select {
		case err := <-done:
			t.Fatalf("the job ended: %v", err)
		case <-time.After(15 * time.Second):
		}
		if topics == nil || len(topics) < 2 {
			topics = dataTopics(t, admin, app)
		}
		processed := sum(offsetsOf(t, ctx, admin, out, parts, kafka.LatestOffsetSpec))
		var held int64
		for topic := range topics {
			held += sum(offsetsOf(t, ctx, admin, topic, parts, kafka.LatestOffsetSpec)) - sum(offsetsOf(t, ctx, admin, topic, parts, kafka.EarliestOffsetSpec))
		}
		heldMax, heldLast = max(heldMax, held), held
		t.Logf("%8s %12d %16d %14.1f", time.Since(start).Round(time.Second), processed, held, float64(diskBytes(topics))/(1<<20))
	}
	pcancel()
	n := <-produced
	jcancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the job: %v", err)
	}
	t.Logf("produced %d records; the internal topics held at most %d records, %d at the end", n, heldMax, heldLast)
}

// TestMetricsAndControlTopicsKeepEveryRecord (issue 23): the metrics topic
// (the application-wide totals are the sum of all its records) and the
// control topic (a drain request is read by every later instance) are
// created with retention.ms and retention.bytes -1, and ones made before
// with the broker's 7 days (as the runner made them until 1fc5b1c) are
// altered at start; a report topic made before with "compact,delete" is
// made "compact". Before: retention.ms=604800000 on both, the existing
// ones left as they were.
func TestMetricsAndControlTopicsKeepEveryRecord(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, before := range []bool{false, true} {
		in, out, app := uniqueName(t, "in"), uniqueName(t, "out"), uniqueName(t, "app")
		if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 1), userTopic(out, 1)); err != nil {
			t.Fatal(err)
		}
		week := map[string]string{"retention.ms": "604800000", "cleanup.policy": "delete"}
		if before {
			if err := kafkaenv.CreateTopics(ctx, bs,
				kafkaenv.TopicSpec{Name: kafkaclient.MetricsTopic(app), Partitions: 1, Config: week},
				kafkaenv.TopicSpec{Name: kafkaclient.ControlTopic(app), Partitions: 1, Config: week},
				kafkaenv.TopicSpec{Name: kafkaclient.ReportTopic(app), Partitions: 1, Config: map[string]string{"cleanup.policy": "compact,delete"}}); err != nil {
				t.Fatal(err)
			}
		}
		produceAt(t, bs, in, 0, trustRecords(0, 5)...)
		p, s := beam.NewPipelineWithRoot()
		kafkaio.Write(s, out, boundedRead(s, in))
		if _, _, err := runPoisonJob(t, ctx, bs, app, p); err != nil {
			t.Fatalf("the job: %v", err)
		}
		kept := map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"} // kafkaclient.KeptTopicConfig
		for topic, want := range map[string]map[string]string{
			kafkaclient.MetricsTopic(app): kept,
			kafkaclient.ControlTopic(app): kept,
			kafkaclient.ReportTopic(app):  {"cleanup.policy": "compact"},
		} {
			c := topicConfig(t, ctx, admin, topic)
			for k, v := range want {
				if c[k] != v {
					t.Errorf("topic %s (made before the start: %v): %s=%s, want %s", topic, before, k, c[k], v)
				}
			}
		}
	}
}

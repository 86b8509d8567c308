package integration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	bexec "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

func identity(s string) string { return s }

func init() { register.Function1x1(identity) }

const (
	benchRecords    = 200_000
	benchPartitions = 4
	benchValueBytes = 100
)

// BenchmarkStatelessStage measures one stateless ParDo stage of this runner
// (4 partitions, 100-byte elements, exactly once) against a plain
// confluent-kafka-go transactional copy loop over the same kind of topics on
// the same broker, in the same run, and reports both rates and their ratio
// (stage / copy). It ignores b.N: run it with -benchtime=1x (make bench).
func BenchmarkStatelessStage(b *testing.B) {
	if broker == nil {
		b.Skip("needs a Kafka broker; not under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bs := broker.BootstrapServers()

	// The stage: Reshuffle head + identity ParDo, from a real pipeline.
	p, s := beam.NewPipelineWithRoot()
	_ = beam.Reshuffle(s, beam.ParDo(s, identity, beam.Reshuffle(s, beam.Create(s, "x"))))
	edges, _, err := p.Build()
	if err != nil {
		b.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		b.Fatal(err)
	}
	app := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	pl, err := plan.Build(pipe, plan.Options{ApplicationID: app, Partitions: benchPartitions})
	if err != nil {
		b.Fatal(err)
	}
	st := pl.Stages[1]
	if st.Head != plan.HeadReshuffle || len(st.Transforms) != 1 {
		b.Fatalf("unexpected plan:\n%+v", st)
	}
	report := kafkaclient.ReportTopic(app)
	copyIn, copyOut, warmOut := app+"-copy-in", app+"-copy-out", app+"-warm-out"
	var specs []kafkaenv.TopicSpec
	for _, t := range []string{st.InputTopic, pl.Stages[2].InputTopic, copyIn, copyOut, warmOut} {
		specs = append(specs, kafkaenv.TopicSpec{Name: t, Partitions: benchPartitions})
	}
	specs = append(specs, kafkaenv.TopicSpec{Name: report, Partitions: 1})
	if err := kafkaenv.CreateTopics(ctx, bs, specs...); err != nil {
		b.Fatal(err)
	}

	srv, err := fnapi.NewServer(fnapi.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	h, err := srv.StartHarness(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	fs, err := fnapi.BuildStage(pipe.GetComponents(), fnapi.StageSpec{ID: st.Name, Transforms: st.Transforms, Input: st.HeadOutput, Outputs: []string{st.Outputs[0].PCollection}}, srv.Endpoint())
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.RegisterStage(ctx, fs.Descriptor); err != nil {
		b.Fatal(err)
	}
	wire, err := graphx.NewCoderUnmarshaller(fs.Descriptor.GetCoders()).Coder(fs.WireCoders[st.HeadOutput])
	if err != nil {
		b.Fatal(err)
	}

	// The same records for both: 100-byte strings; the stage's are wrapped
	// in Envelopes as windowed values, followed by an end-of-time report.
	enc := bexec.MakeElementEncoder(wire)
	value := strings.Repeat("v", benchValueBytes)
	var stageRecs, copyRecs []kafkaenv.Record
	for i := 0; i < benchRecords; i++ {
		var buf bytes.Buffer
		if err := enc.Encode(&bexec.FullValue{Elm: value, Timestamp: mtime.Now(), Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}, &buf); err != nil {
			b.Fatal(err)
		}
		v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Element{Element: buf.Bytes()}})
		stageRecs = append(stageRecs, kafkaenv.Record{Partition: int32(i % benchPartitions), Value: v})
		copyRecs = append(copyRecs, kafkaenv.Record{Partition: int32(i % benchPartitions), Value: []byte(value)})
	}
	for q := int32(0); q < benchPartitions; q++ {
		v, _ := proto.Marshal(&pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{
			Stage: pl.Stages[0].Name, SourcePartition: 0, CommittedWatermarkMillis: int64(mtime.MaxTimestamp), TotalSourcePartitions: 1}}})
		// With the runner's header on reports: one without it is skipped
		// (issue 23), and the stage would never see its input end.
		stageRecs = append(stageRecs, kafkaenv.Record{Partition: q, Value: v, Headers: []kafka.Header{{Key: envelope.WriterHeader, Value: []byte(app)}}})
	}
	if err := kafkaenv.Produce(ctx, bs, st.InputTopic, stageRecs...); err != nil {
		b.Fatal(err)
	}
	if err := kafkaenv.Produce(ctx, bs, copyIn, copyRecs...); err != nil {
		b.Fatal(err)
	}
	// A warm-up copy, not timed: the stage runs first, and on a broker
	// just started (make bench's) it paid the broker's warm-up alone (the
	// same code measured 0.40 first and 0.85 second in one sitting).
	if _, err := copyLoop(ctx, bs, app+"-warm", copyIn, warmOut, benchRecords); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()

	// This runner's stage.
	spec, err := runner.LoopSpec(pl, st)
	if err != nil {
		b.Fatal(err)
	}
	loop, err := stage.New(ctx, stage.Config{
		BootstrapServers: bs, Spec: spec, Head: &step.Passthrough{}, ReportTopic: report, InstanceID: "bench",
		Process: func(ctx context.Context, w step.Work, _ step.Emit) (*step.Bundle, error) {
			r, err := srv.ProcessBundle(ctx, st.Name, map[string][][]byte{fs.Source: w.Elements})
			if err != nil {
				return nil, err
			}
			return &step.Bundle{Outputs: map[string][][]byte{st.Outputs[0].PCollection: r.Outputs[fs.Sinks[st.Outputs[0].PCollection]]}}, nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- loop.Run(lctx) }()
	want := uint64(benchRecords + benchPartitions)
	var stageTime time.Duration
	for {
		if loop.Stats().RecordsIn >= want {
			stageTime = time.Since(start)
			break
		}
		select {
		case err := <-done:
			b.Fatalf("stage loop stopped: %v", err)
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	lcancel()
	<-done
	ls := loop.Stats()
	b.Logf("stage: %d commits; joining the group and the first commit took %v, the records %v (%.0f records/s between the first and the last commit)",
		ls.Commits, ls.FirstCommit.Sub(start).Round(time.Millisecond), ls.LastCommit.Sub(ls.FirstCommit).Round(time.Millisecond), float64(ls.RecordsIn)/ls.LastCommit.Sub(ls.FirstCommit).Seconds())
	if got := loop.Stats().ElementsOut; got != benchRecords {
		b.Fatalf("stage wrote %d elements, want %d", got, benchRecords)
	}

	// The baseline: a plain transactional copy loop, same batching rule.
	copyTime, err := copyLoop(ctx, bs, app+"-copy", copyIn, copyOut, benchRecords)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	stageRate := float64(benchRecords) / stageTime.Seconds()
	copyRate := float64(benchRecords) / copyTime.Seconds()
	b.ReportMetric(stageRate, "stage-records/s")
	b.ReportMetric(copyRate, "copy-records/s")
	b.ReportMetric(stageRate/copyRate, "stage/copy")
	b.Logf("%d records of %d bytes, %d partitions: stage %.0f records/s (%.2fs), copy loop %.0f records/s (%.2fs), ratio %.3f",
		benchRecords, benchValueBytes, benchPartitions, stageRate, stageTime.Seconds(), copyRate, copyTime.Seconds(), stageRate/copyRate)
}

// copyLoop is the baseline: one consumer (read_committed, group group) and
// one transactional producer copying every record of in to out, committing
// outputs and offsets together every 100 ms or 50 000 records (KIP-447
// group metadata; the runner's default --commit_interval and
// --max_bundle_size, so both cut their transactions alike), until n
// records are copied. It returns the elapsed time.
func copyLoop(ctx context.Context, bs, group, in, out string, n int) (time.Duration, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
		"enable.auto.commit": false, "auto.offset.reset": "earliest", "partition.assignment.strategy": "cooperative-sticky"})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "transactional.id": group, "linger.ms": 5, "go.delivery.reports": false})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		return 0, err
	}
	if err := c.Subscribe(in, nil); err != nil {
		return 0, err
	}
	start := time.Now()
	copied := 0
	for copied < n {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		deadline := time.Now().Add(100 * time.Millisecond)
		offsets := map[int32]kafka.Offset{}
		var batch []*kafka.Message
		for len(batch) < 50000 && time.Now().Before(deadline) {
			if m, ok := c.Poll(int(time.Until(deadline).Milliseconds()) + 1).(*kafka.Message); ok {
				batch = append(batch, m)
				offsets[m.TopicPartition.Partition] = m.TopicPartition.Offset + 1
			}
		}
		if len(batch) == 0 {
			continue
		}
		if err := p.BeginTransaction(); err != nil {
			return 0, err
		}
		for _, m := range batch {
			if err := kafkaclient.Produce(p, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &out, Partition: m.TopicPartition.Partition}, Value: m.Value}, nil, nil); err != nil {
				return 0, err
			}
		}
		var tps []kafka.TopicPartition
		for part, off := range offsets {
			tps = append(tps, kafka.TopicPartition{Topic: &in, Partition: part, Offset: off})
		}
		gm, err := c.GetConsumerGroupMetadata()
		if err != nil {
			return 0, err
		}
		if err := p.SendOffsetsToTransaction(ctx, tps, gm); err != nil {
			return 0, err
		}
		if err := p.CommitTransaction(ctx); err != nil {
			return 0, err
		}
		copied += len(batch)
	}
	return time.Since(start), nil
}

// BenchmarkGroupByKeyStage's input: genValues{N: gbkBenchValues}, over
// gbkBenchKeys keys (a tenth of the values).
const (
	gbkBenchValues = 1_000_000
	gbkBenchKeys   = gbkBenchValues / 10
)

// countFn counts a pane's values.
func countFn(k string, vs func(*int) bool) (string, int) {
	n, v := 0, 0
	for vs(&v) {
		n++
	}
	return k, n
}

func identityKV(k string, v int) (string, int) { return k, v }

func init() {
	register.Function2x2(countFn)
	register.Function2x2(identityKV)
}

// stageRate runs p on this runner and returns the throughput of its stage
// named stage (input records read / time between its first and last commit).
// Each stage starts once its upstream stages are done
// (runner.WithUpstreamsFirst): the measured stage has the machine to
// itself, neither its upstream writing nor its downstream reading beside
// it (a GroupByKey downstream of the stateless stage took half its CPU,
// and its own speed was counted as the stateless stage's).
func stageRate(b *testing.B, p *beam.Pipeline, stage string) (rate float64, records uint64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	res, err := beam.Run(withJob(runner.WithUpstreamsFirst(ctx), broker.BootstrapServers(), fmt.Sprintf("bench-%d", time.Now().UnixNano())), runner.Name, p)
	if err != nil {
		b.Fatal(err)
	}
	st, ok := res.(*runner.Result).Stats[stage]
	if !ok {
		b.Fatalf("no stage %s in %v", stage, res.(*runner.Result).Stats)
	}
	busy := st.LastCommit.Sub(st.FirstCommit)
	if busy <= 0 || st.RecordsIn == 0 {
		b.Fatalf("stage %s: %+v", stage, st)
	}
	b.Logf("stage %s: %d records in over %v, %d elements into bundles, %d out", stage, st.RecordsIn, busy, st.ElementsIn, st.ElementsOut)
	return float64(st.RecordsIn) / busy.Seconds(), st.RecordsIn
}

// BenchmarkGroupByKeyStage measures a GroupByKey stage (100 000 keys,
// 1 000 000 values, fixed one-minute windows, default trigger, state in
// Pebble with a changelog) against the stateless stage (a Reshuffle head and
// an identity ParDo) over the same generated values, in the same run, and
// reports both rates (input records read per second between the stage's
// first and last commit: the values, plus a few watermark reports) and their
// ratio. It ignores b.N: run it with -benchtime=1x.
func BenchmarkGroupByKeyStage(b *testing.B) {
	if broker == nil {
		b.Skip("needs a Kafka broker; not under -short")
	}
	gen := func() (*beam.Pipeline, beam.Scope, beam.PCollection) {
		p, s := beam.NewPipelineWithRoot()
		kv := beam.ParDo(s, &genValues{N: gbkBenchValues}, beam.Impulse(s))
		return p, s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), kv)
	}
	p, s, kv := gen()
	_ = beam.GroupByKey(s, beam.ParDo(s, identityKV, beam.Reshuffle(s, kv)))
	statelessRate, n1 := stageRate(b, p, "s1-Reshuffle")

	p, s, kv = gen()
	_ = beam.Reshuffle(s, beam.ParDo(s, countFn, beam.GroupByKey(s, kv)))
	gbkRate, n2 := stageRate(b, p, "s1-CoGBK")

	b.ReportMetric(statelessRate, "stateless-records/s")
	b.ReportMetric(gbkRate, "gbk-records/s")
	b.ReportMetric(gbkRate/statelessRate, "gbk/stateless")
	b.Logf("stateless stage %.0f records/s (%d records), GroupByKey stage %.0f records/s (%d records: %d values over %d keys), ratio %.3f",
		statelessRate, n1, gbkRate, n2, gbkBenchValues, gbkBenchKeys, gbkRate/statelessRate)
}

// BenchmarkKafkaSourceStage measures a Kafka source stage reading a user's
// topic directly (kafkaio.Read, bounded) and writing every record to another
// topic as a plain record (kafkaio.Write, in the same stage's transactions:
// exactly once) against the plain transactional copy loop over the same
// input topic, on the same broker, in the same run; it reports both rates
// and their ratio (source / copy). It ignores b.N: run it with
// -benchtime=1x (make bench).
func BenchmarkKafkaSourceStage(b *testing.B) {
	if broker == nil {
		b.Skip("needs a Kafka broker; not under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bs := broker.BootstrapServers()
	app := fmt.Sprintf("bench-source-%d", time.Now().UnixNano())
	in, out, copyOut := app+"-in", app+"-out", app+"-copy-out"
	var specs []kafkaenv.TopicSpec
	for _, t := range []string{in, out, copyOut} {
		specs = append(specs, kafkaenv.TopicSpec{Name: t, Partitions: benchPartitions})
	}
	if err := kafkaenv.CreateTopics(ctx, bs, specs...); err != nil {
		b.Fatal(err)
	}
	value := []byte(strings.Repeat("v", benchValueBytes))
	recs := make([]kafkaenv.Record, benchRecords)
	for i := range recs {
		recs[i] = kafkaenv.Record{Partition: int32(i % benchPartitions), Key: []byte(fmt.Sprintf("k%d", i)), Value: value}
	}
	if err := kafkaenv.Produce(ctx, bs, in, recs...); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()

	p, s := beam.NewPipelineWithRoot()
	kafkaio.Write(s, out, kafkaio.Read(s, in, kafkaio.Bounded(), kafkaio.WithIdleness(time.Second)))
	var sourceRate float64
	res := runBench(b, ctx, p)
	for name, st := range res.Stats {
		if strings.Contains(name, "kafkaio.Read") {
			busy := st.LastCommit.Sub(st.FirstCommit)
			if busy <= 0 || st.ElementsOut != benchRecords {
				b.Fatalf("source stage %s: %+v", name, st)
			}
			sourceRate = float64(st.RecordsIn) / busy.Seconds()
		}
	}
	copyTime, err := copyLoop(ctx, bs, app+"-copy", in, copyOut, benchRecords)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	copyRate := float64(benchRecords) / copyTime.Seconds()
	b.ReportMetric(sourceRate, "source-records/s")
	b.ReportMetric(copyRate, "copy-records/s")
	b.ReportMetric(sourceRate/copyRate, "source/copy")
	b.Logf("%d records of %d bytes, %d partitions: source stage (Read → Write) %.0f records/s, copy loop %.0f records/s (%.2fs), ratio %.3f",
		benchRecords, benchValueBytes, benchPartitions, sourceRate, copyRate, copyTime.Seconds(), sourceRate/copyRate)
}

// runBench runs p on this runner under a fresh application id.
func runBench(b *testing.B, ctx context.Context, p *beam.Pipeline, set ...func(*runner.Options)) *runner.Result {
	b.Helper()
	res, err := beam.Run(withJob(ctx, broker.BootstrapServers(), fmt.Sprintf("bench-%d", time.Now().UnixNano()), set...), runner.Name, p)
	if err != nil {
		b.Fatal(err)
	}
	return res.(*runner.Result)
}

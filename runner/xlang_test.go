package runner

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	xkafkaio "github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/runner/plan"
)

func xlangTestSwap(k, v []byte) ([]byte, []byte) { return v, k }

func xlangTestString(k, v []byte) string { return string(k) + string(v) }

func init() {
	register.Function2x2(xlangTestSwap)
	register.Function2x1(xlangTestString)
}

// TestXlangKafkaExpandsNatively: Beam's cross-language kafkaio.Read and
// Write, with whatever expansion address (empty: the automated Java
// service; a host:port nobody listens on; ours), expand in this process
// into runner/kafkaio's Read and Write: the plan has a Kafka source stage
// reading the topic and a Kafka sink, and no external URN is left.
func TestXlangKafkaExpandsNatively(t *testing.T) {
	for _, addr := range []string{"", "localhost:8097", ExpansionAddr, ExpansionAddr + ":anything"} {
		t.Run(fmt.Sprintf("addr=%q", addr), func(t *testing.T) {
			p, s := beam.NewPipelineWithRoot()
			recs := xkafkaio.Read(s, addr, "broker:9092", []string{"in"},
				xkafkaio.TimestampPolicy(xkafkaio.CreateTime),
				xkafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest", "fetch.max.wait.ms": "50"}))
			xkafkaio.Write(s, addr, "broker:9092", "out", beam.ParDo(s, xlangTestSwap, recs))
			pipe, pl := planOf(t, p)
			for id, tr := range pipe.GetComponents().GetTransforms() {
				if u := tr.GetSpec().GetUrn(); u == urnKafkaRead || u == urnKafkaWrite {
					t.Errorf("transform %s (%q) is still %s", id, tr.GetUniqueName(), u)
				}
			}
			var src *plan.Stage
			var sinks []plan.KafkaSink
			for _, st := range pl.Stages {
				if st.Head == plan.HeadKafkaSource {
					src = st
				}
				sinks = append(sinks, st.KafkaSinks...)
			}
			if src == nil || src.InputTopic != "in" {
				t.Fatalf("no Kafka source stage reading in: %+v", pl.Stages)
			}
			c, ok := kafkaio.SourceConfig(plan.NativeDoFn(pipe.GetComponents().GetTransforms()[src.HeadTransform]))
			if !ok {
				t.Fatalf("the source stage's head %q is not a kafkaio.Read", src.HeadUniqueName)
			}
			want := kafkaio.Config{
				Topics: []string{"in"}, BootstrapServers: "broker:9092", Start: kafkaio.Earliest, ReadUncommitted: true,
				Properties: map[string]string{"fetch.wait.max.ms": "50"},
				Watermark:  kafkaio.Watermark{Kind: kafkaio.BoundedOutOfOrderness},
			}
			if fmt.Sprint(c) != fmt.Sprint(want) || c.Properties["fetch.wait.max.ms"] != "50" {
				t.Errorf("source config %v, want %v", c, want)
			}
			if len(sinks) != 1 || sinks[0].Topic != "out" {
				t.Fatalf("Kafka sinks %+v, want one to out", sinks)
			}
			w, ok := kafkaio.SinkConfig(plan.NativeDoFn(pipe.GetComponents().GetTransforms()[sinks[0].Transform]))
			if !ok || w.BootstrapServers != "broker:9092" {
				t.Errorf("sink config %v (%v), want a kafkaio.Write to broker:9092", w, ok)
			}
			if !strings.HasPrefix(src.HeadUniqueName, "kafkaio.Read(in)") {
				t.Errorf("source head named %q, want kafkaio.Read(in)…", src.HeadUniqueName)
			}
			if err := checkKafkaSinks(pipe.GetComponents(), pl, "broker:9092"); err != nil {
				t.Error(err)
			}
			if err := checkKafkaSinks(pipe.GetComponents(), pl, "other:9092"); err == nil || !strings.Contains(err.Error(), "broker:9092") {
				t.Errorf("a write to another cluster than the runner's: %v", err)
			}
		})
	}
}

// TestXlangKafkaDefaults: without auto.offset.reset or isolation.level the
// read has Java KafkaIO's defaults (latest, read_uncommitted); with them,
// what they say.
func TestXlangKafkaDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg         map[string]string
		start       string
		uncommitted bool
	}{
		{nil, kafkaio.Latest, true},
		{map[string]string{"auto.offset.reset": "earliest", "isolation.level": "read_committed"}, kafkaio.Earliest, false},
	} {
		p, s := beam.NewPipelineWithRoot()
		recs := xkafkaio.Read(s, "", "b:1", []string{"in"}, xkafkaio.TimestampPolicy(xkafkaio.LogAppendTime), xkafkaio.ConsumerConfigs(tc.cfg))
		beam.ParDo(s, xlangTestString, recs)
		pipe, pl := planOf(t, p)
		c, _ := kafkaio.SourceConfig(plan.NativeDoFn(pipe.GetComponents().GetTransforms()[pl.Stages[0].HeadTransform]))
		if c.Start != tc.start || c.ReadUncommitted != tc.uncommitted {
			t.Errorf("%v: start %q, read uncommitted %v; want %q, %v", tc.cfg, c.Start, c.ReadUncommitted, tc.start, tc.uncommitted)
		}
	}
}

// TestXlangKafkaTopicsAndStartTime: a read of several topics plans one
// source stage per topic, each configured alike; StartReadTime becomes
// kafkaio.WithStartAt and wins over auto.offset.reset (Java KafkaIO's rule).
func TestXlangKafkaTopicsAndStartTime(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	recs := xkafkaio.Read(s, "", "b:1", []string{"b", "a", "c"}, xkafkaio.TimestampPolicy(xkafkaio.CreateTime),
		xkafkaio.StartReadTimestamp(1_700_000_000_123), xkafkaio.ConsumerConfigs(map[string]string{"auto.offset.reset": "earliest"}))
	beam.ParDo(s, xlangTestString, recs)
	pipe, pl := planOf(t, p)
	var topics []string
	for _, st := range pl.Stages {
		if st.Head != plan.HeadKafkaSource {
			continue
		}
		c, ok := kafkaio.SourceConfig(plan.NativeDoFn(pipe.GetComponents().GetTransforms()[st.HeadTransform]))
		if !ok {
			t.Fatalf("stage %s: no kafkaio source config", st.Name)
		}
		if c.Start != kafkaio.AtTimestamp || c.StartAtMs != 1_700_000_000_123 {
			t.Errorf("stage %s: start %q at %d, want %q at 1700000000123", st.Name, c.Start, c.StartAtMs, kafkaio.AtTimestamp)
		}
		topics = append(topics, c.Topics...)
	}
	sort.Strings(topics)
	if fmt.Sprint(topics) != "[a b c]" {
		t.Errorf("source stages read %v, want [a b c]", topics)
	}
}

// TestXlangKafkaTwoReads: two reads of one topic get distinct ids and
// unique names, and plan as two source stages.
func TestXlangKafkaTwoReads(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	a := xkafkaio.Read(s, "", "b:1", []string{"twice"}, xkafkaio.TimestampPolicy(xkafkaio.CreateTime))
	b := xkafkaio.Read(s, "", "b:1", []string{"twice"}, xkafkaio.TimestampPolicy(xkafkaio.CreateTime))
	beam.ParDo(s, xlangTestString, beam.Flatten(s, a, b))
	pipe, pl := planOf(t, p)
	names := map[string]bool{}
	for _, tr := range pipe.GetComponents().GetTransforms() {
		if names[tr.GetUniqueName()] {
			t.Errorf("unique name %q twice", tr.GetUniqueName())
		}
		names[tr.GetUniqueName()] = true
	}
	n := 0
	for _, st := range pl.Stages {
		if st.Head == plan.HeadKafkaSource {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d Kafka source stages, want 2", n)
	}
}

// TestXlangKafkaRefused: what the runner cannot honour is refused while
// the pipeline is built, the error naming the option.
func TestXlangKafkaRefused(t *testing.T) {
	ct := xkafkaio.TimestampPolicy(xkafkaio.CreateTime)
	cfg := func(k, v string) func(*beam.Scope) {
		return func(s *beam.Scope) {
			xkafkaio.Read(*s, "", "b:1", []string{"in"}, ct, xkafkaio.ConsumerConfigs(map[string]string{k: v}))
		}
	}
	for _, tc := range []struct {
		name  string
		build func(*beam.Scope)
		want  []string
	}{
		{"processing time", func(s *beam.Scope) { xkafkaio.Read(*s, "", "b:1", []string{"in"}) }, []string{"TimestampPolicy", "ProcessingTime"}},
		{"max records", func(s *beam.Scope) { xkafkaio.Read(*s, "", "b:1", []string{"in"}, ct, xkafkaio.MaxNumRecords(10)) }, []string{"MaxNumRecords"}},
		{"max read time", func(s *beam.Scope) { xkafkaio.Read(*s, "", "b:1", []string{"in"}, ct, xkafkaio.MaxReadSecs(10)) }, []string{"MaxReadTime"}},
		{"negative start time", func(s *beam.Scope) {
			xkafkaio.Read(*s, "", "b:1", []string{"in"}, ct, xkafkaio.StartReadTimestamp(-5))
		}, []string{"StartReadTime", "-5"}},
		{"commit in finalize", func(s *beam.Scope) {
			xkafkaio.Read(*s, "", "b:1", []string{"in"}, ct, xkafkaio.CommitOffsetInFinalize(true))
		}, []string{"CommitOffsetInFinalize"}},
		{"group id", cfg("group.id", "g"), []string{"ConsumerConfig[group.id]"}},
		{"auto commit", cfg("enable.auto.commit", "true"), []string{"enable.auto.commit"}},
		{"deserializer", cfg("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer"), []string{"value.deserializer", "StringDeserializer"}},
		{"jaas", cfg("sasl.jaas.config", "secret"), []string{"ConsumerConfig[sasl.jaas.config]", "--kafka_property"}},
		{"offset reset", cfg("auto.offset.reset", "none"), []string{"auto.offset.reset", `"none"`}},
		{"producer property", func(s *beam.Scope) {
			xkafkaio.Write(*s, "", "b:1", "out", beam.ParDo(*s, xlangTestSwap, xkafkaio.Read(*s, "", "b:1", []string{"in"}, ct)),
				xkafkaio.ProducerConfigs(map[string]string{"compression.type": "lz4"}))
		}, []string{"ProducerConfig[compression.type]"}},
		{"write of strings", func(s *beam.Scope) {
			xkafkaio.Write(*s, "", "b:1", "out", beam.Create(*s, "a"))
		}, []string{"KV<[]byte, []byte>", "string"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := beam.NewPipelineWithRoot()
			var msg string
			func() {
				defer func() {
					if r := recover(); r != nil {
						msg = fmt.Sprint(r)
					}
				}()
				tc.build(&s)
			}()
			if msg == "" {
				t.Fatal("built without an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
		})
	}
}

// TestXlangKafkaForeignURN: our address used for another URN is an error
// naming the URN, not a silent expansion.
func TestXlangKafkaForeignURN(t *testing.T) {
	_, s := beam.NewPipelineWithRoot()
	_, err := beam.TryCrossLanguage(s, "beam:transform:example:v1", nil, ExpansionAddr, nil, beam.UnnamedOutput(beam.Impulse(s).Type()))
	if err == nil || !strings.Contains(err.Error(), "beam:transform:example:v1") {
		t.Fatalf("error %v, want one naming the URN", err)
	}
}

// TestXlangConsumerPassThrough: every Java consumer property passed through
// is a property librdkafka knows (a consumer is created; nothing connects).
func TestXlangConsumerPassThrough(t *testing.T) {
	vals := map[string]string{"client.id": "x", "client.rack": "r", "fetch.min.bytes": "1", "fetch.max.bytes": "1048576", "fetch.wait.max.ms": "50",
		"max.partition.fetch.bytes": "1048576", "session.timeout.ms": "45000", "heartbeat.interval.ms": "3000", "max.poll.interval.ms": "300000"}
	for java, lib := range consumerPassThrough {
		v, ok := vals[lib]
		if !ok {
			t.Fatalf("no test value for %s (%s)", java, lib)
		}
		c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "log_level": 0, lib: v})
		if err != nil {
			t.Errorf("%s → %s=%s: %v", java, lib, v, err)
			continue
		}
		c.Close()
	}
}

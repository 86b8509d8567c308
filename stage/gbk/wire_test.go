package gbk_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
)

type point struct{ X, Y int }

func wireKeyed(s string) (string, point) { return s, point{len(s), 1} }
func wireUse(k string, vs func(*point) bool) string {
	return k
}

func init() {
	beam.RegisterFunction(wireKeyed)
	beam.RegisterFunction(wireUse)
	beam.RegisterType(reflect.TypeOf(point{}))
}

// TestCodecMatchesSDK: the Codec cuts elements the SDK encoded with the
// upstream stage's wire coder (KV<string, point>, point a custom coder the
// runner sees length-prefixed) into the key bytes the SDK writes for the
// key, and its panes decode with the downstream stage's wire coder into
// KV<string, Iterable<point>> with the values, window, time and pane.
func TestCodecMatchesSDK(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kv := beam.WindowInto(s, window.NewFixedWindows(10_000_000), beam.ParDo(s, wireKeyed, beam.Create(s, "ab")))
	beam.ParDo(s, wireUse, beam.GroupByKey(s, kv))
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := graphx.Marshal(edges, &graphx.Options{Environment: &pipepb.Environment{Urn: "beam:env:embedded:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(pipe, plan.Options{ApplicationID: "app", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	comps := pipe.GetComponents()
	var up, down *plan.Stage
	for _, st := range pl.Stages {
		if st.Head == plan.HeadGroupByKey {
			down = st
		} else if len(st.Outputs) > 0 {
			up = st
		}
	}
	in := up.Outputs[0].PCollection
	stageOf := func(st *plan.Stage, outs ...string) *fnapi.Stage {
		fs, err := fnapi.BuildStage(comps, fnapi.StageSpec{ID: st.Name, Transforms: st.Transforms, Input: st.HeadOutput, Outputs: outs}, "localhost:1")
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	upFS, downFS := stageOf(up, in), stageOf(down)
	inC, err := graphx.NewCoderUnmarshaller(upFS.Descriptor.GetCoders()).Coder(upFS.WireCoders[in])
	if err != nil {
		t.Fatal(err)
	}
	outC, err := graphx.NewCoderUnmarshaller(downFS.Descriptor.GetCoders()).Coder(downFS.WireCoders[down.HeadOutput])
	if err != nil {
		t.Fatal(err)
	}
	win := window.IntervalWindow{Start: 0, End: 10000}
	var buf bytes.Buffer
	if err := exec.MakeElementEncoder(inC).Encode(&exec.FullValue{Elm: "ab", Elm2: point{2, 1}, Timestamp: 1234, Windows: []typex.Window{win}, Pane: typex.NoFiringPane()}, &buf); err != nil {
		t.Fatal(err)
	}
	codec, err := gbk.NewCodec(comps, in, down.HeadOutput)
	if err != nil {
		t.Fatal(err)
	}
	d, err := codec.Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var keyBuf bytes.Buffer
	if err := exec.MakeElementEncoder(inC.Components[0].Components[0]).Encode(&exec.FullValue{Elm: "ab"}, &keyBuf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Key, keyBuf.Bytes()) || d.Timestamp != 1234 || !reflect.DeepEqual(d.Windows, []gbk.Window{{Start: 0, End: 10000}}) {
		t.Fatalf("decoded %+v; want key %x (the SDK's), ts 1234, window [0,10000)", d, keyBuf.Bytes())
	}
	if k, err := codec.KeyOf(buf.Bytes()); err != nil || !bytes.Equal(k, d.Key) {
		t.Fatalf("KeyOf = %x, %v; want %x", k, err, d.Key)
	}
	pane := typex.PaneInfo{Timing: typex.PaneOnTime, IsFirst: true, IsLast: true}
	enc, err := codec.Encode(gbk.Pane{Key: d.Key, Window: d.Windows[0], Timestamp: mtime.Time(9999), Info: pane, Values: [][]byte{d.Value, d.Value}})
	if err != nil {
		t.Fatal(err)
	}
	fv, err := exec.MakeElementDecoder(outC).Decode(bytes.NewReader(enc))
	if err != nil {
		t.Fatal(err)
	}
	if fv.Elm != "ab" || fv.Timestamp != 9999 || fv.Pane != pane || !reflect.DeepEqual(fv.Windows, []typex.Window{win}) {
		t.Fatalf("decoded pane %+v", fv)
	}
	if vals, ok := fv.Elm2.([]point); !ok || !reflect.DeepEqual(vals, []point{{2, 1}, {2, 1}}) {
		t.Fatalf("pane values %#v, want two point{2, 1}", fv.Elm2)
	}
}

package plan

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	v1pb "github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx/v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/protox"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// NativeSource is implemented by the DoFn of a ParDo whose work the runner
// does itself: a read of a Kafka topic (runner/kafkaio.Read). On other
// runners the DoFn reads the topic; here Build makes the ParDo the head of
// a HeadKafkaSource stage whose input topic is the user's topic (no copy
// into an internal topic), and drops the Impulse feeding it.
type NativeSource interface {
	// KafkaSourceTopic is the topic the stage's tasks read: one task per
	// partition.
	KafkaSourceTopic() string
}

// NativeSink is implemented by the DoFn of a ParDo (with no outputs) whose
// work the runner does itself: a write to a Kafka topic
// (runner/kafkaio.Write). Build fuses nothing for it: the stage producing
// its input writes the elements to the topic as plain records, in the
// stage's transaction (Stage.KafkaSinks).
type NativeSink interface {
	// KafkaSinkTopic is the topic written.
	KafkaSinkTopic() string
}

// NativeDoFn returns the NativeSource or NativeSink DoFn of ParDo t (a Go DoFn of this
// process, registered and decodable), else nil. Decoding builds the DoFn as
// the harness would: its exported fields from the pipeline.
func NativeDoFn(t *pipepb.PTransform) any {
	if t.GetSpec().GetUrn() != URNParDo {
		return nil
	}
	pd := &pipepb.ParDoPayload{}
	if err := unmarshal(t.GetSpec().GetPayload(), pd); err != nil || pd.GetDoFn().GetUrn() != graphx.URNDoFn {
		return nil
	}
	tp := &v1pb.TransformPayload{}
	if err := protox.DecodeBase64(string(pd.GetDoFn().GetPayload()), tp); err != nil {
		return nil
	}
	_, fn, _, _, _, err := graphx.DecodeMultiEdge(tp.GetEdge())
	if err != nil || fn == nil || fn.Recv == nil {
		return nil
	}
	switch fn.Recv.(type) {
	case NativeSource, NativeSink:
		return fn.Recv
	}
	return nil
}

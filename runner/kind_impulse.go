package runner

import (
	"bytes"
	"context"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// The Impulse kind (plan.HeadImpulse): the plan transaction writes one
// record to the stage's one-partition input topic; the head turns it into
// the impulse element (empty bytes, global window, mtime.MinTimestamp)
// encoded with the head output's wire coder.
func init() { registerKind(plan.HeadImpulse, impulseKind{}) }

// impulseKind is plan.HeadImpulse's kind.
type impulseKind struct{}

func (impulseKind) check(_ *checkEnv, s *plan.Stage) (stageHead, error) {
	return impulseStage{s: s}, nil
}

// impulseStage is a checked Impulse stage.
type impulseStage struct{ s *plan.Stage }

func (impulseStage) needs() stageNeeds { return stageNeeds{records: [][]byte{[]byte("impulse")}} }

func (is impulseStage) build(_ context.Context, e *buildEnv) (builtHead, error) {
	s := is.s
	// Without SDK transforms the impulse leaves the stage as it is: bytes
	// in the global window.
	c := coder.NewW(coder.NewBytes(), coder.NewGlobalWindow())
	if e.fs != nil {
		var err error
		if c, err = graphx.NewCoderUnmarshaller(e.fs.Descriptor.GetCoders()).Coder(e.fs.WireCoders[s.HeadOutput]); err != nil {
			return builtHead{}, fmt.Errorf("kafkastreams: stage %s: impulse coder: %w", s.Name, err)
		}
	}
	var buf bytes.Buffer
	enc := exec.MakeElementEncoder(c)
	if err := enc.Encode(&exec.FullValue{Elm: []byte{}, Timestamp: mtime.MinTimestamp, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}, &buf); err != nil {
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: encode impulse: %w", s.Name, err)
	}
	return builtHead{head: &step.Passthrough{Impulse: buf.Bytes()}}, nil
}

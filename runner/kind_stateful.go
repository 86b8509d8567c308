package runner

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/sideinput"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/userstate"
)

// The stateful ParDo kind (plan.HeadStateful): a ParDo with user state or
// timers heads a stage with a keyed input topic; its head
// (stage/userstate) keeps the state and timers in task stores with a
// changelog and serves the harness's state requests.
func init() { registerKind(plan.HeadStateful, statefulKind{}) }

var _ eventTimeWaiter = statefulKind{}

// waitsOnEventTime implements eventTimeWaiter: a stateful ParDo's
// event-time timers fire on the watermark.
func (statefulKind) waitsOnEventTime(comps *pipepb.Components, s *plan.Stage) string {
	pd := &pipepb.ParDoPayload{}
	if err := proto.Unmarshal(comps.GetTransforms()[s.HeadTransform].GetSpec().GetPayload(), pd); err == nil {
		for _, spec := range pd.GetTimerFamilySpecs() {
			if spec.GetTimeDomain() == pipepb.TimeDomain_EVENT_TIME {
				return "the stateful ParDo with event-time timers"
			}
		}
	}
	return ""
}

// statefulKind is plan.HeadStateful's kind.
type statefulKind struct{}

// What the page and the metrics topic read of a stateful ParDo's head
// (kinds.go).
var _ timerCounts = (*userstate.Head)(nil)

func (statefulKind) check(_ *checkEnv, s *plan.Stage) (stageHead, error) {
	return statefulStage{s: s}, nil
}

// statefulStage is a checked stateful ParDo stage.
type statefulStage struct{ s *plan.Stage }

func (statefulStage) needs() stageNeeds { return stageNeeds{changelog: true} }

// build opens the stage's stores and registers the head with the Fn API
// server as the ParDo's user state.
func (ss statefulStage) build(_ context.Context, e *buildEnv) (builtHead, error) {
	s := ss.s
	if e.fs == nil {
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: a stateful ParDo stage without SDK transforms", s.Name)
	}
	h, err := openStores(e, s, func(stores *state.Manager) (*userstate.Head, error) {
		return newStatefulHead(e.comps, s, e.fs, e.sides, stores, e.log)
	})
	if err != nil {
		return builtHead{}, fmt.Errorf("kafkastreams: stage %s: %w", s.Name, err)
	}
	e.srv.RegisterUserState(s.HeadTransform, h)
	return builtHead{head: h, close: h.Close}, nil
}

// newStatefulHead builds the head of stateful ParDo stage s (fs is its
// built descriptor): a task store per input partition with the stage's
// changelog, the input's window coder and allowed lateness (for state
// garbage collection), and the ParDo's timer families; sides, the stage's
// side inputs (nil without), hold back timers of windows they are not
// ready for. stores are the stage's task stores (openStores).
func newStatefulHead(comps *pipepb.Components, s *plan.Stage, fs *fnapi.Stage, sides *sideinput.Set, stores *state.Manager, log *slog.Logger) (*userstate.Head, error) {
	col, ok := comps.GetPcollections()[s.HeadOutput]
	if !ok {
		return nil, fmt.Errorf("stateful ParDo %q: input pcollection %s not found", s.HeadUniqueName, s.HeadOutput)
	}
	ws := comps.GetWindowingStrategies()[col.GetWindowingStrategyId()]
	wc := comps.GetCoders()[ws.GetWindowCoderId()]
	var gate userstate.WindowGate
	if sides != nil {
		gate = sides
	}
	h, err := userstate.NewHead(userstate.Config{
		Stage:           s.Name,
		Transform:       s.HeadTransform,
		Partitions:      s.Partitions,
		Stores:          stores,
		WindowCoderURN:  wc.GetSpec().GetUrn(),
		AllowedLateness: mtime.Time(ws.GetAllowedLateness()),
		Timers:          fs.Timers,
		Logger:          log,
		SideInputs:      gate,
	})
	if err != nil {
		return nil, err
	}
	log.Info("kafkastreams: stateful ParDo stage", "stage", s.Name, "transform", s.HeadUniqueName, "timer_families", len(fs.Timers), "allowed_lateness_ms", ws.GetAllowedLateness())
	return h, nil
}

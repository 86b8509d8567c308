package sideinput

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// Config configures the Set of one stage in one instance.
type Config struct {
	// BootstrapServers is Kafka's bootstrap.servers. Required.
	BootstrapServers string
	// Properties are extra librdkafka properties (security, …); the Set's
	// own settings win.
	Properties map[string]string
	// ApplicationID is the application's id: the Set's reader is in the
	// group "<application_id>.<stage>.side-inputs", which it never joins
	// (Assign, no commits). Required.
	ApplicationID string
	// Stage is the name of the stage whose side inputs to read (errors and
	// logs name it). Required.
	Stage string
	// HeadOutput is the PCollection id of the stage's head output
	// (runner/plan.Stage.HeadOutput): the main input whose windows map to
	// the side input windows. Required when a side input's windows are not
	// global.
	HeadOutput string
	// Inputs are the stage's side inputs, in the stage's order
	// (runner/plan.Stage.SideInputs). Required: at least one.
	Inputs []Input
	// Components are the pipeline's components (graphx.Marshal). Required.
	Components *pipepb.Components
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Untrusted, if set, is called for every record of a side topic the
	// Set skipped (ErrUntrusted), with the topic: the runner's
	// kafkastreams_untrusted_records_total{topic}. From the Set's reader
	// goroutine.
	Untrusted func(topic string)
}

// Set is every side input of one stage in one instance: a Store per side
// input, fed by one consumer that reads every side topic of the stage whole
// (Assign from the beginning, read_committed, no group membership, no
// commits), and the readiness check the stage's loop asks before an element
// enters a bundle.
//
// One Set serves all the stage's tasks in the instance: a side input's
// content is a function of its topic, the same for every task, and a window
// once ready never changes (see Store.Record for late data), so tasks need
// not read it separately.
type Set struct {
	cfg     Config
	log     *slog.Logger
	stores  []*Store
	byTopic map[string]*Store
	// mainWire and mainWinDec cut and decode the windows of the head output's
	// wire elements; nil when every mapping is global (the main window does
	// not matter then).
	mainWire   *fnapi.WireElements
	mainWinDec exec.WindowDecoder

	consumer *kafka.Consumer
	done     chan struct{}
	cancel   context.CancelFunc
	// untrustedLogged is when run last logged a skipped record,
	// untrustedQuiet how many it skipped since (run's goroutine only).
	untrustedLogged time.Time
	untrustedQuiet  int

	mu struct {
		sync.Mutex
		changed chan struct{} // closed and replaced when a watermark moves
		err     error         // first error of the reader; sticky
	}
}

// New builds the Stores of cfg.Stage's side inputs (errors, before any Kafka
// client is made, name the transform and side input and wrap ErrUnsupported
// for what cannot be served) and starts reading their topics until ctx is
// done or Close.
func New(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Set{cfg: cfg, log: cfg.Logger.With("stage", cfg.Stage), byTopic: map[string]*Store{}, done: make(chan struct{})}
	s.mu.changed = make(chan struct{})
	global := true
	for _, si := range cfg.Inputs {
		spec, err := NewSpec(cfg.Components, si)
		if err != nil {
			return nil, fmt.Errorf("stage %s: %w", cfg.Stage, err)
		}
		st := NewStore(spec)
		s.stores = append(s.stores, st)
		s.byTopic[si.Topic] = st
		global = global && spec.Mapping.Kind == window.GlobalWindows
	}
	if !global {
		w, err := fnapi.NewWireElements(cfg.Components, cfg.HeadOutput, false)
		if err != nil {
			return nil, fmt.Errorf("stage %s: main input of its side inputs: %w", cfg.Stage, err)
		}
		s.mainWire = w
		if w.WindowCoderURN == "beam:coder:interval_window:v1" {
			s.mainWinDec = exec.MakeWindowDecoder(coder.NewIntervalWindow())
		} else {
			s.mainWinDec = exec.MakeWindowDecoder(coder.NewGlobalWindow())
		}
	}
	cc := kafkaclient.AssignedReaderConfig(cfg.BootstrapServers, cfg.Properties, cfg.ApplicationID+"."+cfg.Stage+".side-inputs") // never joined: Assign, no commits
	// A fetch out of range (records deleted under the reader: the topics
	// have infinite retention and are never purged, so only by hand) is an
	// error, not librdkafka's default jump to the log end, which dropped
	// the rest of the side input quietly.
	cc["auto.offset.reset"] = kafkaclient.InternalOffsetReset
	c, err := kafkaclient.NewConsumer(cc)
	if err != nil {
		return nil, fmt.Errorf("stage %s: side input consumer: %w", cfg.Stage, err)
	}
	s.consumer = c
	ctx, s.cancel = context.WithCancel(ctx)
	go s.run(ctx)
	return s, nil
}

// run feeds the Stores until ctx is done; it owns the consumer. It first
// checks that no side input topic has lost records (deleted), then
// assigns the topics from their start: in that order, so that the
// checks' requests do not wait behind the consumer's first fetch on its
// connection (a broker answers one request at a time per connection; a
// fetch of a side input topic not written yet waits fetch.wait.max.ms,
// and each topic's check did, one after another, before the reading
// began).
func (s *Set) run(ctx context.Context) {
	defer close(s.done)
	defer s.consumer.Close()
	if err := s.checkLogStarts(); err != nil {
		s.fail(err)
		return
	}
	var tps []kafka.TopicPartition
	for _, topic := range slices.Sorted(maps.Keys(s.byTopic)) {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning})
	}
	if err := s.consumer.Assign(tps); err != nil {
		s.fail(fmt.Errorf("stage %s: assign side input topics: %w", s.cfg.Stage, err))
		return
	}
	for ctx.Err() == nil {
		switch e := s.consumer.Poll(200).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				s.log.Warn("sideinput: consume error", "err", e.TopicPartition.Error)
				continue
			}
			st := s.byTopic[*e.TopicPartition.Topic]
			if st == nil {
				continue
			}
			before, wasIdle := st.Watermark(), st.Idle()
			err := st.Record(e.Value, envelope.FromApplication(e.Headers, s.cfg.ApplicationID))
			if errors.Is(err, ErrUntrusted) {
				s.skipped(e, err)
				continue
			}
			if err != nil {
				s.fail(fmt.Errorf("stage %s: %s[0]@%d: %w", s.cfg.Stage, *e.TopicPartition.Topic, e.TopicPartition.Offset, err))
				return
			}
			if st.Watermark() != before || st.Idle() != wasIdle {
				s.log.Debug("sideinput: watermark", "side_input", st.spec.Side.LocalName, "transform", st.spec.Side.TransformName, "watermark", st.Watermark(), "idle", st.Idle())
				s.notify()
			}
		case kafka.Error:
			if e.IsFatal() {
				s.fail(fmt.Errorf("stage %s: side input consumer: %w", s.cfg.Stage, e))
				return
			}
			if e.Code() == kafka.ErrAutoOffsetReset {
				s.fail(s.outOfRange(e))
				return
			}
			s.log.Warn("sideinput: consumer error", "err", e)
		}
	}
}

// checkLogStarts returns kafkaclient.ErrOffsetOutOfRange naming each side
// input topic whose log start is above 0: a side input topic is never
// purged and has infinite retention (kafkaclient.DataTopicConfig), so its
// first records were deleted (by hand, or by the broker's default
// retention of a topic made by an earlier version), and a side input read
// from the log start would be incomplete, quietly. A log start the broker
// does not answer is logged and not checked.
func (s *Set) checkLogStarts() error {
	var lost []string
	for _, topic := range slices.Sorted(maps.Keys(s.byTopic)) {
		low, _, err := s.consumer.QueryWatermarkOffsets(topic, 0, 10000)
		if err != nil {
			s.log.Warn("sideinput: could not read a side input topic's log start: records deleted from its start would go unnoticed", "topic", topic, "err", err)
			continue
		}
		if low > 0 {
			lost = append(lost, fmt.Sprintf("topic %s partition 0: the log start is %d, offsets 0 to %d were deleted", topic, low, low-1))
		}
	}
	if len(lost) == 0 {
		return nil
	}
	return fmt.Errorf("%w: stage %s: side input %s: a side input topic is never purged, so these records were deleted unread (retention or DeleteRecords); the side input would be incomplete", kafkaclient.ErrOffsetOutOfRange, s.cfg.Stage, strings.Join(lost, "; "))
}

// outOfRange is the error for a fetch out of range on a side input topic
// (cause, librdkafka's event, names no topic):
// kafkaclient.ErrOffsetOutOfRange naming each side input topic whose
// reader's position is below its log start, with both offsets.
func (s *Set) outOfRange(cause error) error {
	var lost []string
	for _, topic := range slices.Sorted(maps.Keys(s.byTopic)) {
		pos, err := s.consumer.Position([]kafka.TopicPartition{{Topic: &topic, Partition: 0}})
		low, _, lerr := s.consumer.QueryWatermarkOffsets(topic, 0, 5000)
		switch {
		case err != nil || lerr != nil || len(pos) != 1:
			lost = append(lost, fmt.Sprintf("topic %s partition 0 (its position or log start could not be read: %v)", topic, errors.Join(err, lerr)))
		case pos[0].Offset >= 0 && int64(pos[0].Offset) < low:
			lost = append(lost, fmt.Sprintf("topic %s partition 0: offset %d is below the log start %d", topic, pos[0].Offset, low))
		}
	}
	if len(lost) == 0 {
		lost = append(lost, fmt.Sprintf("one of the topics %v", slices.Sorted(maps.Keys(s.byTopic))))
	}
	return fmt.Errorf("%w: stage %s: side input %s: records deleted before the side input read them (retention or DeleteRecords); the side input would be incomplete (%w)", kafkaclient.ErrOffsetOutOfRange, s.cfg.Stage, strings.Join(lost, "; "), cause)
}

// skipped counts and logs record m, which Store.Record refused with err
// (ErrUntrusted): at most one line a second, naming the topic, partition
// and offset, with how many were skipped since the last line. The record
// is passed: it is read again only by a reader started anew, which skips
// it again.
func (s *Set) skipped(m *kafka.Message, err error) {
	if f := s.cfg.Untrusted; f != nil {
		f(*m.TopicPartition.Topic)
	}
	s.untrustedQuiet++
	if now := time.Now(); now.Sub(s.untrustedLogged) >= time.Second {
		s.log.Warn("sideinput: skipped a record of a side input topic that this application's runner did not write (see README, Security)",
			"stage", s.cfg.Stage, "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", int64(m.TopicPartition.Offset),
			"err", err, "skipped_since_last_line", s.untrustedQuiet)
		s.untrustedLogged, s.untrustedQuiet = now, 0
	}
}

func (s *Set) fail(err error) {
	s.log.Error("sideinput: reader stopped", "err", err)
	s.mu.Lock()
	if s.mu.err == nil {
		s.mu.err = err
	}
	s.mu.Unlock()
	s.notify()
}

// notify wakes everyone waiting on Changed.
func (s *Set) notify() {
	s.mu.Lock()
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
	s.mu.Unlock()
}

// Changed returns a channel closed the next time a side watermark moves or
// a side input goes idle or wakes (or the reader fails): a task held back by
// Ready may be ready then. The channel is closed after the Store changed
// (run: Record, then notify), so a caller that fetches Changed before it
// calls Ready, and waits on what it fetched, misses no change
// (step.SideInputGate).
func (s *Set) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.changed
}

// Ready reports whether every side input window that element (one element
// of the stage's head output, in its wire encoding) reads is complete:
// for each of the element's windows w and each side input,
// Ready(Mapping.Map(w), side watermark). The reader's error, if it stopped,
// is returned instead: the stage cannot make progress without it.
func (s *Set) Ready(element []byte) (bool, error) {
	s.mu.Lock()
	err := s.mu.err
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	mainWins := window.SingleGlobalWindow
	if s.mainWire != nil {
		encs, _, err := s.mainWire.Split(element)
		if err != nil {
			return false, fmt.Errorf("sideinput: stage %s: main element: %w", s.cfg.Stage, err)
		}
		mainWins = make([]typex.Window, len(encs))
		for i, b := range encs {
			if mainWins[i], err = s.mainWinDec.DecodeSingle(strings.NewReader(string(b))); err != nil {
				return false, fmt.Errorf("sideinput: stage %s: main element window: %w", s.cfg.Stage, err)
			}
		}
	}
	for _, st := range s.stores {
		for _, w := range mainWins {
			if !st.ReadyFor(w) {
				return false, nil
			}
		}
	}
	return true, nil
}

// ReadyWindow reports whether every side input window that main window w
// (encoded in the head output's window coder, as a timer's window) reads
// is complete: Ready for a timer (userstate.WindowGate). The reader's
// error, if it stopped, is returned instead.
func (s *Set) ReadyWindow(w []byte) (bool, error) {
	s.mu.Lock()
	err := s.mu.err
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	var mw typex.Window = window.GlobalWindow{}
	if s.mainWinDec != nil {
		if mw, err = s.mainWinDec.DecodeSingle(strings.NewReader(string(w))); err != nil {
			return false, fmt.Errorf("sideinput: stage %s: timer window %x: %w", s.cfg.Stage, w, err)
		}
	}
	for _, st := range s.stores {
		if !st.ReadyFor(mw) {
			return false, nil
		}
	}
	return true, nil
}

// Waiting describes every side input (watermark, hold, windows), for the
// log line of a task held back.
func (s *Set) Waiting() string {
	var parts []string
	for _, st := range s.stores {
		parts = append(parts, st.describe())
	}
	return strings.Join(parts, "; ")
}

// Register makes srv's State service answer the harness's requests for
// these side inputs from the Stores.
func (s *Set) Register(srv *fnapi.Server) {
	for _, st := range s.stores {
		srv.RegisterSideInput(st.spec.Side.Transform, st.spec.Side.LocalName, st)
	}
}

// Stores returns the Stores, in the stage's side input order.
func (s *Set) Stores() []*Store { return s.stores }

// Close stops the reader and waits for it. Idempotent.
func (s *Set) Close() {
	s.cancel()
	<-s.done
}

package userstate

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// The ordering rule of event-time timers (package comment), checked on the
// stateful head and the step together, without a broker: a fake SDK
// (fakeDoFn) logs every element and timer callback; scripts of element
// records and reports of one task must give the callbacks in the order of
// the reports, read in one batch or one record per batch alike.

var orderFamily = fnapi.TimerFamilyID{Transform: "t", Family: "fire"}

// fakeDoFn plays the SDK for one key's stateful DoFn. An element's value
// says what it does with the timer tagged by its second field:
//
//	set:<tag>:<fire>[:<hold>]  set (or re-set) the timer (hold defaults to fire)
//	clear:<tag>                clear it
//	set:loop<n>:<fire>         a looping timer: when it fires at f < 4000 it sets itself at f + 1000
//	<anything else>            nothing
//
// Every callback also emits its log line as an output element. Like the Go
// SDK, a bundle reports only the last write of each timer.
type fakeDoFn struct {
	log []string
}

func encodeTimer(tag string, fire, hold mtime.Time) []byte {
	return []byte(fmt.Sprintf("%s|%d|%d", tag, fire, hold))
}

func (f *fakeDoFn) process(_ context.Context, w step.Work, _ step.Emit) (*step.Bundle, error) {
	type write struct {
		tag        string
		clear      bool
		fire, hold mtime.Time
	}
	var writes []write
	var out [][]byte
	set := func(wr write) {
		for i := range writes {
			if writes[i].tag == wr.tag {
				writes = append(writes[:i], writes[i+1:]...)
				break
			}
		}
		writes = append(writes, wr)
	}
	for _, e := range w.Elements {
		v := string(e)
		f.log = append(f.log, "element "+v)
		out = append(out, []byte(f.log[len(f.log)-1]))
		parts := strings.Split(v, ":")
		switch parts[0] {
		case "set":
			fire, _ := strconv.ParseInt(parts[2], 10, 64)
			hold := fire
			if len(parts) > 3 {
				hold, _ = strconv.ParseInt(parts[3], 10, 64)
			}
			set(write{tag: parts[1], fire: mtime.Time(fire), hold: mtime.Time(hold)})
		case "clear":
			set(write{tag: parts[1], clear: true})
		}
	}
	for _, enc := range w.Timers[orderFamily] {
		parts := strings.Split(string(enc), "|")
		fire, _ := strconv.ParseInt(parts[1], 10, 64)
		f.log = append(f.log, fmt.Sprintf("timer %s fire=%d hold=%s", parts[0], fire, parts[2]))
		out = append(out, []byte(f.log[len(f.log)-1]))
		if strings.HasPrefix(parts[0], "loop") && fire < 4000 {
			set(write{tag: parts[0], fire: mtime.Time(fire + 1000), hold: mtime.Time(fire + 1000)})
		}
	}
	b := &step.Bundle{Outputs: map[string][][]byte{"out": out}}
	for _, wr := range writes {
		tm := fnapi.Timer{Key: []byte("k"), Tag: wr.tag, Clear: wr.clear}
		if !wr.clear {
			tm.Fire, tm.Hold, tm.Encoded = wr.fire, wr.hold, encodeTimer(wr.tag, wr.fire, wr.hold)
		}
		if b.Timers == nil {
			b.Timers = map[fnapi.TimerFamilyID][]fnapi.Timer{}
		}
		b.Timers[orderFamily] = append(b.Timers[orderFamily], tm)
	}
	return b, nil
}

// orderRun replays script (ops "e:<value>" and "r:<watermark ms>|max") as
// records of task 0, in batches of size records (0: one batch), committing
// each, and returns the callback log and the reports the task wrote, each
// with the number of output elements before it.
func orderRun(t *testing.T, script []string, size int) (log, reports []string) {
	t.Helper()
	return orderRunGated(t, script, size, nil)
}

// fakeGate is a side input that becomes ready for every window at once.
type fakeGate struct{ ready bool }

func (g *fakeGate) ReadyWindow([]byte) (bool, error) { return g.ready, nil }

// orderRunGated is orderRun with the head's timers gated by side inputs
// (gate, nil for none): the op "s:ready" makes them ready between two
// batches (the step itself holds no element back here).
func orderRunGated(t *testing.T, script []string, size int, gate *fakeGate) (log, reports []string) {
	t.Helper()
	stores, err := state.Open(state.Options{Dir: t.TempDir(), Name: "order", Topic: "order-changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Stage: "order", Transform: "t", Partitions: 1, Stores: stores, WindowCoderURN: urnGlobal,
		Timers: []fnapi.TimerFamily{{TimerFamilyID: orderFamily, Domain: fnapi.TimeDomainEventTime, WindowCoderURN: urnGlobal}},
	}
	if gate != nil {
		cfg.SideInputs = gate
	}
	h, err := NewHead(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	sdk := &fakeDoFn{}
	st, err := step.New(step.Config{
		Spec: step.Spec{
			Name: "order", InputTopic: "in", Partitions: 1, Upstreams: []string{"up"}, HeadOutput: "pc",
			Outputs: []step.Output{{PCollection: "out", Topics: []step.OutputTopic{{Name: "down", Partitions: 1, Copies: 1}}}},
		},
		Head: h, Process: sdk.process, ReportTopic: "reports",
	})
	if err != nil {
		t.Fatal(err)
	}
	var ins []step.In
	readyAt := -1
	for _, op := range script {
		var env *pb.Envelope
		i := len(ins)
		switch kind, arg, _ := strings.Cut(op, ":"); kind {
		case "s":
			readyAt = i
			continue
		case "e":
			env = &pb.Envelope{Payload: &pb.Envelope_Element{Element: []byte(arg)}}
		case "r":
			wm := int64(mtime.MaxTimestamp)
			if arg != "max" {
				wm, _ = strconv.ParseInt(arg, 10, 64)
			}
			env = &pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{Stage: "up", SourcePartition: 0, CommittedWatermarkMillis: wm, TotalSourcePartitions: 1}}}
		default:
			t.Fatalf("bad op %q", op)
		}
		v, _ := proto.Marshal(env)
		in := step.In{Task: 0, Offset: int64(i), Key: []byte("k"), Value: v}
		if env.GetElement() == nil {
			// The runner's header on its reports (envelope.WriterHeader),
			// with the application id of the test's spec (none).
			in.Headers = []step.Header{{Key: envelope.WriterHeader, Value: []byte{}}}
		}
		ins = append(ins, in)
	}
	if size <= 0 {
		size = len(ins)
	}
	tasks := map[int32]*step.Task{0: step.NewTask(0, []string{"up"})}
	outputs := 0
	for done := 0; len(ins) > 0; {
		n := min(size, len(ins))
		if done == readyAt && gate != nil {
			gate.ready = true
		} else if readyAt > done && readyAt < done+n {
			n = readyAt - done
		}
		done += n
		r, err := st.Decide(context.Background(), tasks, ins[:n], nil)
		if err != nil {
			t.Fatal(err)
		}
		ins = ins[n:]
		for _, rec := range r.Records {
			env := &pb.Envelope{}
			if rec.Topic != "down" || proto.Unmarshal(rec.Value, env) != nil {
				continue
			}
			if env.GetElement() != nil {
				outputs++
				continue
			}
			rs := env.GetReports().GetReports()
			if r := env.GetReport(); r != nil {
				rs = append(rs, r)
			}
			for _, r := range rs {
				reports = append(reports, fmt.Sprintf("report %s after %d outputs", fmtWM(r.GetCommittedWatermarkMillis()), outputs))
			}
		}
		if err := h.Prepare(func(string, int32, []byte, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := h.Committed(); err != nil {
			t.Fatal(err)
		}
	}
	return sdk.log, reports
}

func fmtWM(wm int64) string {
	switch mtime.Time(wm) {
	case mtime.MinTimestamp:
		return "min"
	case mtime.MaxTimestamp:
		return "max"
	}
	return strconv.FormatInt(wm, 10)
}

// TestTimerCallbacksFollowReports: element and timer callbacks come in the
// order of the reports for timers that are set, re-set, cleared, set
// after a clear, loop, and hold the output watermark; whether the records
// come in one batch or one per batch. Each case names the rule.
func TestTimerCallbacksFollowReports(t *testing.T) {
	for _, c := range []struct {
		name    string
		script  []string
		log     []string
		reports []string // with one batch; nil: not checked
	}{{
		// Issue 9, first case: the report past the timer comes before the
		// element that would clear it.
		name:   "fires_at_its_report",
		script: []string{"e:set:a:2000", "r:1000", "e:x", "r:3000", "e:clear:a", "r:5000"},
		log:    []string{"element set:a:2000", "element x", "timer a fire=2000 hold=2000", "element clear:a"},
	}, {
		name:   "re-set_later_wins",
		script: []string{"e:set:a:2000", "r:1000", "e:set:a:5000", "r:3000", "e:x", "r:6000", "e:y"},
		log:    []string{"element set:a:2000", "element set:a:5000", "element x", "timer a fire=5000 hold=5000", "element y"},
	}, {
		// Issue 9, second case: set in one bundle, cleared in a later one,
		// the report that would make it due right after the clear.
		name:   "cleared_never_fires",
		script: []string{"e:set:a:10000", "r:1000", "e:clear:a", "r:max"},
		log:    []string{"element set:a:10000", "element clear:a"},
	}, {
		name:   "set_after_clear",
		script: []string{"e:set:a:2000", "r:1000", "e:clear:a", "r:1500", "e:set:a:2500", "r:3000", "e:x"},
		log:    []string{"element set:a:2000", "element clear:a", "element set:a:2500", "timer a fire=2500 hold=2500", "element x"},
	}, {
		// A timer that sets itself again behind the watermark fires again
		// at the same point, before the next element.
		name:   "looping_timer",
		script: []string{"e:set:loop1:1000", "r:4500", "e:x", "r:max"},
		log: []string{"element set:loop1:1000", "timer loop1 fire=1000 hold=1000", "timer loop1 fire=2000 hold=2000",
			"timer loop1 fire=3000 hold=3000", "timer loop1 fire=4000 hold=4000", "element x"},
	}, {
		// A pending timer holds the output watermark at its output
		// timestamp (500) until it fires; each report comes right after
		// the outputs of the records before it.
		name:    "output_timestamp_holds",
		script:  []string{"e:set:a:9000:500", "r:3000", "e:x", "r:9500", "e:y", "r:max"},
		log:     []string{"element set:a:9000:500", "element x", "timer a fire=9000 hold=500", "element y"},
		reports: []string{"report 500 after 1 outputs", "report 9500 after 3 outputs", "report max after 4 outputs"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			for _, size := range []int{0, 1, 2, 3} {
				log, reports := orderRun(t, c.script, size)
				if !reflect.DeepEqual(log, c.log) {
					t.Errorf("batches of %d: callbacks\n  %s\nwant\n  %s", size, strings.Join(log, "\n  "), strings.Join(c.log, "\n  "))
				}
				if size == 0 && c.reports != nil && !reflect.DeepEqual(reports, c.reports) {
					t.Errorf("one batch: reports %q, want %q", reports, c.reports)
				}
			}
		})
	}
}

// TestHeldTimerFiresWhenSideInputsReady: a timer of a window whose side
// inputs are not ready (a restored task before the side topics are read
// again) does not fire when the watermark passes it; it holds the output
// watermark, and fires once they are ready, before the task's next
// element. Without side inputs it fires at its report.
func TestHeldTimerFiresWhenSideInputsReady(t *testing.T) {
	script := []string{"e:set:a:2000", "r:3000", "e:y", "s:ready", "e:x", "r:max"}
	for _, size := range []int{0, 1, 2} {
		log, reports := orderRunGated(t, script, size, &fakeGate{})
		want := []string{"element set:a:2000", "element y", "timer a fire=2000 hold=2000", "element x"}
		if !reflect.DeepEqual(log, want) {
			t.Errorf("batches of %d: callbacks\n  %s\nwant\n  %s", size, strings.Join(log, "\n  "), strings.Join(want, "\n  "))
		}
		if size == 1 {
			wantReports := []string{"report min after 1 outputs", "report 2000 after 1 outputs", "report 3000 after 4 outputs", "report max after 4 outputs"}
			if !reflect.DeepEqual(reports, wantReports) {
				t.Errorf("reports %q, want %q (the held timer holds at 2000)", reports, wantReports)
			}
		}
		log, _ = orderRun(t, script, size)
		want = []string{"element set:a:2000", "timer a fire=2000 hold=2000", "element y", "element x"}
		if !reflect.DeepEqual(log, want) {
			t.Errorf("without side inputs, batches of %d: callbacks %q, want %q", size, log, want)
		}
	}
}

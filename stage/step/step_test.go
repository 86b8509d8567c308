package step

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/cockroachdb/datadriven"
	"google.golang.org/protobuf/proto"

	pb "github.com/kafkastreams/kafkastreams/proto/kafkastreams/v1"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
	"github.com/kafkastreams/kafkastreams/stage/fnapi"
)

// TestStepScenarios runs the broker-free scenarios of Step.Decide in
// testdata/step/*.txt (go test -rewrite regenerates their expected output).
// Commands:
//
//	spec [partitions=N] [upstreams=(a,b)] [outputs=(out:2,g:3:keyed,f:1:x2)]
//	     [raw] [process=none] [maxrounds=N] [metrics]
//	    a fresh stage "st" (tasks 0..N-1, newTask, offsets from 0); an
//	    output topic is name:partitions[:keyed][:xCOPIES], all of one
//	    PCollection. process=none: no ProcessFunc (the head output is the
//	    stage output). metrics: every bundle adds an Extra record and a
//	    Committed callback. The step is built at the first batch.
//	head kind=passthrough|gbk-like|timers|teststream-like [hold=T]
//	    the fake head (see fakeHead); hold is passthrough's fixed Hold
//	gate [block=(v,w)]
//	    the fake side-input gate: elements v, w are not Ready
//	now t=T
//	    the timers head's processing time
//	restore p=P
//	    task P rebuilt from its last committed checkpoint (RestoreTask) and
//	    assigned to the head again: the Loop's rebalance or abort
//	tasks
//	    each task's input and output watermarks and advanced
//	batch [woken=(p:offset,...)]
//	    one Decide over the records of the input, one per line:
//	      e P KEY VALUE                       element record (KEY - for none)
//	      s P KEY VALUE                       element record set aside (In.Skip)
//	      r P UP/SP wm=T total=N [idle]       report record of upstream UP
//	      sr P UP/SP wm=T total=N [idle]      the same, set aside (refused)
//	    each task's offsets continue from its committed next offset (a
//	    blocked task's reads again from its held record). Prints the trace
//	    of head calls and bundles, then the Ready: its records (reports
//	    fanned out to every partition as one line), offsets with their
//	    decoded checkpoint, blocked tasks and counters. An error aborts: the
//	    tasks are restored from their committed checkpoints.
//
// Times are ms, or min and max (mtime.MinTimestamp, mtime.MaxTimestamp).
//
// The fake ProcessFunc turns element "v" into output "v'" and fails a
// bundle holding the element "fail" (a DoFn's error); element
// "set:K:T" also sets event-time timer K at T (hold T), "pset:K:T" the
// processing-time timer K at T, "clear:K" clears event-time timer K. A
// fired timer "K@T" outputs "fired K@T" (processing-time: "fired proc
// K@T"); a fired event-time timer whose key starts with "loop" sets itself
// again at T+1000.
func TestStepScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/step", func(t *testing.T, path string) {
		h := &stepHarness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.cmd(t, d)
		})
	})
}

const (
	stepName     = "st"
	reportTopic  = "reports"
	metricsTopic = "metrics"
	mainPC       = "main"
)

var (
	famEvent = fnapi.TimerFamilyID{Transform: "fn", Family: "ev"}
	famProc  = fnapi.TimerFamilyID{Transform: "fn", Family: "proc"}
)

type stepHarness struct {
	spec      Spec
	maxRounds int
	metrics   bool
	noProcess bool
	head      *fakeHead
	gate      *fakeGate
	step      *Step
	tasks     map[int32]*Task
	// committed[p] is task p's last committed checkpoint, nextOff[p] its
	// committed next offset (where its next batch reads from).
	committed map[int32]string
	nextOff   map[int32]int64
	trace     []string
	bundles   int
}

func (h *stepHarness) log(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf(format, args...))
}

func (h *stepHarness) cmd(t *testing.T, d *datadriven.TestData) string {
	args := map[string][]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = a.Vals
	}
	arg := func(k string) string { return strings.Join(args[k], ",") }
	switch d.Cmd {
	case "spec":
		n := int32(1)
		if v, ok := args["partitions"]; ok {
			n = int32(mustAtoi(t, v[0]))
		}
		h.spec = Spec{Name: stepName, InputTopic: "in", Partitions: n, Upstreams: args["upstreams"], HeadOutput: mainPC}
		_, h.spec.RawInput = args["raw"]
		sort.Strings(h.spec.Upstreams)
		out := Output{PCollection: mainPC}
		for _, o := range args["outputs"] {
			f := strings.Split(o, ":")
			ot := OutputTopic{Name: f[0], Partitions: int32(mustAtoi(t, f[1])), Copies: 1}
			for _, x := range f[2:] {
				switch {
				case x == "keyed":
					ot.Keyed = true
				case strings.HasPrefix(x, "x"):
					ot.Copies = mustAtoi(t, x[1:])
				default:
					t.Fatalf("%s: output %q", d.Pos, o)
				}
			}
			out.Topics = append(out.Topics, ot)
		}
		h.spec.Outputs = []Output{out}
		h.noProcess = arg("process") == "none"
		h.maxRounds = 0
		if v, ok := args["maxrounds"]; ok {
			h.maxRounds = mustAtoi(t, v[0])
		}
		_, h.metrics = args["metrics"]
		h.tasks, h.committed, h.nextOff = map[int32]*Task{}, map[int32]string{}, map[int32]int64{}
		for p := int32(0); p < n; p++ {
			h.tasks[p] = newTask(p, h.spec.Upstreams)
		}
		h.head, h.gate, h.step, h.bundles = nil, nil, nil, 0
		return ""
	case "head":
		h.head = newFakeHead(arg("kind"), h.log)
		if v, ok := args["hold"]; ok {
			h.head.hold = parseStepTime(t, v[0])
		}
		h.step = nil
		return ""
	case "gate":
		if h.gate == nil {
			h.gate = &fakeGate{}
		}
		h.gate.block = map[string]bool{}
		for _, v := range args["block"] {
			h.gate.block[v] = true
		}
		if h.step != nil {
			h.step.gate = h.gate
		}
		return ""
	case "now":
		h.head.now = parseStepTime(t, arg("t"))
		return ""
	case "restore":
		p := int32(mustAtoi(t, arg("p")))
		tk, err := RestoreTask(p, h.spec.Upstreams, h.committed[p])
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		h.tasks[p] = tk
		if err := h.head.Assign(context.Background(), p); err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return ""
	case "tasks":
		var b strings.Builder
		for _, p := range slices.Sorted(maps.Keys(h.tasks)) {
			tk := h.tasks[p]
			in, idle := tk.inputWatermark()
			fmt.Fprintf(&b, "task %d in=%s out=%s reported=%v advanced=%s", p, stepTime(in), stepTime(tk.out), tk.reported, stepTime(tk.advanced))
			if idle {
				b.WriteString(" idle")
			}
			b.WriteString("\n")
		}
		return b.String()
	case "batch":
		return h.batch(t, d, args["woken"])
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func (h *stepHarness) build(t *testing.T) {
	if h.step != nil {
		return
	}
	if h.head == nil {
		t.Fatal("batch before head")
	}
	cfg := Config{Spec: h.spec, Head: h.head, ReportTopic: reportTopic, MaxRounds: h.maxRounds,
		KeyOf: map[string]func([]byte) ([]byte, error){mainPC: keyOfElement}}
	if !h.noProcess {
		cfg.Process = h.process
	}
	if h.gate != nil {
		cfg.SideInputs = h.gate
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.step = s
}

// keyOfElement: the key of an output element "k=v'" is k; of any other
// element, the whole element.
func keyOfElement(e []byte) ([]byte, error) {
	k, _, _ := strings.Cut(string(e), "=")
	return []byte(k), nil
}

func (h *stepHarness) batch(t *testing.T, d *datadriven.TestData, woken []string) string {
	h.build(t)
	var batch []In
	off := map[int32]int64{}
	for p, o := range h.nextOff {
		off[p] = o
	}
	for _, line := range strings.Split(d.Input, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p := int32(mustAtoi(t, f[1]))
		in := In{Task: p, Offset: off[p]}
		off[p]++
		switch f[0] {
		case "e", "s":
			if len(f) != 4 {
				t.Fatalf("%s: %q: want e|s P KEY VALUE", d.Pos, line)
			}
			in.Skip = f[0] == "s"
			if f[2] != "-" {
				in.Key = []byte(f[2])
			}
			in.Value = []byte(f[3])
			if !h.spec.RawInput {
				in.Value = mustMarshal(t, &pb.Envelope{Payload: &pb.Envelope_Element{Element: in.Value}})
			}
		case "r", "sr":
			in.Skip = f[0] == "sr"
			up, sp, ok := strings.Cut(f[2], "/")
			if !ok {
				t.Fatalf("%s: %q: want r P UP/SP wm=T total=N [idle]", d.Pos, line)
			}
			r := &pb.WatermarkReport{Stage: up, SourcePartition: int32(mustAtoi(t, sp))}
			for _, kv := range f[3:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "wm":
					r.CommittedWatermarkMillis = int64(parseStepTime(t, v))
				case "total":
					r.TotalSourcePartitions = int32(mustAtoi(t, v))
				case "idle":
					r.Idle = true
				default:
					t.Fatalf("%s: %q: unknown field %q", d.Pos, line, kv)
				}
			}
			in.Value = mustMarshal(t, &pb.Envelope{Payload: &pb.Envelope_Report{Report: r}})
			in.Headers = writerHeaders(h.spec.ApplicationID)
		default:
			t.Fatalf("%s: unknown record %q", d.Pos, line)
		}
		batch = append(batch, in)
	}
	var wk map[int32]int64
	for _, w := range woken {
		p, o, _ := strings.Cut(w, ":")
		if wk == nil {
			wk = map[int32]int64{}
		}
		wk[int32(mustAtoi(t, p))] = int64(mustAtoi(t, o))
	}
	h.trace = nil
	r, err := h.step.Decide(context.Background(), h.tasks, batch, wk)
	var b strings.Builder
	for _, l := range h.trace {
		b.WriteString(l + "\n")
	}
	if err != nil {
		// The Loop aborts and rewinds: every task back to its checkpoint.
		var be *BundleError
		if errors.As(err, &be) {
			fmt.Fprintf(&b, "bundle error: %v\n", err)
		} else {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		for p := range h.tasks {
			tk, rerr := RestoreTask(p, h.spec.Upstreams, h.committed[p])
			if rerr != nil {
				t.Fatal(rerr)
			}
			h.tasks[p] = tk
		}
		return b.String()
	}
	b.WriteString(formatReady(t, r))
	for _, o := range r.Offsets {
		h.committed[o.Task] = o.Metadata
		h.nextOff[o.Task] = o.Next
	}
	return b.String()
}

// formatReady prints a Ready: one line per record, except that a run of
// consecutive output-topic records with the same reports (one batch to
// every partition of every output topic) is one line, "reports [...] ->"
// its destinations; then offsets, blocked tasks and counters. Report-topic
// records print as "report ... -> reports[any] key=...".
func formatReady(t *testing.T, r *Ready) string {
	var b strings.Builder
	b.WriteString("ready:\n")
	recs := r.Records
	for i := 0; i < len(recs); i++ {
		rec := recs[i]
		switch rec.Topic {
		case reportTopic:
			rep := &pb.WatermarkReport{}
			if err := proto.Unmarshal(rec.Value, rep); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "  report %s -> %s\n", reportString(rep), reportTopicString(rec))
			continue
		case metricsTopic:
			fmt.Fprintf(&b, "  extra %s[%s] %s\n", rec.Topic, partString(rec.Partition), rec.Value)
			continue
		}
		el, reps, err := envelope.Decode(rec.Value)
		if err != nil {
			t.Fatalf("record %d is not an Envelope: %v", i, err)
		}
		if el != nil {
			key := ""
			if rec.Key != nil {
				key = " key=" + string(rec.Key)
			}
			fmt.Fprintf(&b, "  elem %s[%s]%s %s\n", rec.Topic, partString(rec.Partition), key, el)
			continue
		}
		// Collect the batch's fan-out: every following record with the
		// same envelope.
		var dests []string
		j := i
		for ; j < len(recs) && recs[j].Topic != reportTopic && string(recs[j].Value) == string(rec.Value); j++ {
			if len(dests) > 0 && strings.HasPrefix(dests[len(dests)-1], recs[j].Topic+"[") {
				last := dests[len(dests)-1]
				dests[len(dests)-1] = last[:len(last)-1] + "," + partString(recs[j].Partition) + "]"
			} else {
				dests = append(dests, recs[j].Topic+"["+partString(recs[j].Partition)+"]")
			}
		}
		var rs []string
		for _, r := range reps {
			rs = append(rs, reportString(r))
		}
		fmt.Fprintf(&b, "  reports [%s] -> %s\n", strings.Join(rs, "; "), strings.Join(dests, " "))
		i = j - 1
	}
	for _, o := range r.Offsets {
		fmt.Fprintf(&b, "offset %d next=%d %s\n", o.Task, o.Next, checkpointString(t, o.Metadata))
	}
	for _, p := range slices.Sorted(maps.Keys(r.Blocked)) {
		fmt.Fprintf(&b, "blocked %d at %d\n", p, r.Blocked[p])
	}
	fmt.Fprintf(&b, "bundles=%d elements-in=%d elements-out=%d reports-out=%d committed=%d\n", r.Bundles, r.ElementsIn, r.ElementsOut, r.ReportsOut, len(r.Committed))
	return b.String()
}

func reportString(r *pb.WatermarkReport) string {
	s := fmt.Sprintf("%s/%d wm=%s", r.GetStage(), r.GetSourcePartition(), stepTime(mtime.Time(r.GetCommittedWatermarkMillis())))
	if r.GetTotalSourcePartitions() != 0 {
		s += fmt.Sprintf(" total=%d", r.GetTotalSourcePartitions())
	}
	if r.GetIdle() {
		s += " idle"
	}
	return s
}

func reportTopicString(rec Record) string {
	return fmt.Sprintf("%s[%s] key=%s", rec.Topic, partString(rec.Partition), rec.Key)
}

func partString(p int32) string {
	if p == AnyPartition {
		return "any"
	}
	return strconv.Itoa(int(p))
}

func checkpointString(t *testing.T, md string) string {
	raw, err := base64.StdEncoding.DecodeString(md)
	if err != nil {
		t.Fatal(err)
	}
	cp := &pb.TaskCheckpoint{}
	if err := proto.Unmarshal(raw, cp); err != nil {
		t.Fatal(err)
	}
	s := "out=" + stepTime(mtime.Time(cp.GetOutputWatermarkMillis()))
	reports := cp.GetReports()
	for _, c := range cp.GetUpstreams() {
		var rs []*pb.WatermarkReport
		if c.EmittedWatermarkMillis == nil {
			rs, err = expandUpstream(c)
		} else {
			rs, _, err = restoreUpstream(c)
		}
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, rs...)
	}
	for _, r := range reports {
		s += fmt.Sprintf(" %s/%d=%s", r.GetStage(), r.GetSourcePartition(), stepTime(mtime.Time(r.GetCommittedWatermarkMillis())))
	}
	return s
}

// process is the fake ProcessFunc (see TestStepScenarios).
func (h *stepHarness) process(_ context.Context, w Work, _ Emit) (*Bundle, error) {
	h.bundles++
	n := h.bundles
	b := &Bundle{Outputs: map[string][][]byte{}, Timers: map[fnapi.TimerFamilyID][]fnapi.Timer{}}
	var writes []string
	set := func(fam fnapi.TimerFamilyID, k string, fire mtime.Time) {
		b.Timers[fam] = append(b.Timers[fam], fnapi.Timer{Key: []byte(k), Fire: fire, Hold: fire, Encoded: []byte(fmt.Sprintf("%s@%d", k, fire))})
		prefix := ""
		if fam == famProc {
			prefix = "proc "
		}
		writes = append(writes, fmt.Sprintf("set %s%s@%s", prefix, k, stepTime(fire)))
	}
	for _, e := range w.Elements {
		s := string(e)
		if s == "fail" {
			h.log("bundle#%d %s: fails", n, bracket(bytesStrings(w.Elements)))
			return nil, errors.New("the DoFn failed on fail")
		}
		b.Outputs[mainPC] = append(b.Outputs[mainPC], []byte(s+"'"))
		f := strings.Split(s, ":")
		switch {
		case len(f) == 3 && f[0] == "set":
			set(famEvent, f[1], parseTimeOrErr(f[2]))
		case len(f) == 3 && f[0] == "pset":
			set(famProc, f[1], parseTimeOrErr(f[2]))
		case len(f) == 2 && f[0] == "clear":
			b.Timers[famEvent] = append(b.Timers[famEvent], fnapi.Timer{Key: []byte(f[1]), Clear: true})
			writes = append(writes, "clear "+f[1])
		}
	}
	var fired []string
	for _, fam := range []fnapi.TimerFamilyID{famEvent, famProc} {
		for _, tm := range w.Timers[fam] {
			k, at, _ := strings.Cut(string(tm), "@")
			prefix := ""
			if fam == famProc {
				prefix = "proc "
			}
			fired = append(fired, prefix+string(tm))
			b.Outputs[mainPC] = append(b.Outputs[mainPC], []byte("fired "+prefix+string(tm)))
			if fam == famEvent && strings.HasPrefix(k, "loop") {
				set(famEvent, k, parseTimeOrErr(at)+1000)
			}
		}
	}
	for fam := range w.Timers {
		if fam != famEvent && fam != famProc {
			return nil, fmt.Errorf("timers of unknown family %s", fam)
		}
	}
	line := fmt.Sprintf("bundle#%d", n)
	if len(w.Elements) > 0 {
		line += " " + bracket(bytesStrings(w.Elements))
	}
	if len(fired) > 0 {
		line += " fire" + bracket(fired)
	}
	if len(writes) > 0 {
		line += " -> " + strings.Join(writes, ", ")
	}
	h.log("%s", line)
	if h.metrics {
		b.Extra = []Record{{Topic: metricsTopic, Partition: AnyPartition, Value: []byte(fmt.Sprintf("bundle#%d", n))}}
		b.Committed = func() {}
	}
	return b, nil
}

// fakeGate is a SideInputGate holding back the elements in block.
type fakeGate struct{ block map[string]bool }

func (g *fakeGate) Ready(e []byte) (bool, error) { return !g.block[string(e)], nil }
func (g *fakeGate) Changed() <-chan struct{}     { return nil }
func (g *fakeGate) Waiting() string              { return "" }

// fakeHead is a Head whose behaviour is one of:
//
//   - passthrough: each element is one element of the pending bundle;
//     Hold is the fixed hold (max by default);
//   - gbk-like: element "v@T" (T its timestamp, in the fixed window of
//     1000 ms holding T) is buffered under its record key; Advance(p, in)
//     returns, as elements (no barrier), one pane "k=[v w]" per key (in key
//     order) of the buffered values whose window ends at or before in;
//     Hold(p) is the least buffered T (max when none);
//   - timers: a stateful ParDo's: elements are Barrier work; Results
//     applies the bundle's timer writes (a timer's task is the task whose
//     record had the timer's key as Kafka key) and returns the event-time
//     timers already due (fire < the task's last Advance), Advance(p, in)
//     returns the event-time timers with fire < in and the processing-time
//     ones with fire <= now, in (fire, key) order; Hold(p) is the least
//     event-time fire of p (max when none);
//   - teststream-like: raw element "a,b@W" is a segment (elements a, b; "-"
//     for none) with watermark W, returned as Point work; Hold(p) is the
//     watermark of the last segment p read (min before any).
//
// It logs every call with what it returned.
type fakeHead struct {
	kind string
	log  func(string, ...any)
	hold mtime.Time
	now  mtime.Time
	// gbk-like
	buf map[int32][]gbkValue
	// timers
	keyTask        map[string]int32
	event, process map[int32]map[string]mtime.Time
	wm             map[int32]mtime.Time
	// teststream-like
	seg map[int32]mtime.Time
}

type gbkValue struct {
	key, v string
	ts     mtime.Time
}

func newFakeHead(kind string, log func(string, ...any)) *fakeHead {
	switch kind {
	case "passthrough", "gbk-like", "timers", "teststream-like":
	default:
		panic("unknown head kind " + kind)
	}
	return &fakeHead{kind: kind, log: log, hold: mtime.MaxTimestamp, now: mtime.MinTimestamp,
		buf: map[int32][]gbkValue{}, keyTask: map[string]int32{}, event: map[int32]map[string]mtime.Time{},
		process: map[int32]map[string]mtime.Time{}, wm: map[int32]mtime.Time{}, seg: map[int32]mtime.Time{}}
}

var _ Head = (*fakeHead)(nil)

func (f *fakeHead) Assign(_ context.Context, p int32) error {
	delete(f.wm, p)
	delete(f.seg, p)
	return nil
}
func (f *fakeHead) Revoke(int32)              {}
func (f *fakeHead) Wake() []int32             { return nil }
func (f *fakeHead) Prepare(ProduceFunc) error { return nil }
func (f *fakeHead) Committed() error          { return nil }
func (f *fakeHead) Aborted([]int32) error     { return nil }

func (f *fakeHead) Idle(int32) bool { return false }

func (f *fakeHead) ReachedEnd(int32, int64) {}

func (f *fakeHead) Source(int32) *pb.SourcePartition { return nil }

func (f *fakeHead) Pause() []int32 { return nil }

func (f *fakeHead) Element(p int32, r In) (Work, error) {
	key, value := r.Key, r.Value
	k := "-"
	if key != nil {
		k = string(key)
	}
	var w Work
	switch f.kind {
	case "passthrough":
		w = Work{Elements: [][]byte{value}}
	case "gbk-like":
		v, ts, ok := strings.Cut(string(value), "@")
		if !ok {
			return Work{}, fmt.Errorf("gbk-like element %q: want v@T", value)
		}
		f.buf[p] = append(f.buf[p], gbkValue{key: k, v: v, ts: parseTimeOrErr(ts)})
	case "timers":
		if key != nil {
			f.keyTask[k] = p
		}
		w = Work{Elements: [][]byte{value}, Barrier: true}
	case "teststream-like":
		es, wm, ok := strings.Cut(string(value), "@")
		if !ok {
			return Work{}, fmt.Errorf("teststream-like segment %q: want a,b@W", value)
		}
		if es != "-" {
			for _, e := range strings.Split(es, ",") {
				w.Elements = append(w.Elements, []byte(e))
			}
		}
		w.Point = true
		f.seg[p] = parseTimeOrErr(wm)
	}
	f.log("Element(%d %s %s)%s", p, k, value, workString(w))
	return w, nil
}

func (f *fakeHead) Advance(p int32, in mtime.Time) (Work, error) {
	var w Work
	switch f.kind {
	case "gbk-like":
		panes := map[string][]string{}
		var keep []gbkValue
		for _, v := range f.buf[p] {
			if (v.ts/1000+1)*1000 <= in {
				panes[v.key] = append(panes[v.key], v.v)
			} else {
				keep = append(keep, v)
			}
		}
		f.buf[p] = keep
		for _, k := range slices.Sorted(maps.Keys(panes)) {
			w.Elements = append(w.Elements, []byte(fmt.Sprintf("%s=[%s]", k, strings.Join(panes[k], " "))))
		}
	case "timers":
		f.wm[p] = in
		w = f.due(p, in, true)
	}
	f.log("Advance(%d %s)%s", p, stepTime(in), workString(w))
	return w, nil
}

// due pops task p's event-time timers with fire < wm and, with proc, its
// processing-time timers with fire <= now.
func (f *fakeHead) due(p int32, wm mtime.Time, proc bool) Work {
	type tm struct {
		fam  fnapi.TimerFamilyID
		key  string
		fire mtime.Time
	}
	var due []tm
	for k, at := range f.event[p] {
		if at < wm {
			due = append(due, tm{famEvent, k, at})
			delete(f.event[p], k)
		}
	}
	if proc {
		for k, at := range f.process[p] {
			if at <= f.now {
				due = append(due, tm{famProc, k, at})
				delete(f.process[p], k)
			}
		}
	}
	if len(due) == 0 {
		return Work{}
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].fire != due[j].fire {
			return due[i].fire < due[j].fire
		}
		return due[i].key < due[j].key
	})
	w := Work{Timers: map[fnapi.TimerFamilyID][][]byte{}}
	for _, d := range due {
		w.Timers[d.fam] = append(w.Timers[d.fam], []byte(fmt.Sprintf("%s@%d", d.key, d.fire)))
	}
	return w
}

func (f *fakeHead) Results(b *Bundle) (Work, error) {
	var w Work
	if f.kind == "timers" {
		touched := map[int32]bool{}
		for _, fam := range []fnapi.TimerFamilyID{famEvent, famProc} {
			for _, tm := range b.Timers[fam] {
				p, ok := f.keyTask[string(tm.Key)]
				if !ok {
					return Work{}, fmt.Errorf("timer of key %s, which no record had", tm.Key)
				}
				m := f.event
				if fam == famProc {
					m = f.process
				}
				if m[p] == nil {
					m[p] = map[string]mtime.Time{}
				}
				if tm.Clear {
					delete(m[p], string(tm.Key))
				} else {
					m[p][string(tm.Key)] = tm.Fire
				}
				touched[p] = true
			}
		}
		for _, p := range slices.Sorted(maps.Keys(touched)) {
			if wm, ok := f.wm[p]; ok {
				d := f.due(p, wm, false)
				if w.Timers == nil {
					w = d
					continue
				}
				for fam, ts := range d.Timers {
					w.Timers[fam] = append(w.Timers[fam], ts...)
				}
			}
		}
	}
	f.log("Results%s", workString(w))
	return w, nil
}

func (f *fakeHead) Hold(p int32) mtime.Time {
	h := mtime.MaxTimestamp
	switch f.kind {
	case "passthrough":
		h = f.hold
	case "gbk-like":
		for _, v := range f.buf[p] {
			h = min(h, v.ts)
		}
	case "timers":
		for _, at := range f.event[p] {
			h = min(h, at)
		}
	case "teststream-like":
		h = mtime.MinTimestamp
		if wm, ok := f.seg[p]; ok {
			h = wm
		}
	}
	f.log("Hold(%d) = %s", p, stepTime(h))
	return h
}

func workString(w Work) string {
	if w.empty() && !w.Point {
		return ""
	}
	var parts []string
	if len(w.Elements) > 0 {
		parts = append(parts, bracket(bytesStrings(w.Elements)))
	}
	for _, fam := range []fnapi.TimerFamilyID{famEvent, famProc} {
		if ts := w.Timers[fam]; len(ts) > 0 {
			name := "fire"
			if fam == famProc {
				name = "fire proc"
			}
			parts = append(parts, name+bracket(bytesStrings(ts)))
		}
	}
	if w.Barrier {
		parts = append(parts, "barrier")
	}
	if w.Point {
		parts = append(parts, "point")
	}
	return " -> " + strings.Join(parts, " ")
}

func bytesStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func bracket(ss []string) string { return "[" + strings.Join(ss, " ") + "]" }

func stepTime(t mtime.Time) string {
	switch t {
	case mtime.MinTimestamp:
		return "min"
	case mtime.MaxTimestamp:
		return "max"
	}
	return strconv.FormatInt(int64(t), 10)
}

func parseTimeOrErr(s string) mtime.Time {
	switch s {
	case "min":
		return mtime.MinTimestamp
	case "max":
		return mtime.MaxTimestamp
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("time %q: %v", s, err))
	}
	return mtime.Time(n)
}

func parseStepTime(t *testing.T, s string) mtime.Time {
	t.Helper()
	switch s {
	case "min":
		return mtime.MinTimestamp
	case "max":
		return mtime.MaxTimestamp
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return mtime.Time(n)
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStepBatchingProperty: how the Loop cuts a task's records into
// attempts does not change what downstream sees. For random record
// sequences over 1-3 tasks (element records and monotone reports of two
// upstream partitions) through a passthrough head, one Decide per batch at
// random cut points gives, per task, the same sequence of output elements
// interleaved with reports as one record per batch, and the same final
// output watermarks.
//
// "The same sequence" is up to what the Step's rules allow a batch to
// coalesce: a report is made at a point only when more element records of
// the task follow in the batch, so reports with no element of the task
// between them collapse to the last of them, and a report that does not
// raise the task's watermark (the forced first report at min) says nothing
// downstream does not already assume. The sequences are compared after
// that normalisation (stepCanonical); every task's reports must also never
// go down. (Without it the property fails by design: one record per batch
// gives [a] -> a, report min; [r 1000] -> report 1000; the batch [a, r 1000]
// gives a, report 1000. testdata/step/batching.txt shows a longer case.)
func TestStepBatchingProperty(t *testing.T) {
	stepBatchingProperty(t, "passthrough")
}

// TestStepBatchingPropertyTimers is the property with the timers head
// (issue 9): elements set and clear event-time timers of their keys. Per
// task, the outputs (of element records and of timer firings) come in the
// same order whatever the batching; before the output of an element record
// the task's last report is the same; before a firing it may be lower,
// never higher: a firing at a point of a batch with no later element
// record of the task gets no report of its own before it (the rules report
// at a point only when element records follow), so one record per batch
// reports more often, but a batch never reports a watermark ahead of an
// output. The final output watermarks are equal.
//
// The timers are set ahead of the task's input watermark: one set behind
// it fires after the bundle that set it, so its place among the bundle's
// other elements (and whether it fires at all, if one of them clears it)
// does depend on the batching; testdata/step/timers.txt shows that case.
func TestStepBatchingPropertyTimers(t *testing.T) {
	stepBatchingProperty(t, "timers")
}

func stepBatchingProperty(t *testing.T, kind string) {
	literal, fired := 0, 0
	for seed := int64(0); seed < 2000; seed++ {
		rng := rand.New(rand.NewSource(seed))
		n := 1 + rng.Intn(3)
		recs := stepRandomRecords(t, rng, kind, n, 1+rng.Intn(30))
		single := make([][]In, len(recs))
		for i := range recs {
			single[i] = recs[i : i+1]
		}
		var cut [][]In
		for i := 0; i < len(recs); {
			j := i + 1 + rng.Intn(len(recs)-i)
			cut = append(cut, recs[i:j])
			i = j
		}
		want, wantTasks := stepRunBatches(t, kind, n, single)
		got, gotTasks := stepRunBatches(t, kind, n, cut)
		for p := int32(0); p < int32(n); p++ {
			for name, seq := range map[string][]string{"one per batch": want[p], "cut": got[p]} {
				if err := stepMonotone(seq); err != nil {
					t.Fatalf("seed %d, task %d, %s: %v: %v", seed, p, name, err, seq)
				}
			}
			if kind == "timers" {
				if err := stepSameLevels(want[p], got[p]); err != nil {
					t.Fatalf("seed %d, task %d: batches %s: %v\none record per batch: %v\ncut:                 %v",
						seed, p, stepBatchesString(cut), err, want[p], got[p])
				}
			} else if w, g := stepCanonical(want[p]), stepCanonical(got[p]); strings.Join(w, " ") != strings.Join(g, " ") {
				t.Fatalf("seed %d, task %d: batches %s\none record per batch: %v (normalised %v)\ncut:                 %v (normalised %v)",
					seed, p, stepBatchesString(cut), want[p], w, got[p], g)
			}
			if strings.Join(want[p], " ") != strings.Join(got[p], " ") {
				if literal == 0 {
					t.Logf("seed %d, task %d: the raw sequences differ (coalesced reports): one per batch %v, batches %s: %v", seed, p, want[p], stepBatchesString(cut), got[p])
				}
				literal++
			}
			for _, e := range want[p] {
				if strings.HasPrefix(e, "Efired ") {
					fired++
				}
			}
			wt, gt := wantTasks[p], gotTasks[p]
			if wt.out != gt.out || wt.reported != gt.reported {
				t.Fatalf("seed %d, task %d: final out %s reported %v one per batch, %s %v with batches %s", seed, p, stepTime(wt.out), wt.reported, stepTime(gt.out), gt.reported, stepBatchesString(cut))
			}
		}
	}
	t.Logf("%d task sequences differed before normalisation; %d timer firings", literal, fired)
}

// stepRandomRecords returns n records over tasks 0..tasks-1: elements and
// reports of upstream up's partitions 0 and 1, each partition's watermark
// never going down (and sometimes not moving). An element of task P is
// "pP.OFFSET"; for the timers head, elements have a key pPa or pPb and may
// be "set:KEY:T" or "clear:KEY" instead.
func stepRandomRecords(t *testing.T, rng *rand.Rand, kind string, tasks, n int) []In {
	off := map[int32]int64{}
	wm := map[[2]int32]int64{}
	seen := map[[2]int32]bool{}
	var recs []In
	for i := 0; i < n; i++ {
		p := int32(rng.Intn(tasks))
		in := In{Task: p, Offset: off[p]}
		off[p]++
		if rng.Intn(5) < 3 {
			v := fmt.Sprintf("p%d.%d", p, in.Offset)
			if kind == "timers" {
				key := fmt.Sprintf("p%d%c", p, 'a'+rng.Intn(2))
				in.Key = []byte(key)
				switch rng.Intn(3) {
				case 0:
					// Ahead of the task's input watermark as of this record.
					at := int64(0)
					if seen[[2]int32{p, 0}] && seen[[2]int32{p, 1}] {
						at = min(wm[[2]int32{p, 0}], wm[[2]int32{p, 1}])
					}
					v = fmt.Sprintf("set:%s:%d", key, at+int64(rng.Intn(8))*100+50)
				case 1:
					v = "clear:" + key
				}
			}
			in.Value = mustMarshal(t, &pb.Envelope{Payload: &pb.Envelope_Element{Element: []byte(v)}})
		} else {
			sp := int32(rng.Intn(2))
			wm[[2]int32{p, sp}] += int64(rng.Intn(4)) * 100
			seen[[2]int32{p, sp}] = true
			in.Value = mustMarshal(t, &pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{
				Stage: "up", SourcePartition: sp, CommittedWatermarkMillis: wm[[2]int32{p, sp}], TotalSourcePartitions: 2}}})
			in.Headers = writerHeaders("") // the application of the tests' specs
		}
		recs = append(recs, in)
	}
	return recs
}

// stepTaskRE finds the task of an output element: the first "pP" in it.
var stepTaskRE = regexp.MustCompile(`p(\d+)`)

// stepRunBatches runs Decide once per batch, in order, on the same tasks of
// a stage with a passthrough head and no ProcessFunc, or with the fake
// timers head and ProcessFunc, and returns each task's sequence of output
// elements ("E" value) and reports ("R" watermark), in produce order, and
// the tasks.
func stepRunBatches(t *testing.T, kind string, n int, batches [][]In) (map[int32][]string, map[int32]*Task) {
	spec := Spec{Name: stepName, InputTopic: "in", Partitions: int32(n), Upstreams: []string{"up"}, HeadOutput: mainPC,
		Outputs: []Output{{PCollection: mainPC, Topics: []OutputTopic{{Name: "out", Partitions: 2, Copies: 1}}}}}
	cfg := Config{Spec: spec, Head: &Passthrough{}, ReportTopic: reportTopic}
	if kind == "timers" {
		h := &stepHarness{}
		cfg.Head, cfg.Process = newFakeHead("timers", func(string, ...any) {}), h.process
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[int32]*Task{}
	for p := int32(0); p < int32(n); p++ {
		tasks[p] = newTask(p, spec.Upstreams)
	}
	seqs := map[int32][]string{}
	for _, b := range batches {
		r, err := s.Decide(context.Background(), tasks, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range r.Records {
			switch rec.Topic {
			case reportTopic:
				rep := &pb.WatermarkReport{}
				if err := proto.Unmarshal(rec.Value, rep); err != nil {
					t.Fatal(err)
				}
				p := rep.GetSourcePartition()
				seqs[p] = append(seqs[p], "R"+stepTime(mtime.Time(rep.GetCommittedWatermarkMillis())))
			case "out":
				env := &pb.Envelope{}
				if err := proto.Unmarshal(rec.Value, env); err != nil {
					t.Fatal(err)
				}
				if e, ok := env.Payload.(*pb.Envelope_Element); ok {
					m := stepTaskRE.FindSubmatch(e.Element)
					if m == nil {
						t.Fatalf("output %q names no task", e.Element)
					}
					p, _ := strconv.Atoi(string(m[1]))
					seqs[int32(p)] = append(seqs[int32(p)], "E"+string(e.Element))
				}
			}
		}
	}
	return seqs, tasks
}

// stepMonotone checks that a task's reports never go down.
func stepMonotone(seq []string) error {
	last := mtime.MinTimestamp
	for _, s := range seq {
		if s[0] != 'R' {
			continue
		}
		wm := parseTimeOrErr(s[1:])
		if wm < last {
			return fmt.Errorf("report %s after %s", stepTime(wm), stepTime(last))
		}
		last = wm
	}
	return nil
}

// stepCanonical drops the reports that do not raise the task's watermark
// (min before the first report) and keeps only the last of consecutive
// reports.
func stepCanonical(seq []string) []string {
	var out []string
	level := mtime.MinTimestamp
	for _, s := range seq {
		if s[0] == 'R' {
			wm := parseTimeOrErr(s[1:])
			if wm <= level {
				continue
			}
			level = wm
			if len(out) > 0 && out[len(out)-1][0] == 'R' {
				out[len(out)-1] = s
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// stepSameLevels compares a task's sequences of one record per batch
// (want) and of a cut (got): the same outputs in the same order; before
// each, the same last report for the output of an element record, and a
// report no higher for a timer firing ("fired ...").
func stepSameLevels(want, got []string) error {
	type out struct {
		e     string
		level mtime.Time
	}
	levels := func(seq []string) []out {
		var outs []out
		level := mtime.MinTimestamp
		for _, s := range seq {
			if s[0] == 'R' {
				level = max(level, parseTimeOrErr(s[1:]))
				continue
			}
			outs = append(outs, out{s[1:], level})
		}
		return outs
	}
	w, g := levels(want), levels(got)
	if len(w) != len(g) {
		return fmt.Errorf("%d outputs one record per batch, %d with the cut", len(w), len(g))
	}
	for i := range w {
		switch {
		case w[i].e != g[i].e:
			return fmt.Errorf("output %d is %q one record per batch, %q with the cut", i, w[i].e, g[i].e)
		case strings.HasPrefix(w[i].e, "fired ") && g[i].level > w[i].level,
			!strings.HasPrefix(w[i].e, "fired ") && g[i].level != w[i].level:
			return fmt.Errorf("output %q follows report %s one record per batch, %s with the cut", w[i].e, stepTime(w[i].level), stepTime(g[i].level))
		}
	}
	return nil
}

func stepBatchesString(batches [][]In) string {
	var bs []string
	for _, b := range batches {
		var rs []string
		for _, in := range b {
			env := &pb.Envelope{}
			_ = proto.Unmarshal(in.Value, env)
			if e, ok := env.Payload.(*pb.Envelope_Element); ok {
				rs = append(rs, string(e.Element))
			} else {
				r := env.GetReport()
				rs = append(rs, fmt.Sprintf("p%d:up/%d=%d", in.Task, r.GetSourcePartition(), r.GetCommittedWatermarkMillis()))
			}
		}
		bs = append(bs, bracket(rs))
	}
	return strings.Join(bs, " ")
}

// TestStepReportsBatched guards issue 13's Partitions goal: the reports an
// attempt makes at one place (here the end, all eight tasks') go to the Q
// partitions of the output topic as ONE record per partition carrying them
// all (Envelope.reports), not one per task and partition (P x Q), while
// the report topic keeps one record per task; a report made between two
// outputs (task 0's point, element records of task 0 following) stays
// between them. A downstream step reading one partition takes the batch
// as the eight reports: its hold opens at their minimum.
func TestStepReportsBatched(t *testing.T) {
	const tasks, q = 8, 5
	spec := Spec{Name: stepName, InputTopic: "in", Partitions: tasks, Upstreams: []string{"up"}, HeadOutput: mainPC,
		Outputs: []Output{{PCollection: mainPC, Topics: []OutputTopic{{Name: "out", Partitions: q, Copies: 1}}}}}
	s, err := New(Config{Spec: spec, Head: &Passthrough{}, ReportTopic: reportTopic})
	if err != nil {
		t.Fatal(err)
	}
	ts := map[int32]*Task{}
	var batch []In
	rep := func(p int32, off int64, wm int64) In {
		return In{Task: p, Offset: off, Value: mustMarshal(t, &pb.Envelope{Payload: &pb.Envelope_Report{Report: &pb.WatermarkReport{
			Stage: "up", SourcePartition: 0, CommittedWatermarkMillis: wm, TotalSourcePartitions: 1}}}), Headers: writerHeaders(spec.ApplicationID)}
	}
	elem := func(p int32, off int64, v string) In {
		return In{Task: p, Offset: off, Value: envelope.EncodeElement([]byte(v))}
	}
	for p := int32(0); p < tasks; p++ {
		ts[p] = newTask(p, spec.Upstreams)
		batch = append(batch, elem(p, 0, fmt.Sprintf("a%d", p)), rep(p, 1, 1000+int64(p)*100))
		if p == 0 {
			batch = append(batch, elem(p, 2, "b0"))
		}
	}
	r, err := s.Decide(context.Background(), ts, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The output topic's records in order: "e:<element>" or "r:<sp,sp,...>".
	var seq []string
	var onOut, onReportTopic int
	perPart := map[int32][]string{}
	for _, rec := range r.Records {
		if rec.Topic == reportTopic {
			onReportTopic++
			continue
		}
		el, reps, err := envelope.Decode(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if el != nil {
			seq = append(seq, "e:"+string(el))
			continue
		}
		onOut++
		var sps []string
		for _, x := range reps {
			sps = append(sps, fmt.Sprintf("%d@%d", x.GetSourcePartition(), x.GetCommittedWatermarkMillis()))
		}
		s := "r:" + strings.Join(sps, ",")
		perPart[rec.Partition] = append(perPart[rec.Partition], s)
		if rec.Partition == 0 {
			seq = append(seq, s)
		}
	}
	// Task 0's point report (1000) and the end's reports of tasks 1..7
	// (task 0's output did not move again): Q records each, P on the
	// report topic.
	if onOut != 2*q || onReportTopic != tasks || r.ReportsOut != uint64(2*q+tasks) {
		t.Fatalf("%d report records on the output topic (want %d: two runs to %d partitions, not one per task and partition), %d on the report topic (want %d), ReportsOut %d",
			onOut, 2*q, q, onReportTopic, tasks, r.ReportsOut)
	}
	want := "e:a0 r:0@1000 e:b0 e:a1 e:a2 e:a3 e:a4 e:a5 e:a6 e:a7 r:1@1100,2@1200,3@1300,4@1400,5@1500,6@1600,7@1700"
	if got := strings.Join(seq, " "); got != want {
		t.Fatalf("output partition 0:\n got %s\nwant %s", got, want)
	}
	for p := int32(0); p < q; p++ {
		if got := strings.Join(perPart[p], " "); got != "r:0@1000 r:1@1100,2@1200,3@1300,4@1400,5@1500,6@1600,7@1700" {
			t.Fatalf("output partition %d's reports: %s", p, got)
		}
	}

	// Downstream: partition 3's records are the input of task 3 of a
	// stage reading st; after the batch its input watermark is the min.
	down, err := New(Config{Spec: Spec{Name: "down", InputTopic: "out", Partitions: q, Upstreams: []string{stepName}, HeadOutput: mainPC},
		Head: &Passthrough{}, ReportTopic: reportTopic})
	if err != nil {
		t.Fatal(err)
	}
	dt := map[int32]*Task{3: newTask(3, []string{stepName})}
	var in []In
	for _, rec := range r.Records {
		if rec.Topic == "out" && rec.Partition == 3 {
			in = append(in, In{Task: 3, Offset: int64(len(in)), Value: rec.Value, Headers: rec.Headers})
		}
	}
	if _, err := down.Decide(context.Background(), dt, in, nil); err != nil {
		t.Fatal(err)
	}
	if wm, _ := dt[3].inputWatermark(); wm != 1000 {
		t.Fatalf("downstream task 3's input watermark %s after the batch, want 1000 (the minimum over st's 8 tasks)", stepTime(wm))
	}
}

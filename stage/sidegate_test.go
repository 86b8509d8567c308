package stage

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/stage/step"
)

// flipGate is a step.SideInputGate whose side input changes exactly when
// the test says: change closes the current Changed channel and makes the
// elements listed ready, as sideinput.Set does when a side watermark moves.
// With flipOnCheck, the first Ready call that answers false changes it
// right after answering: the side watermark moves between the readiness
// check and whatever the loop does next.
type flipGate struct {
	mu          sync.Mutex
	changed     chan struct{}
	ready       map[string]bool
	flipOnCheck bool
	checks      int
}

func newFlipGate() *flipGate {
	return &flipGate{changed: make(chan struct{}), ready: map[string]bool{}}
}

func (g *flipGate) Ready(element []byte) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checks++
	ok := g.ready[string(element)]
	if !ok && g.flipOnCheck {
		g.flipOnCheck = false
		g.changeLocked(string(element))
	}
	return ok, nil
}

func (g *flipGate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *flipGate) Waiting() string { return "flipGate" }

// change makes elements ready and wakes Changed's waiters.
func (g *flipGate) change(elements ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changeLocked(elements...)
}

func (g *flipGate) changeLocked(elements ...string) {
	for _, e := range elements {
		g.ready[e] = true
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// gatedLoop is a Loop with no Kafka client: its step (a Passthrough stage
// whose every record is an element) and tasks 0 and 1, enough for decide
// and the side gate's bookkeeping.
func gatedLoop(t *testing.T, gate step.SideInputGate) *Loop {
	t.Helper()
	core, err := step.New(step.Config{
		Spec: step.Spec{
			Name: "side", InputTopic: "in", Partitions: 2, RawInput: true, HeadOutput: "pc",
			Outputs: []step.Output{{PCollection: "pc", Topics: []step.OutputTopic{{Name: "down", Partitions: 1, Copies: 1}}}},
		},
		Head: &step.Passthrough{}, SideInputs: gate, ReportTopic: "reports",
	})
	if err != nil {
		t.Fatal(err)
	}
	return &Loop{
		cfg:   Config{SideInputs: gate},
		log:   slog.New(slog.DiscardHandler),
		core:  core,
		tasks: map[int32]*step.Task{0: step.NewTask(0, nil), 1: step.NewTask(1, nil)},
	}
}

// attempt decides one attempt over one element record per (task,
// element) pair, as Loop.commit does, and pauses the tasks it holds back
// at now, as holdBlocked does after the commit (without a consumer to
// pause). It returns the tasks held back, sorted.
func attempt(t *testing.T, l *Loop, now time.Time, elements map[int32]string) []int32 {
	t.Helper()
	var ins []step.In
	for _, p := range slices.Sorted(maps.Keys(elements)) {
		ins = append(ins, step.In{Task: p, Offset: 7, Value: []byte(elements[p])})
	}
	r, err := l.decide(context.Background(), ins)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.core.Advance(r); err != nil {
		t.Fatal(err)
	}
	blocked := slices.Sorted(maps.Keys(r.Blocked))
	l.side.hold(blocked, now)
	return blocked
}

// TestSideGateNoLostWakeUp (issue 24, "No lost wake-ups"): a side input
// that moves exactly between the readiness check of an attempt and the
// pause of the task it held back wakes that task at the next poll, not
// sideRecheck (5 s) later. Before the fix the loop fetched the gate's
// Changed channel only after the transaction committed (holdBlocked): the
// change had already closed the channel fetched before, and the task
// waited on the next one, which no change closed: the Go SDK's pingpong
// example paused 5.5-5.9 s in 10 runs of 16, three times with its side
// input complete.
func TestSideGateNoLostWakeUp(t *testing.T) {
	gate := newFlipGate()
	gate.flipOnCheck = true
	l := gatedLoop(t, gate)
	t0 := time.Now()
	if held := attempt(t, l, t0, map[int32]string{0: "a"}); !slices.Equal(held, []int32{0}) {
		t.Fatalf("tasks held back: %v, want [0] (the side input was not ready at the check)", held)
	}
	// The side input became ready right after the check: the next poll
	// (well within 1 s, sideRecheck is 5 s) resumes the task.
	if got := l.side.due(t0.Add(time.Second)); !slices.Equal(got, []int32{0}) {
		t.Fatalf("1 s after a side input changed between the readiness check and the pause, tasks resumed: %v, want [0] (without the change's wake-up the task waits for sideRecheck, %v)", got, sideRecheck)
	}
	if l.side.since.onChange != 1 || l.side.since.byRecheck != 0 {
		t.Errorf("resumed on change %d, by recheck %d; want 1, 0", l.side.since.onChange, l.side.since.byRecheck)
	}
	// Read again, the element is ready now.
	if held := attempt(t, l, t0.Add(time.Second), map[int32]string{0: "a"}); len(held) != 0 {
		t.Fatalf("tasks held back after the side input is ready: %v", held)
	}
}

// TestSideGateNoLostWakeUpOfPausedTask (issue 24): a task paused already
// (waiting on the channel of its own check) must still wake when the side
// input changes after the loop's last look at that channel and before a
// later attempt pauses another task. Before the fix each pause replaced
// the channel the paused tasks wait on with the gate's current one: task
// 0's wake-up, a change between the two, was lost until sideRecheck.
func TestSideGateNoLostWakeUpOfPausedTask(t *testing.T) {
	gate := newFlipGate()
	l := gatedLoop(t, gate)
	t0 := time.Now()
	if held := attempt(t, l, t0, map[int32]string{0: "a"}); !slices.Equal(held, []int32{0}) {
		t.Fatalf("tasks held back: %v, want [0]", held)
	}
	if got := l.side.due(t0.Add(100 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("resumed %v with no side input change", got)
	}
	gate.change("a") // task 0's element is ready now; "b" is not
	if held := attempt(t, l, t0.Add(200*time.Millisecond), map[int32]string{1: "b"}); !slices.Equal(held, []int32{1}) {
		t.Fatalf("tasks held back: %v, want [1]", held)
	}
	got := l.side.due(t0.Add(300 * time.Millisecond))
	if !slices.Contains(got, 0) {
		t.Fatalf("after a side input change, tasks resumed: %v, want task 0 among them (its element is ready; without the wake-up it waits for sideRecheck, %v)", got, sideRecheck)
	}
}

// TestSideGateRecheck: with no change a paused task is resumed once
// sideRecheck passed, not before, and the pauses are counted for the log
// line: the first at once, then at most every sideLogEvery.
func TestSideGateRecheck(t *testing.T) {
	gate := newFlipGate()
	l := gatedLoop(t, gate)
	t0 := time.Now()
	attempt(t, l, t0, map[int32]string{0: "a", 1: "b"})
	if c, ok := l.side.logDue(t0); !ok || c.paused != 2 {
		t.Fatalf("first line due %v with %+v, want due with 2 paused", ok, c)
	}
	if got := l.side.due(t0.Add(sideRecheck)); len(got) != 0 {
		t.Fatalf("resumed %v at sideRecheck, want none before it passed", got)
	}
	if got := l.side.due(t0.Add(sideRecheck + time.Millisecond)); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("resumed %v after sideRecheck, want [0 1]", got)
	}
	if _, ok := l.side.logDue(t0.Add(sideRecheck + time.Millisecond)); ok {
		t.Fatalf("a line due within sideLogEvery of the last")
	}
	c, ok := l.side.logDue(t0.Add(sideLogEvery))
	if !ok || c.byRecheck != 2 || c.onChange != 0 || c.longest != sideRecheck+time.Millisecond {
		t.Fatalf("line due %v with %+v, want 2 resumed by recheck after %v", ok, c, sideRecheck+time.Millisecond)
	}
	if _, ok := l.side.logDue(t0.Add(3 * sideLogEvery)); ok {
		t.Fatalf("a line due with nothing to say")
	}
}

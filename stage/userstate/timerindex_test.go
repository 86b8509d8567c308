package userstate

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
)

// naiveTimers is the reference for the timer index: the pending timers in a
// map, every question answered by visiting all of them (the Task before
// the index; also the baseline of BenchmarkPopDue).
type naiveTimers struct{ m map[string]*timer }

func (n *naiveTimers) set(family string, processing bool, tm fnapi.Timer) {
	k := string(timerKey(family, tm.Key, tm.Window, tm.Tag))
	if tm.Clear {
		delete(n.m, k)
		return
	}
	n.m[k] = &timer{key: k, family: family, processing: processing, fire: tm.Fire, hold: tm.Hold, encoded: tm.Encoded, window: tm.Window}
}

func (n *naiveTimers) popDue(wm mtime.Time, processing bool, now mtime.Time, ready func([]byte) bool) []*timer {
	var due []*timer
	for _, tm := range n.m {
		if (tm.processing && processing && tm.fire <= now || !tm.processing && (tm.fire < wm || wm == mtime.MaxTimestamp)) && (ready == nil || ready(tm.window)) {
			due = append(due, tm)
		}
	}
	sort.Slice(due, func(i, j int) bool { return byFire(due[i], due[j]) })
	for _, tm := range due {
		delete(n.m, tm.key)
	}
	return due
}

func (n *naiveTimers) hold() mtime.Time {
	h := mtime.MaxTimestamp
	for _, tm := range n.m {
		h = min(h, tm.hold)
	}
	return h
}

func (n *naiveTimers) nextProcessing() (mtime.Time, bool) {
	next, ok := mtime.MaxTimestamp, false
	for _, tm := range n.m {
		if tm.processing {
			next, ok = min(next, tm.fire), true
		}
	}
	return next, ok
}

func keysOf(ts []*timer) string {
	var out []string
	for _, tm := range ts {
		out = append(out, fmt.Sprintf("%q@%d", tm.key, tm.fire))
	}
	return strings.Join(out, " ")
}

// TestTimerIndexAgainstReference: random sets, re-sets, clears, pops at
// advancing watermarks and processing times, restores (Load) and side
// input readiness that comes late per window: the indexed Task pops the
// same timers in the same order, and reports the same hold, as the naive
// reference, except that a timer of a window not ready yet pops once its
// window is ready (the reference filters by readiness at each pop: equal
// as long as nothing becomes not ready again, which a side input never
// does). Seeds 1..200.
func TestTimerIndexAgainstReference(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		st := gbk.NewMemStore()
		tk := NewTask(st, urnInterval)
		readyUpTo := int64(-1) // windows [w, w+10) with w <= readyUpTo are ready
		useGate := rng.Intn(2) == 0
		readyFn := func(win []byte) bool { return readInt64(win)-10 <= readyUpTo }
		if useGate {
			tk.SetReady(func(win []byte) (bool, error) { return readyFn(win), nil })
		}
		if err := tk.Load(); err != nil {
			t.Fatal(err)
		}
		ref := &naiveTimers{m: map[string]*timer{}}
		var wm, now mtime.Time
		for step := 0; step < 300; step++ {
			switch op := rng.Intn(10); {
			case op < 5:
				w := int64(rng.Intn(10)) * 10
				tm := fnapi.Timer{Key: []byte(fmt.Sprint("k", rng.Intn(5))), Window: interval(w, w+10), Tag: fmt.Sprint(rng.Intn(2)),
					Fire: mtime.Time(rng.Intn(120)), Hold: mtime.Time(rng.Intn(120)), Clear: rng.Intn(5) == 0}
				tm.Encoded = []byte(fmt.Sprint(tm.Fire))
				fam, proc := "e", false
				if rng.Intn(3) == 0 {
					fam, proc = "p", true
				}
				if err := tk.SetTimer(fam, proc, tm); err != nil {
					t.Fatal(err)
				}
				ref.set(fam, proc, tm)
			case op < 8:
				wm += mtime.Time(rng.Intn(15))
				now += mtime.Time(rng.Intn(15))
				if rng.Intn(20) == 0 {
					wm = mtime.MaxTimestamp
				}
				proc := rng.Intn(2) == 0
				got, err := tk.PopDue(wm, proc, now)
				if err != nil {
					t.Fatal(err)
				}
				var gate func([]byte) bool
				if useGate {
					gate = readyFn
				}
				want := ref.popDue(wm, proc, now, gate)
				if keysOf(got) != keysOf(want) {
					t.Fatalf("seed %d step %d: PopDue(%d, %v, %d) = %s, want %s", seed, step, wm, proc, now, keysOf(got), keysOf(want))
				}
				if wm == mtime.MaxTimestamp {
					wm = 0
					readyUpTo = 1000 // everything ready, or held timers would stay so
					if _, err := tk.PopDue(mtime.MaxTimestamp, true, mtime.MaxTimestamp); err != nil {
						t.Fatal(err)
					}
					ref.popDue(mtime.MaxTimestamp, true, mtime.MaxTimestamp, nil)
				}
			case op < 9:
				readyUpTo += int64(rng.Intn(30))
				if ready, err := tk.Held(); err != nil {
					t.Fatal(err)
				} else if ready && !useGate {
					t.Fatalf("seed %d: held timers without a gate", seed)
				}
			default:
				if err := tk.Load(); err != nil {
					t.Fatal(err)
				}
			}
			if g, w := tk.Hold(), ref.hold(); g != w {
				t.Fatalf("seed %d step %d: Hold = %d, want %d", seed, step, g, w)
			}
			if tk.Timers() != len(ref.m) {
				t.Fatalf("seed %d step %d: %d timers, want %d", seed, step, tk.Timers(), len(ref.m))
			}
		}
	}
}

// TestTimersHeldUntilSideInputsReady: a due timer of a window whose side
// inputs are not ready stays pending (it keeps the hold), Held says when it
// is ready, and the next PopDue fires it; a restore (Load) keeps it.
func TestTimersHeldUntilSideInputsReady(t *testing.T) {
	tk := NewTask(gbk.NewMemStore(), urnInterval)
	ready := map[string]bool{string(interval(0, 10)): true}
	tk.SetReady(func(w []byte) (bool, error) { return ready[string(w)], nil })
	if err := tk.Load(); err != nil {
		t.Fatal(err)
	}
	for _, w := range [][]byte{interval(0, 10), interval(10, 20)} {
		if err := tk.SetTimer("f", false, fnapi.Timer{Key: []byte("k"), Window: w, Fire: 9, Hold: mtime.Time(readInt64(w) - 1), Encoded: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	due, err := tk.PopDue(100, false, 0)
	if err != nil || len(due) != 1 || string(due[0].window) != string(interval(0, 10)) {
		t.Fatalf("PopDue = %s, %v; want the timer of [0,10) alone", keysOf(due), err)
	}
	if h := tk.Hold(); h != 19 {
		t.Errorf("hold %d, want 19: the held timer of [10,20) still holds", h)
	}
	if r, _ := tk.Held(); r {
		t.Error("Held says ready before [10,20) is")
	}
	if err := tk.Load(); err != nil { // a restore: the timer is pending, due again
		t.Fatal(err)
	}
	ready[string(interval(10, 20))] = true
	if due, err := tk.PopDue(100, false, 0); err != nil || len(due) != 1 || string(due[0].window) != string(interval(10, 20)) {
		t.Fatalf("PopDue after ready = %s, %v; want the timer of [10,20)", keysOf(due), err)
	}
	if h := tk.Hold(); h != mtime.MaxTimestamp {
		t.Errorf("hold %d, want none", h)
	}
}

// BenchmarkPopDue: n pending event-time timers (n keys, fire times spread
// over n ms); each round re-sets one timer further ahead, pops what one
// more millisecond of watermark makes due and asks the hold: what the
// stateful head does per record and per report. The indexed Task against
// the naive scan (the Task before the index) in the same run; ratio =
// naive ns / indexed ns.
func BenchmarkPopDue(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		var perOp [2]float64
		for i, impl := range []string{"naive", "indexed"} {
			b.Run(fmt.Sprintf("%s/n=%d", impl, n), func(b *testing.B) {
				tk := NewTask(gbk.NewMemStore(), urnGlobal)
				if err := tk.Load(); err != nil {
					b.Fatal(err)
				}
				ref := &naiveTimers{m: map[string]*timer{}}
				set := func(k int, fire mtime.Time) {
					tm := fnapi.Timer{Key: []byte(fmt.Sprint("k", k)), Window: []byte{}, Fire: fire, Hold: fire, Encoded: []byte("x")}
					if impl == "naive" {
						ref.set("f", false, tm)
					} else if err := tk.SetTimer("f", false, tm); err != nil {
						b.Fatal(err)
					}
				}
				for k := 0; k < n; k++ {
					set(k, mtime.Time(k))
				}
				wm := mtime.Time(0)
				for r := 0; b.Loop(); r++ {
					set(r%n, wm+mtime.Time(n))
					wm++
					if impl == "naive" {
						ref.popDue(wm, false, 0, nil)
						_ = ref.hold()
					} else {
						if _, err := tk.PopDue(wm, false, 0); err != nil {
							b.Fatal(err)
						}
						_ = tk.Hold()
					}
				}
				perOp[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			})
		}
		if perOp[1] > 0 {
			b.Logf("n=%d: naive %.0f ns/round, indexed %.0f ns/round: ratio %.1f×", n, perOp[0], perOp[1], perOp[0]/perOp[1])
		}
	}
}

package userstate

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/gbk"
)

const (
	urnGlobal   = "beam:coder:global_window:v1"
	urnInterval = "beam:coder:interval_window:v1"
)

// interval encodes the interval window [start, end) ms as the SDK does:
// end (8 bytes, sign bit flipped) then the span (varint).
func interval(start, end int64) []byte {
	b := appendInt64(nil, end)
	return binary.AppendUvarint(b, uint64(end-start))
}

func get(t *testing.T, tk *Task, k fnapi.UserStateKey) string {
	t.Helper()
	chunks, err := tk.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, c := range chunks {
		parts = append(parts, string(c))
	}
	return strings.Join(parts, ",")
}

// TestUserStateKinds: each kind answers as the Go SDK expects
// (fnapi.UserStateKind), and keys, windows and state ids are independent.
func TestUserStateKinds(t *testing.T) {
	tk := NewTask(gbk.NewMemStore(), urnGlobal)
	bag := fnapi.UserStateKey{Kind: fnapi.UserStateBag, StateID: "b", Key: []byte("k1")}
	other := bag
	other.Key = []byte("k2")
	for _, v := range []string{"a", "b", "c"} {
		if err := tk.Append(bag, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tk.Append(other, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := get(t, tk, bag); got != "a,b,c" {
		t.Errorf("bag = %q, want a,b,c", got)
	}
	if err := tk.Clear(bag); err != nil {
		t.Fatal(err)
	}
	if err := tk.Append(bag, []byte("d")); err != nil {
		t.Fatal(err)
	}
	if got, want := get(t, tk, bag)+"|"+get(t, tk, other), "d|x"; got != want {
		t.Errorf("after clear and append: %q, want %q", got, want)
	}

	mm := func(mk string) fnapi.UserStateKey {
		return fnapi.UserStateKey{Kind: fnapi.UserStateMultimap, StateID: "m", Key: []byte("k1"), MapKey: []byte(mk)}
	}
	keys := fnapi.UserStateKey{Kind: fnapi.UserStateMultimapKeys, StateID: "m", Key: []byte("k1")}
	for _, kv := range [][2]string{{"b", "1"}, {"a", "2"}, {"b", "3"}} {
		if err := tk.Append(mm(kv[0]), []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	if got := get(t, tk, mm("b")); got != "1,3" {
		t.Errorf("map[b] = %q, want 1,3", got)
	}
	if got := get(t, tk, keys); got != "a,b" {
		t.Errorf("map keys = %q, want a,b", got)
	}
	if err := tk.Clear(mm("a")); err != nil {
		t.Fatal(err)
	}
	if got := get(t, tk, keys); got != "b" {
		t.Errorf("map keys after clearing a = %q, want b", got)
	}
	if err := tk.Clear(keys); err != nil {
		t.Fatal(err)
	}
	if got := get(t, tk, keys) + get(t, tk, mm("b")); got != "" {
		t.Errorf("map after clearing every key = %q, want empty", got)
	}
	if got := get(t, tk, bag); got != "d" {
		t.Errorf("bag after clearing the map = %q, want d", got)
	}
}

// TestOrderedList: entries come in sort key order (appends with equal sort
// keys in append order), Get and Clear take [Start, End).
func TestOrderedList(t *testing.T) {
	tk := NewTask(gbk.NewMemStore(), urnGlobal)
	k := fnapi.UserStateKey{Kind: fnapi.UserStateOrderedList, StateID: "o", Key: []byte("k"), Start: math.MinInt64, End: math.MaxInt64}
	entry := func(sk int64, v string) []byte { return append(binary.AppendUvarint(nil, uint64(sk)), v...) }
	for _, e := range []struct {
		sk int64
		v  string
	}{{300, "c"}, {-5, "neg"}, {100, "a"}, {300, "c2"}, {200, "b"}} {
		if err := tk.Append(k, entry(e.sk, e.v)); err != nil {
			t.Fatal(err)
		}
	}
	values := func(k fnapi.UserStateKey) string {
		chunks, err := tk.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range chunks {
			sk, n := binary.Uvarint(c)
			out = append(out, fmt.Sprintf("%d:%s", int64(sk), c[n:]))
		}
		return strings.Join(out, " ")
	}
	if got, want := values(k), "-5:neg 100:a 200:b 300:c 300:c2"; got != want {
		t.Errorf("list = %q, want %q", got, want)
	}
	r := k
	r.Start, r.End = 100, 300
	if got, want := values(r), "100:a 200:b"; got != want {
		t.Errorf("[100, 300) = %q, want %q", got, want)
	}
	if err := tk.Clear(r); err != nil {
		t.Fatal(err)
	}
	if got, want := values(k), "-5:neg 300:c 300:c2"; got != want {
		t.Errorf("after clearing [100, 300): %q, want %q", got, want)
	}
}

// TestGC: a window's state goes once wm > maxTimestamp + allowed lateness,
// and not before; the global window's state stays.
func TestGC(t *testing.T) {
	st := gbk.NewMemStore()
	tk := NewTask(st, urnInterval)
	w1 := interval(0, 10)  // max timestamp 9
	w2 := interval(10, 20) // max timestamp 19
	for _, w := range [][]byte{w1, w2} {
		if err := tk.Append(fnapi.UserStateKey{Kind: fnapi.UserStateBag, StateID: "s", Key: []byte("k"), Window: w}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		wm        mtime.Time
		deleted   int
		remaining string
	}{
		{wm: 14, deleted: 0}, // 9 + 5 = 14 is not before 14
		{wm: 15, deleted: 2}, // w1: its count and its entry
		{wm: 24, deleted: 0},
		{wm: 25, deleted: 2},
	} {
		n, err := tk.GC(step.wm, 5)
		if err != nil {
			t.Fatal(err)
		}
		if n != step.deleted {
			t.Errorf("GC(wm=%d) deleted %d records, want %d", step.wm, n, step.deleted)
		}
	}
	if st.Len() != 0 {
		t.Errorf("%d records left after both windows expired", st.Len())
	}
	g := NewTask(st, urnGlobal)
	if err := g.Append(fnapi.UserStateKey{Kind: fnapi.UserStateBag, StateID: "s", Key: []byte("k")}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n, _ := g.GC(mtime.MaxTimestamp, 0); n != 0 {
		t.Errorf("GC deleted %d records of the global window", n)
	}
}

// TestGCLatenessNearTheEndOfTime: an allowed lateness as large as an SDK
// may send (Java's Long.MAX_VALUE ms) keeps a window's state to the end of
// time; max timestamp + lateness overflowed to a time before the epoch and
// GC deleted the state of a window whose data was still on time.
func TestGCLatenessNearTheEndOfTime(t *testing.T) {
	st := gbk.NewMemStore()
	tk := NewTask(st, urnInterval)
	if err := tk.Append(fnapi.UserStateKey{Kind: fnapi.UserStateBag, StateID: "s", Key: []byte("k"), Window: interval(0, 10)}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n, err := tk.GC(1000, mtime.Time(math.MaxInt64)); err != nil || n != 0 {
		t.Fatalf("GC(wm=1000, lateness=MaxInt64) = %d, %v: want nothing deleted", n, err)
	}
	if n, err := tk.GC(mtime.MaxTimestamp, mtime.Time(math.MaxInt64)); err != nil || n != 2 {
		t.Errorf("GC(wm=end of time) = %d, %v: want the window's 2 records deleted", n, err)
	}
}

// TestTimers: a set replaces the timer of the same (family, key, window,
// tag), a clear removes it; event-time timers are due when fire < wm (all
// at the end of time), processing-time ones when fire <= now; the hold is
// the earliest pending output timestamp; Load rebuilds the index from the
// store alone.
func TestTimers(t *testing.T) {
	st := gbk.NewMemStore()
	tk := NewTask(st, urnGlobal)
	set := func(fam string, proc bool, key, tag string, fire, hold mtime.Time) {
		t.Helper()
		enc := []byte(fmt.Sprintf("%s/%s/%s@%d", fam, key, tag, fire))
		if err := tk.SetTimer(fam, proc, fnapi.Timer{Key: []byte(key), Tag: tag, Fire: fire, Hold: hold, Encoded: enc}); err != nil {
			t.Fatal(err)
		}
	}
	set("e", false, "a", "", 100, 100)
	set("e", false, "a", "", 50, 40) // replaces the one at 100
	set("e", false, "b", "", 70, 70)
	set("e", false, "b", "x", 20, mtime.MaxTimestamp) // another tag: another timer
	set("p", true, "a", "", 1000, 5)
	if err := tk.SetTimer("e", false, fnapi.Timer{Key: []byte("b"), Clear: true}); err != nil {
		t.Fatal(err)
	}
	if got := tk.Hold(); got != 5 {
		t.Errorf("hold = %d, want 5 (the processing-time timer's)", got)
	}
	reloaded := NewTask(st, urnGlobal)
	if err := reloaded.Load(); err != nil {
		t.Fatal(err)
	}
	if reloaded.Timers() != 3 || reloaded.Hold() != 5 {
		t.Errorf("reloaded: %d timers, hold %d; want 3, 5", reloaded.Timers(), reloaded.Hold())
	}
	names := func(ts []*timer) string {
		var out []string
		for _, x := range ts {
			out = append(out, string(x.encoded))
		}
		return strings.Join(out, " ")
	}
	due, err := tk.PopDue(50, true, 999)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(due), "e/b/x@20"; got != want {
		t.Errorf("due at wm 50, now 999: %q, want %q (fire < wm)", got, want)
	}
	due, _ = tk.PopDue(51, true, 1000)
	if got, want := names(due), "e/a/@50 p/a/@1000"; got != want {
		t.Errorf("due at wm 51, now 1000: %q, want %q", got, want)
	}
	if tk.Timers() != 0 || tk.Hold() != mtime.MaxTimestamp || st.Len() != 0 {
		t.Errorf("after firing all: %d timers, hold %d, %d records", tk.Timers(), tk.Hold(), st.Len())
	}
}

// TestNextEventIsWherePopDueFires checks NextEvent's sentence (the stage
// loop ends its poll on a report at or past it, issue 24): one watermark
// below it pops nothing, it pops the earliest event-time timer; a
// processing-time timer has no due watermark.
func TestNextEventIsWherePopDueFires(t *testing.T) {
	tk := NewTask(gbk.NewMemStore(), urnGlobal)
	for _, tm := range []struct {
		key  string
		proc bool
		fire mtime.Time
	}{{"a", false, 50}, {"b", false, 20}, {"c", true, 10}} {
		if err := tk.SetTimer("f", tm.proc, fnapi.Timer{Key: []byte(tm.key), Fire: tm.fire, Hold: tm.fire, Encoded: []byte(tm.key)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []mtime.Time{21, 51} {
		due, ok := tk.NextEvent()
		if !ok || due != want {
			t.Fatalf("NextEvent = %d, %v; want %d, true", due, ok, want)
		}
		if got, err := tk.PopDue(due-1, false, 0); err != nil || len(got) != 0 {
			t.Fatalf("PopDue(%d), below the due watermark: %d timers, err %v; want none", due-1, len(got), err)
		}
		if got, err := tk.PopDue(due, false, 0); err != nil || len(got) != 1 {
			t.Fatalf("PopDue(%d), the due watermark: %d timers, err %v; want 1", due, len(got), err)
		}
	}
	if due, ok := tk.NextEvent(); ok {
		t.Fatalf("only a processing-time timer is left, NextEvent = %d", due)
	}
}

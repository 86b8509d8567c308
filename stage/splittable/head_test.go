package splittable

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/stage/fnapi"
	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// clock is a settable processing time.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newHead(t *testing.T, c *clock) *Head {
	t.Helper()
	stores, err := state.Open(state.Options{Dir: t.TempDir(), Name: "sdf", Topic: "sdf-changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHead(Config{Stage: "s1", Stores: stores, Clock: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	for _, p := range []int32{0, 1} {
		if err := h.Assign(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// windowed is a wire element whose timestamp is ts (the first 8 bytes of a
// windowed value) and whose rest is tag.
func windowed(ts mtime.Time, tag string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(int64(ts))^(1<<63)), tag...)
}

func commit(t *testing.T, h *Head) (changelog int) {
	t.Helper()
	if err := h.Prepare(func(string, int32, []byte, []byte) error { changelog++; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.Committed(); err != nil {
		t.Fatal(err)
	}
	return changelog
}

// TestResidualsAreKeptHeldAndResumed walks one task through the head's
// life: an element runs alone; its bundle's residual is kept with the
// element's task (not the other), holds the task's output at the
// estimator's watermark (or the element's timestamp without one), is due
// after its delay (Wake), is resumed alone at the next Advance, and the
// hold goes once nothing is left.
func TestResidualsAreKeptHeldAndResumed(t *testing.T) {
	c := &clock{now: time.UnixMilli(1_000_000)}
	h := newHead(t, c)
	w, err := h.Element(1, step.In{Value: []byte("e")})
	if err != nil || !w.Alone || len(w.Elements) != 1 {
		t.Fatalf("Element: %+v, %v; want the element alone", w, err)
	}
	w, err = h.Results(&step.Bundle{Residuals: []fnapi.Residual{
		{Element: windowed(50, "r1"), Delay: 2 * time.Second, OutputWatermarks: map[string]mtime.Time{"o1": 700, "o2": 600}},
		{Element: windowed(40, "r2")},
	}})
	if err != nil || len(w.Elements) != 0 {
		t.Fatalf("Results: %+v, %v; want nothing run at once", w, err)
	}
	if got := h.Hold(1); got != 40 {
		t.Errorf("hold of task 1 = %d, want 40 (r2's element timestamp, below r1's estimate 600)", got)
	}
	if got := h.Hold(0); got != mtime.MaxTimestamp {
		t.Errorf("hold of task 0 = %d, want none", got)
	}
	if n := commit(t, h); n != 2 {
		t.Errorf("%d changelog records, want 2 (one per residual)", n)
	}
	if got := fmt.Sprint(h.Wake()); got != "[1]" {
		t.Errorf("Wake = %s, want [1] (r2 is due at once)", got)
	}
	w, err = h.Advance(1, 0)
	if err != nil || !w.Alone || fmt.Sprintf("%q", w.Elements) != fmt.Sprintf("%q", [][]byte{windowed(40, "r2")}) {
		t.Fatalf("Advance: %+v, %v; want r2 alone", w, err)
	}
	if _, err := h.Results(&step.Bundle{}); err != nil {
		t.Fatal(err)
	}
	if got := h.Hold(1); got != 600 {
		t.Errorf("hold of task 1 after r2 = %d, want 600 (r1's least output watermark)", got)
	}
	commit(t, h)
	if got := h.Wake(); len(got) != 0 {
		t.Errorf("Wake = %v before r1's delay passed", got)
	}
	c.now = c.now.Add(2 * time.Second)
	if got := fmt.Sprint(h.Wake()); got != "[1]" {
		t.Errorf("Wake = %s after the delay, want [1]", got)
	}
	if w, _ = h.Advance(1, 0); len(w.Elements) != 1 {
		t.Fatalf("Advance after the delay: %+v, want r1", w)
	}
	if _, err := h.Results(&step.Bundle{}); err != nil {
		t.Fatal(err)
	}
	commit(t, h)
	if got, n := h.Hold(1), h.Residuals(1); got != mtime.MaxTimestamp || n != 0 {
		t.Errorf("after r1: hold %d, %d residuals; want none", got, n)
	}
}

// TestAbortKeepsTheCommittedResiduals: an aborted attempt's residual
// changes are dropped (the resumed one is back, the new one gone), so the
// rewound input runs again from the committed state: nothing twice,
// nothing lost.
func TestAbortKeepsTheCommittedResiduals(t *testing.T) {
	c := &clock{now: time.UnixMilli(5_000)}
	h := newHead(t, c)
	if _, err := h.Element(0, step.In{Value: []byte("e")}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Results(&step.Bundle{Residuals: []fnapi.Residual{{Element: windowed(10, "kept")}}}); err != nil {
		t.Fatal(err)
	}
	commit(t, h)
	w, _ := h.Advance(0, 0)
	if len(w.Elements) != 1 {
		t.Fatalf("Advance: %+v, want the kept residual", w)
	}
	if _, err := h.Results(&step.Bundle{Residuals: []fnapi.Residual{{Element: windowed(20, "next")}}}); err != nil {
		t.Fatal(err)
	}
	if got := h.Hold(0); got != 20 {
		t.Fatalf("hold in the attempt = %d, want 20", got)
	}
	if err := h.Aborted([]int32{0}); err != nil {
		t.Fatal(err)
	}
	if got, n := h.Hold(0), h.Residuals(0); got != 10 || n != 1 {
		t.Errorf("after the abort: hold %d, %d residuals; want the committed one (10, 1)", got, n)
	}
	w, _ = h.Advance(0, 0)
	if fmt.Sprintf("%q", w.Elements) != fmt.Sprintf("%q", [][]byte{windowed(10, "kept")}) {
		t.Errorf("resumed %q after the abort, want the committed residual again", w.Elements)
	}
}

// TestResidualsOfAnUnassignedTask: residuals with no task to keep them are
// an error, never dropped.
func TestResidualsOfAnUnassignedTask(t *testing.T) {
	h := newHead(t, &clock{now: time.UnixMilli(0)})
	if _, err := h.Element(0, step.In{}); err != nil {
		t.Fatal(err)
	}
	h.Revoke(0)
	if _, err := h.Results(&step.Bundle{Residuals: []fnapi.Residual{{Element: windowed(0, "x")}}}); err == nil {
		t.Fatal("residuals of a revoked task's bundle were accepted")
	}
}

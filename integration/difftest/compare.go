package difftest

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Observe reduces the output lines of a run of sp (dtFormat's) to what
// the Beam model fixes, per sink mode: ModeExact keeps each line;
// ModeTotal keeps, per sink, key and window, the sum of the values
// (discarding) or the greatest (accumulating), without timestamps or pane
// infos; ModeWindows keeps which sinks, keys and windows had output. In
// every mode, a line whose window an element reached after the window
// expired (expiredSpans: Prism may keep the element, the model drops it)
// is left out. The result is sorted: two runs agree when their
// observations are equal. A line that does not parse, or names a sink sp
// does not have, is an error.
func Observe(sp Spec, lines []string) ([]string, error) {
	modes := map[string]Sink{}
	expired := map[string][]span{}
	for _, s := range sp.Sinks {
		modes[fmt.Sprintf("s%d", s.PC)] = s
		expired[fmt.Sprintf("s%d", s.PC)] = expiredSpans(sp, s.PC)
	}
	type kw struct{ sink, key, win string }
	totals := map[kw]int{}
	var out []string
	for _, l := range lines {
		f := strings.Split(l, "|")
		if len(f) != 6 {
			return nil, fmt.Errorf("difftest: output line %q: want 6 fields", l)
		}
		sk, ok := modes[f[0]]
		if !ok {
			return nil, fmt.Errorf("difftest: output line %q: no sink %s", l, f[0])
		}
		v, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("difftest: output line %q: value: %v", l, err)
		}
		if slices.ContainsFunc(expired[f[0]], func(s span) bool { return s.covers(f[3]) }) {
			continue
		}
		k := kw{f[0], f[1], f[3]}
		switch sk.Mode {
		case ModeExact:
			if sk.OpenLast && strings.HasPrefix(f[5], "ON_TIME/") {
				l = strings.Replace(l, "/last=true", "/last=?", 1)
				l = strings.Replace(l, "/last=false", "/last=?", 1)
			}
			out = append(out, l)
		case ModeTotal:
			if sk.Accumulate {
				totals[k] = max(totals[k], v)
			} else {
				totals[k] += v
			}
		case ModeWindows:
			totals[k] = 0
		default:
			return nil, fmt.Errorf("difftest: sink %s: unknown mode %q", f[0], sk.Mode)
		}
	}
	for k, v := range totals {
		if modes[k.sink].Mode == ModeWindows {
			out = append(out, fmt.Sprintf("%s|%s|%s has output", k.sink, k.key, k.win))
		} else {
			out = append(out, fmt.Sprintf("%s|%s|%s total=%d", k.sink, k.key, k.win, v))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Diff returns the lines of the multisets a and b (sorted) that are in
// one only, as "-line" (a only) and "+line" (b only); empty when equal.
func Diff(a, b []string) []string {
	count := map[string]int{}
	for _, l := range a {
		count[l]--
	}
	for _, l := range b {
		count[l]++
	}
	var out []string
	for l, n := range count {
		for ; n < 0; n++ {
			out = append(out, "-"+l)
		}
		for ; n > 0; n-- {
			out = append(out, "+"+l)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][1:] != out[j][1:] {
			return out[i][1:] < out[j][1:]
		}
		return out[i] < out[j]
	})
	return out
}

// Shrink returns Specs smaller than sp, each one change away: a sink
// dropped, a step or source (and what reads it) dropped, a step bypassed
// (its readers read its input), a source's element or watermark advance
// dropped. A
// shrinker keeps the first whose difference persists and shrinks again.
// Each returned Spec builds if sp does.
func Shrink(sp Spec) []Spec {
	var out []Spec
	if len(sp.Sinks) > 1 {
		for i := range sp.Sinks {
			c := clone(sp)
			c.Sinks = append(c.Sinks[:i:i], c.Sinks[i+1:]...)
			out = append(out, c)
		}
	}
	n := len(sp.Sources) + len(sp.Steps)
	for pc := n - 1; pc >= 0; pc-- {
		if c, ok := dropPC(sp, pc); ok {
			out = append(out, c)
		}
	}
	for j := len(sp.Steps) - 1; j >= 0; j-- {
		if c, ok := bypass(sp, j); ok {
			out = append(out, c)
		}
	}
	for i, src := range sp.Sources {
		for j := range src.Events {
			c := clone(sp)
			evs := c.Sources[i].Events
			c.Sources[i].Events = append(evs[:j:j], evs[j+1:]...)
			if hasElement(c.Sources[i].Events) {
				out = append(out, c)
			}
		}
	}
	return out
}

// bypass removes step j, its readers (and sinks) reading its first input
// instead; false for a step whose removal would leave no sink.
func bypass(sp Spec, j int) (Spec, bool) {
	nSrc := len(sp.Sources)
	pc := nSrc + j
	from := sp.Steps[j].In[0]
	re := func(i int) int {
		switch {
		case i == pc:
			return from
		case i > pc:
			return i - 1
		}
		return i
	}
	c := clone(sp)
	c.Steps = nil
	for k, st := range sp.Steps {
		if k == j {
			continue
		}
		st2 := st
		st2.In = nil
		for _, in := range st.In {
			st2.In = append(st2.In, re(in))
		}
		c.Steps = append(c.Steps, st2)
	}
	c.Sinks = nil
	seen := map[int]bool{}
	for _, s := range sp.Sinks {
		s.PC = re(s.PC)
		if !seen[s.PC] {
			seen[s.PC] = true
			c.Sinks = append(c.Sinks, s)
		}
	}
	return c, len(c.Sinks) > 0
}

func hasElement(evs []Event) bool {
	for _, e := range evs {
		if !e.Watermark {
			return true
		}
	}
	return false
}

// dropPC removes PCollection pc and everything that reads it (directly or
// not), renumbering the rest; false if nothing with a sink would be left.
func dropPC(sp Spec, pc int) (Spec, bool) {
	nSrc := len(sp.Sources)
	gone := map[int]bool{pc: true}
	for j, st := range sp.Steps {
		for _, in := range st.In {
			if gone[in] {
				gone[nSrc+j] = true
			}
		}
	}
	if pc < nSrc && nSrc == 1 {
		return Spec{}, false
	}
	renum := map[int]int{}
	next := 0
	for i := 0; i < nSrc+len(sp.Steps); i++ {
		if !gone[i] {
			renum[i] = next
			next++
		}
	}
	c := Spec{Seed: sp.Seed, OnePartition: sp.OnePartition}
	for i, src := range sp.Sources {
		if !gone[i] {
			c.Sources = append(c.Sources, cloneSource(src))
		}
	}
	if len(c.Sources) == 0 {
		return Spec{}, false
	}
	for j, st := range sp.Steps {
		if gone[nSrc+j] {
			continue
		}
		st2 := st
		st2.In = nil
		for _, in := range st.In {
			st2.In = append(st2.In, renum[in])
		}
		c.Steps = append(c.Steps, st2)
	}
	for _, s := range sp.Sinks {
		if !gone[s.PC] {
			s.PC = renum[s.PC]
			c.Sinks = append(c.Sinks, s)
		}
	}
	// A dropped PCollection's sole reader is now unread: observe it, so
	// that the change is one step, not a whole branch.
	if len(c.Sinks) == 0 {
		return Spec{}, false
	}
	return c, true
}

func cloneSource(s Source) Source {
	s.Events = append([]Event(nil), s.Events...)
	return s
}

func clone(sp Spec) Spec {
	c := sp
	c.Sources = nil
	for _, s := range sp.Sources {
		c.Sources = append(c.Sources, cloneSource(s))
	}
	c.Steps = append([]Step(nil), sp.Steps...)
	c.Sinks = append([]Sink(nil), sp.Sinks...)
	return c
}

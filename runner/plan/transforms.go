package plan

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// runnerComposites are composites the runner executes whole, ignoring their
// expansion.
var runnerComposites = map[string]bool{URNReshuffle: true, URNRedistributeArbitrary: true, URNRedistributeByKey: true}

// leafTransforms returns the transforms to execute, in the order a depth-first
// walk of the root transforms finds them: leaves, and composites the runner
// executes whole.
func leafTransforms(p *pipepb.Pipeline) ([]string, error) {
	ts := p.GetComponents().GetTransforms()
	var out []string
	seen := map[string]bool{}
	var walk func(id string) error
	walk = func(id string) error {
		if seen[id] {
			return nil
		}
		seen[id] = true
		t, ok := ts[id]
		if !ok {
			return fmt.Errorf("%w: transform %s is referenced but not defined", ErrMalformed, id)
		}
		if len(t.GetSubtransforms()) == 0 || runnerComposites[t.GetSpec().GetUrn()] {
			out = append(out, id)
			return nil
		}
		for _, sub := range t.GetSubtransforms() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	for _, id := range p.GetRootTransformIds() {
		if err := walk(id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func checkSupported(id string, t *pipepb.PTransform, opts Options) error {
	urn := t.GetSpec().GetUrn()
	name := fmt.Sprintf("transform %q (id %s, URN %s)", t.GetUniqueName(), id, urn)
	if kind, ok := headKind(urn); ok {
		if !opts.supports(kind) {
			return fmt.Errorf("%w: %s: %s is not implemented in this runner yet", ErrUnsupported, name, kind)
		}
		return nil
	}
	if !sdkURNs[urn] {
		if urn == "" {
			return fmt.Errorf("%w: %s has no URN", ErrUnsupported, name)
		}
		return fmt.Errorf("%w: %s", ErrUnsupported, name)
	}
	if urn == URNParDo {
		pd := &pipepb.ParDoPayload{}
		if err := unmarshal(t.GetSpec().GetPayload(), pd); err != nil {
			return fmt.Errorf("%w: %s: ParDoPayload: %v", ErrMalformed, name, err)
		}
		for _, local := range slices.Sorted(maps.Keys(pd.GetSideInputs())) {
			si := pd.GetSideInputs()[local]
			switch ap := si.GetAccessPattern().GetUrn(); ap {
			case URNSideInputIterable, URNSideInputMultimap:
			default:
				return fmt.Errorf("%w: %s: side input %q: access pattern %q is not implemented (iterable and multimap only)", ErrUnsupported, name, local, ap)
			}
			switch wm := si.GetWindowMappingFn().GetUrn(); wm {
			case URNWindowMappingGlobal, URNWindowMappingFixed, URNWindowMappingSliding:
			default:
				return fmt.Errorf("%w: %s: side input %q: window mapping fn %q is not implemented (the Go SDK's global, fixed and sliding mappings only)", ErrUnsupported, name, local, wm)
			}
		}
		if len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0 {
			if !opts.supports(HeadStateful) {
				return fmt.Errorf("%w: %s: stateful DoFns (state or timers) are not implemented in this runner yet", ErrUnsupported, name)
			}
		}
	}
	return nil
}

// isStateful says whether t is a ParDo with user state or timers: it heads
// a HeadStateful stage.
func isStateful(t *pipepb.PTransform) bool {
	if t.GetSpec().GetUrn() != URNParDo {
		return false
	}
	pd := &pipepb.ParDoPayload{}
	if unmarshal(t.GetSpec().GetPayload(), pd) != nil {
		return false
	}
	return len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0
}

// mainInputs returns the PCollections of t's inputs that are not side inputs,
// sorted by local name; a Flatten may list one PCollection twice.
func mainInputs(t *pipepb.PTransform) []string {
	side := map[string]bool{}
	if t.GetSpec().GetUrn() == URNParDo {
		pd := &pipepb.ParDoPayload{}
		if unmarshal(t.GetSpec().GetPayload(), pd) == nil {
			for local := range pd.GetSideInputs() {
				side[local] = true
			}
		}
	}
	var out []string
	for _, local := range slices.Sorted(maps.Keys(t.GetInputs())) {
		if !side[local] {
			out = append(out, t.GetInputs()[local])
		}
	}
	return out
}

// topoSort orders leaves so every producer precedes its consumers; ties go
// to the smaller unique name. graphx.Marshal lists root transforms in a
// different order from run to run, so the walk order cannot break ties: the
// unique names are the same in every instance.
func topoSort(leaves []string, comps *pipepb.Components, producer map[string]string) ([]string, error) {
	name := func(id string) string { return comps.GetTransforms()[id].GetUniqueName() }
	indeg := map[string]int{}
	next := map[string][]string{}
	for _, id := range leaves {
		for _, pc := range allInputs(comps.GetTransforms()[id]) {
			up, ok := producer[pc]
			if !ok {
				return nil, fmt.Errorf("%w: no transform produces PCollection %s, an input of %q", ErrMalformed, pc, comps.GetTransforms()[id].GetUniqueName())
			}
			indeg[id]++
			next[up] = append(next[up], id)
		}
	}
	var ready, out []string
	for _, id := range leaves {
		if indeg[id] == 0 {
			ready = append(ready, id)
		}
	}
	for len(ready) > 0 {
		sort.Slice(ready, func(i, j int) bool { return name(ready[i]) < name(ready[j]) })
		id := ready[0]
		ready = ready[1:]
		out = append(out, id)
		for _, n := range next[id] {
			if indeg[n]--; indeg[n] == 0 {
				ready = append(ready, n)
			}
		}
	}
	if len(out) != len(leaves) {
		return nil, fmt.Errorf("%w: the transforms form a cycle", ErrMalformed)
	}
	return out, nil
}

func allInputs(t *pipepb.PTransform) []string {
	var out []string
	for _, local := range slices.Sorted(maps.Keys(t.GetInputs())) {
		out = append(out, t.GetInputs()[local])
	}
	return out
}

func sortedValues(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

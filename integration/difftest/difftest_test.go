package difftest

import (
	"reflect"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

func init() { beam.Init() }

// TestGenerateDeterministicAndBuilds: a seed gives the same Spec twice,
// and every Spec of the first 2000 seeds, and every shrink of the first
// 100, builds into a Beam pipeline.
func TestGenerateDeterministicAndBuilds(t *testing.T) {
	kinds := map[string]int{}
	for seed := int64(0); seed < 2000; seed++ {
		sp := Generate(seed, Options{StatefulSideInputs: seed%2 == 0, SessionTriggers: seed%3 == 0})
		if !reflect.DeepEqual(sp, Generate(seed, Options{StatefulSideInputs: seed%2 == 0, SessionTriggers: seed%3 == 0})) {
			t.Fatalf("seed %d: two different Specs", seed)
		}
		if _, err := Build(sp, ""); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, sp)
		}
		for _, st := range sp.Steps {
			kinds[st.Kind]++
		}
		if seed < 100 {
			for _, c := range Shrink(sp) {
				if _, err := Build(c, ""); err != nil {
					t.Fatalf("seed %d shrunk: %v\n%s\nfrom\n%s", seed, err, c, sp)
				}
			}
		}
	}
	t.Logf("steps by kind over 2000 seeds: %v", kinds)
}

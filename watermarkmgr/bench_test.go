package watermarkmgr

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// benchSizes are the source partition counts P of the benchmarks.
var benchSizes = []int{1, 64, 1024, 16384}

// steadyReports returns a fixed random sequence of (partition, watermark
// step) pairs: the steady state of an upstream whose P tasks have all
// reported and commit in random order, each commit raising its watermark by
// 1..100 ms.
func steadyReports(P int) (ps []int32, steps []mtime.Time) {
	const n = 1 << 16
	rng := rand.New(rand.NewPCG(uint64(P), 1))
	ps, steps = make([]int32, n), make([]mtime.Time, n)
	for i := range n {
		ps[i], steps[i] = rng.Int32N(int32(P)), mtime.Time(1+rng.IntN(100))
	}
	return ps, steps
}

// BenchmarkObserve measures one steady-state report followed by Advance
// (ObserveAndAdvance) with P source partitions, all reported and not idle.
// The cost must grow no faster than log P; compare with
// BenchmarkObserveReference, the O(P) brute-force model, in the same run:
//
//	go test -run '^$' -bench 'Observe' -benchtime 200000x ./watermarkmgr/
func BenchmarkObserve(b *testing.B) {
	for _, P := range benchSizes {
		b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
			m := New()
			wms := make([]mtime.Time, P)
			for p := range P {
				if err := m.Observe(int32(p), 0, int32(P), false); err != nil {
					b.Fatal(err)
				}
			}
			m.Advance()
			ps, steps := steadyReports(P)
			i := 0
			for b.Loop() {
				j := i & (len(ps) - 1)
				p := ps[j]
				wms[p] += steps[j]
				if _, err := m.ObserveAndAdvance(p, wms[p], int32(P), false); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkObserveReference is BenchmarkObserve on refManager (a map
// scanned in full by every advance): the O(P) baseline.
func BenchmarkObserveReference(b *testing.B) {
	for _, P := range benchSizes {
		b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
			r := newRef()
			wms := make([]mtime.Time, P)
			for p := range P {
				if err := r.observe(int32(p), 0, int32(P), false); err != nil {
					b.Fatal(err)
				}
			}
			r.advance()
			ps, steps := steadyReports(P)
			i := 0
			for b.Loop() {
				j := i & (len(ps) - 1)
				p := ps[j]
				wms[p] += steps[j]
				if err := r.observe(p, wms[p], int32(P), false); err != nil {
					b.Fatal(err)
				}
				r.advance()
				i++
			}
		})
	}
}

// BenchmarkObserveSlowest is the worst case for the heap: every report comes
// from the partition that defines the min (the slowest task catches up) and
// jumps past every other partition, so it sifts from the root to a leaf:
// log2(P) levels. The partitions then report round-robin in a fixed order.
func BenchmarkObserveSlowest(b *testing.B) {
	for _, P := range benchSizes {
		b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
			m := New()
			for p := range P {
				if err := m.Observe(int32(p), mtime.Time(p), int32(P), false); err != nil {
					b.Fatal(err)
				}
			}
			m.Advance()
			next := mtime.Time(P)
			for b.Loop() {
				p := m.MinPartition()
				if _, err := m.ObserveAndAdvance(p, next, int32(P), false); err != nil {
					b.Fatal(err)
				}
				next++
			}
			if m.Watermark() != next-mtime.Time(P) {
				b.Fatalf("watermark %d, want %d", m.Watermark(), next-mtime.Time(P))
			}
		})
	}
}

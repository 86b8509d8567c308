package activity

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// SynthHeader is the header line of git-commits.csv, which Synthesize
// writes first.
const SynthHeader = "arrival_ms,event_ms,commit,area,files,insertions,deletions"

// Synthesis shapes the commit-like rows Synthesize writes. The zero value
// of a field takes its default, drawn from git-commits.csv's own shape.
type Synthesis struct {
	// Rows is how many rows to write (after the header). Required, > 0.
	Rows int
	// Seed makes the rows: equal Synthesis values write equal bytes.
	Seed uint64
	// Areas is how many areas commits fall in, their popularity Zipf-like
	// (s = 1.1), as a repository's directories are. Default 400.
	Areas int
	// StartMillis is the first event time, Unix epoch milliseconds.
	// Default 1112911993000 (2005-04-07, git's first commit).
	StartMillis int64
	// SpanMillis is the event-time span the rows cover. Default 21 years.
	SpanMillis int64
	// LateFraction of the rows arrive out of order: their event time is up
	// to MaxLateMillis before their arrival time. Default 0.05, 3 years.
	LateFraction  float64
	MaxLateMillis int64
}

func (s *Synthesis) defaults() {
	if s.Areas <= 0 {
		s.Areas = 400
	}
	if s.StartMillis == 0 {
		s.StartMillis = 1112911993000
	}
	if s.SpanMillis <= 0 {
		s.SpanMillis = 21 * 365 * 24 * 3600 * 1000
	}
	if s.LateFraction <= 0 {
		s.LateFraction = 0.05
	}
	if s.MaxLateMillis <= 0 {
		s.MaxLateMillis = 3 * 365 * 24 * 3600 * 1000
	}
}

// Synthesize writes s.Rows commit-like rows in git-commits.csv's format
// (SynthHeader first) to w, deterministically from s.Seed (PCG): arrival
// times increase evenly over the span, each row's event time is its
// arrival time or, for a LateFraction of rows, up to MaxLateMillis before
// it (never before StartMillis); areas are "area-N" drawn Zipf-like;
// files, insertions and deletions are heavy-tailed as real commits'. It
// is the input of the scale benchmarks: 1 M, 3 M, 10 M rows of the same
// shape as the main job's 60 746.
func Synthesize(w io.Writer, s Synthesis) error {
	if s.Rows <= 0 {
		return fmt.Errorf("activity: Synthesize: Rows is %d, want > 0", s.Rows)
	}
	s.defaults()
	rng := rand.New(rand.NewPCG(s.Seed, 0x636f6d6d6974)) // "commit"
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(s.Areas-1))
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := fmt.Fprintln(bw, SynthHeader); err != nil {
		return err
	}
	step := float64(s.SpanMillis) / float64(s.Rows)
	var buf []byte
	for i := 0; i < s.Rows; i++ {
		arrival := s.StartMillis + int64(float64(i)*step)
		event := arrival
		if rng.Float64() < s.LateFraction {
			event = max(s.StartMillis, arrival-rng.Int64N(s.MaxLateMillis))
		}
		files := 1 + int64(math.Floor(rng.ExpFloat64()*2))
		ins := int64(math.Floor(math.Exp(rng.NormFloat64()*1.6 + 2.5)))
		del := int64(math.Floor(math.Exp(rng.NormFloat64()*1.6 + 1.8)))
		buf = buf[:0]
		buf = fmt.Appendf(buf, "%d,%d,%010x,area-%d,%d,%d,%d\n", arrival, event, rng.Uint64()>>24, zipf.Uint64(), files, ins, del)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

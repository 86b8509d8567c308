package runner

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"

	"github.com/kafkastreams/kafkastreams/stage/step"
)

// kvBytesCoder is a kafkaio.Read stage's element coder: KV<[]byte,
// []byte> in the global window.
func kvBytesCoder() *coder.Coder {
	return coder.NewW(coder.NewKV([]*coder.Coder{coder.NewBytes(), coder.NewBytes()}), coder.NewGlobalWindow())
}

// encodeAlone is the element of r at ts encoded the plain way: a fresh
// buffer and FullValue per record (sourceEncoder before chunks).
func encodeAlone(enc exec.ElementEncoder, r step.In, ts mtime.Time) ([]byte, error) {
	var buf bytes.Buffer
	err := enc.Encode(&exec.FullValue{Elm: r.Key, Elm2: r.Value, Timestamp: ts, Windows: window.SingleGlobalWindow, Pane: typex.NoFiringPane()}, &buf)
	return buf.Bytes(), err
}

// TestSourceEncoder: every element is the plain encoding of its record,
// and stays so while later ones are encoded, across chunk boundaries and
// with elements larger than a chunk's spare room and than a chunk; a
// Kafka null key or value encodes as the plain way does.
func TestSourceEncoder(t *testing.T) {
	kv := coder.NewKV([]*coder.Coder{coder.NewBytes(), coder.NewBytes()})
	for name, e := range map[string]*sourceEncoder{
		"bytes KV":  newSourceEncoder(kv, false, "t"),
		"FullValue": {enc: exec.MakeElementEncoder(kvBytesCoder())},
	} {
		t.Run(name, func(t *testing.T) { testSourceEncoder(t, e) })
	}
	if !newSourceEncoder(kv, false, "t").bytesKV {
		t.Error("a KV of two bytes coders: not encoded on the bytes path")
	}
}

func testSourceEncoder(t *testing.T, e *sourceEncoder) {
	c := kvBytesCoder()
	plain := exec.MakeElementEncoder(c)
	var got, want [][]byte
	for i := range 20_000 {
		r := step.In{Key: []byte(fmt.Sprintf("k%d", i%1000)), Value: []byte(fmt.Sprintf("v%d", i))}
		switch i {
		case 777:
			r.Value = []byte(strings.Repeat("x", sourceChunkSpare+10))
		case 5000:
			r.Value = []byte(strings.Repeat("y", 3*sourceChunkBytes))
		case 9000:
			r.Key, r.Value = nil, nil
		}
		ts := mtime.Time(int64(i) * 1000)
		b, err := e.encode(r, ts)
		if err != nil {
			t.Fatal(err)
		}
		w, err := encodeAlone(plain, r, ts)
		if err != nil {
			t.Fatal(err)
		}
		got, want = append(got, b), append(want, w)
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("element %d: %x, want %x", i, got[i], want[i])
		}
	}
	dec := exec.MakeElementDecoder(c)
	fv, err := dec.Decode(bytes.NewReader(got[42]))
	if err != nil {
		t.Fatal(err)
	}
	if string(fv.Elm.([]byte)) != "k42" || string(fv.Elm2.([]byte)) != "v42" || fv.Timestamp != 42_000 {
		t.Errorf("element 42 decodes to %v, %v at %v", fv.Elm, fv.Elm2, fv.Timestamp)
	}
	// An append to an element does not write into the next one.
	before := bytes.Clone(got[101])
	_ = append(got[100], 0xff)
	if !bytes.Equal(got[101], before) {
		t.Error("appending to an element wrote into the next")
	}
}

// TestSourceEncoderChunkBounded: records larger than a chunk's spare room
// do not grow one chunk for ever. Before, each grew it by append's factor
// with a copy of every element since the last new chunk: 1 000 records of
// 100 KiB left a chunk of 118 MB (found by a review helper).
func TestSourceEncoderChunkBounded(t *testing.T) {
	e := newSourceEncoder(coder.NewKV([]*coder.Coder{coder.NewBytes(), coder.NewBytes()}), false, "t")
	v := bytes.Repeat([]byte{'x'}, 100<<10)
	for i := range 1000 {
		if _, err := e.encode(step.In{Key: []byte("k"), Value: v}, mtime.Time(i)); err != nil {
			t.Fatal(err)
		}
		if c := cap(e.chunk.b); c > sourceChunkBytes {
			t.Fatalf("after %d records of %d bytes the encoder keeps a chunk of %d bytes", i+1, len(v), c)
		}
	}
}

// BenchmarkSourceEncoder: a windowed sum's records encoded by
// sourceEncoder against the plain way (a buffer and a FullValue per
// record), in the same run; reports ns per record of each and their
// ratio, and allocations per record of sourceEncoder.
func BenchmarkSourceEncoder(b *testing.B) {
	c := kvBytesCoder()
	recs := make([]step.In, 1000)
	for i := range recs {
		recs[i] = step.In{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%d", i*7))}
	}
	const n = 200_000
	// timed is the ns per record of encoding n records with f.
	timed := func(f func(step.In, mtime.Time) ([]byte, error)) float64 {
		start := time.Now()
		for i := range n {
			if _, err := f(recs[i%len(recs)], mtime.Time(i)); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / n
	}
	plain := exec.MakeElementEncoder(c)
	e := newSourceEncoder(coder.NewKV([]*coder.Coder{coder.NewBytes(), coder.NewBytes()}), false, "t")
	var base, ours []float64
	for b.Loop() {
		// Alternating, 5 rounds each per op: the medians.
		for range 5 {
			base = append(base, timed(func(r step.In, ts mtime.Time) ([]byte, error) { return encodeAlone(plain, r, ts) }))
			ours = append(ours, timed(e.encode))
		}
	}
	slices.Sort(base)
	slices.Sort(ours)
	mb, mo := base[len(base)/2], ours[len(ours)/2]
	b.ReportMetric(mb, "plain-ns/record")
	b.ReportMetric(mo, "chunked-ns/record")
	b.ReportMetric(mo/mb, "chunked/plain")
	b.ReportMetric(testing.AllocsPerRun(n, func() { _, _ = e.encode(recs[0], 0) }), "chunked-allocs/record")
	b.ReportMetric(testing.AllocsPerRun(n, func() { _, _ = encodeAlone(plain, recs[0], 0) }), "plain-allocs/record")
}

package kafkasource

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// FuzzPartition decodes a strategy and a record sequence from the fuzz
// input and checks Partition against refPartition after every record: the
// same watermark, never decreasing, not idle right after a record, and
// WatermarkWith before each record the Watermark after it. Run:
//
//	go test -run '^$' -fuzz=FuzzPartition -fuzztime=60s ./stage/kafkasource/
//
// Input: byte 0 the kind (mod 3); bytes 1-8 MaxOutOfOrderness in ns
// (bounded only, made non-negative); bytes 9-10 Idleness in ms; then 10
// bytes per record: an event time (8 bytes, any int64) and a wall-clock
// step (2 bytes, signed ms, so the clock goes back too).
func FuzzPartition(f *testing.F) {
	rec := func(ts int64, step int16) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(ts))
		return binary.LittleEndian.AppendUint16(b, uint16(step))
	}
	head := func(kind byte, bound time.Duration, idleMs uint16) []byte {
		b := append([]byte{kind}, binary.LittleEndian.AppendUint64(nil, uint64(bound))...)
		return binary.LittleEndian.AppendUint16(b, idleMs)
	}
	f.Add(head(0, 30*time.Second, 5000))
	f.Add(append(append(head(0, 1500*time.Microsecond, 0), rec(1000, 10)...), rec(500, -5)...))
	f.Add(append(append(head(1, 0, 100), rec(int64(mtime.MaxTimestamp)+1, 1)...), rec(-1<<63, 200)...))
	f.Add(append(head(0, 1<<63-1, 1), rec(int64(mtime.MinTimestamp)+5, 0)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 11 {
			return
		}
		s := Strategy{Kind: Kind(data[0] % 3), Idleness: time.Duration(binary.LittleEndian.Uint16(data[9:])) * time.Millisecond}
		if s.Kind == BoundedOutOfOrderness {
			s.MaxOutOfOrderness = time.Duration(binary.LittleEndian.Uint64(data[1:]) >> 1)
		}
		p, err := NewPartition(s, epoch)
		if err != nil {
			t.Fatalf("NewPartition(%+v): %v", s, err)
		}
		ref := &refPartition{s: s, assignedAt: epoch}
		now, prev := epoch, p.Watermark()
		for data = data[11:]; len(data) >= 10; data = data[10:] {
			ts := int64(binary.LittleEndian.Uint64(data))
			now = now.Add(time.Duration(int16(binary.LittleEndian.Uint16(data[8:]))) * time.Millisecond)
			peek, peekOK := p.WatermarkWith(mtime.Time(ts))
			p.Observe(mtime.Time(ts), now)
			if peekOK != (s.Kind != NoWatermarks) || peekOK && peek != p.Watermark() {
				t.Fatalf("%+v records %v: WatermarkWith(%d) before Observe = %d, %v; Watermark after = %d", s, ref.ts, ts, peek, peekOK, p.Watermark())
			}
			ref.ts, ref.nows = append(ref.ts, ts), append(ref.nows, now)
			wm := p.Watermark()
			if want := ref.watermark(); wm != want {
				t.Fatalf("%+v records %v: Watermark = %d, reference %d", s, ref.ts, wm, want)
			}
			if wm < prev || wm < mtime.MinTimestamp || wm > mtime.MaxTimestamp {
				t.Fatalf("%+v records %v: watermark %d after %d", s, ref.ts, wm, prev)
			}
			if p.Idle(now) {
				t.Fatalf("idle right after a record")
			}
			for _, probe := range []time.Duration{0, s.Idleness - time.Millisecond, s.Idleness} {
				if got, want := p.Idle(now.Add(probe)), ref.idle(now.Add(probe)); got != want {
					t.Fatalf("Idle(now+%v) = %v, reference %v", probe, got, want)
				}
			}
			prev = wm
		}
	})
}

package stage

import (
	"github.com/kafkastreams/kafkastreams/stage/step"

	"fmt"
	"os"
	"reflect"
	"testing"
	"time"
)

// TestSpillFileReplaysInOrder: records added over several spills come back
// from replay in order, byte for byte (nil and empty keys and values told
// apart, timestamps and headers kept), reset empties the file for the next attempt, and
// close removes it.
func TestSpillFileReplaysInOrder(t *testing.T) {
	dir := t.TempDir()
	s := &spillFile{dir: dir}
	var want []step.Record
	for attempt := 0; attempt < 2; attempt++ {
		want = want[:0]
		for i := 0; i < 3000; i++ {
			r := step.Record{Topic: fmt.Sprint("t", i%3), Partition: int32(i%5) - 1, Value: []byte(fmt.Sprint(attempt, "-", i))}
			switch i % 4 {
			case 1:
				r.Key = []byte{}
			case 2:
				r.Key = []byte(fmt.Sprint("k", i))
				r.Timestamp = time.UnixMilli(int64(1_700_000_000_000 + i))
			case 3:
				// A sink's tombstone with headers: a null header value,
				// an empty key and value, and a plain one, in order.
				r.Value = nil
				r.Headers = []step.Header{{Key: "h", Value: nil}, {Key: "", Value: []byte{}}, {Key: "trace", Value: []byte(fmt.Sprint(i))}}
			}
			want = append(want, r)
		}
		for i := 0; i < len(want); i += 700 {
			if err := s.add(want[i:min(i+700, len(want))]); err != nil {
				t.Fatal(err)
			}
		}
		var got []step.Record
		err := s.replay(func(r *step.Record) error {
			c := *r
			if r.Key != nil {
				c.Key = append([]byte{}, r.Key...)
			}
			if r.Value != nil {
				c.Value = append([]byte{}, r.Value...)
			}
			got = append(got, c)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("attempt %d: replayed %d records, want %d", attempt, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) || got[i].Timestamp.UnixNano() != want[i].Timestamp.UnixNano() {
				t.Fatalf("attempt %d: record %d = %+v, want %+v", attempt, i, got[i], want[i])
			}
		}
		if err := s.reset(); err != nil {
			t.Fatal(err)
		}
	}
	name := s.f.Name()
	s.close()
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("spill file %s after close: %v", name, err)
	}
}

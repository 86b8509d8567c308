package state

import (
	"context"
	"testing"
)

// Stats lists every assigned task store with its disk size, and forgets a
// dropped one.
func TestStats(t *testing.T) {
	m, err := Open(Options{Dir: t.TempDir(), Name: "s", Topic: "s-changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, p := range []int32{1, 0} {
		if _, err := m.Restore(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Task(0).Set([]byte("k"), make([]byte, 1<<16)); err != nil {
		t.Fatal(err)
	}
	if err := m.Committed(); err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	if len(st) != 2 || st[0].Partition != 0 || st[1].Partition != 1 || st[0].Restoring || st[0].SizeBytes == 0 {
		t.Fatalf("stats %+v, want tasks 0 and 1, restored, task 0 with a size", st)
	}
	m.Drop(1)
	if st := m.Stats(); len(st) != 1 || st[0].Partition != 0 {
		t.Fatalf("after Drop(1): %+v", st)
	}
}

package state

import (
	"context"
	"fmt"
	"testing"
	"testing/quick"
)

// NewBudget sizes the memtables as its doc says: three a store within
// three quarters of the budget, clamped.
func TestNewBudgetSizes(t *testing.T) {
	for _, c := range []struct {
		mib, stores int64
		memKiB      int64
		exceeds     bool
	}{
		{mib: 512, stores: 8, memKiB: 16 << 10},
		{mib: 512, stores: 12, memKiB: 384 << 10 / 36},
		{mib: 512, stores: 128, memKiB: 1 << 10},
		{mib: 512, stores: 512, memKiB: 256},
		{mib: 512, stores: 1024, memKiB: 256, exceeds: true},
		{mib: 16, stores: 1, memKiB: 4 << 10},
	} {
		b, err := NewBudget(c.mib<<20, int(c.stores))
		if err != nil {
			t.Fatal(err)
		}
		if b.MemTableBytes()>>10 != c.memKiB || (b.Exceeds() > 0) != c.exceeds || b.Bytes() != c.mib<<20 {
			t.Errorf("NewBudget(%d MiB, %d): memtable %d, exceeds %d; want memtable %d KiB, exceeding %v",
				c.mib, c.stores, b.MemTableBytes(), b.Exceeds(), c.memKiB, c.exceeds)
		}
		b.Close()
		b.Close()
	}
	if _, err := NewBudget(8<<20, 1); err == nil {
		t.Error("NewBudget(8 MiB) gave no error; the minimum is 16 MiB")
	}
}

// Whatever the budget and the store count, the memtable size is within
// [MinMemTableBytes, MaxMemTableBytes], and every store's memtables fit in
// three quarters of the budget unless the size is at its floor (and then
// Exceeds says by how much they pass the whole budget).
func TestBudgetBoundProperty(t *testing.T) {
	f := func(mib uint16, stores uint16) bool {
		bytes := int64(16+int(mib)%8192) << 20
		b, err := NewBudget(bytes, int(stores))
		if err != nil {
			return false
		}
		defer b.Close()
		m := b.MemTableBytes()
		return m >= MinMemTableBytes && m <= MaxMemTableBytes &&
			(b.MemTablesAtMost() <= bytes*3/4 || m == MinMemTableBytes) &&
			b.Exceeds() == max(0, b.MemTablesAtMost()-bytes)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

// The stores of two stages on one budget keep their memtables within it
// while every store is written far more than its memtable holds: the sum
// of Pebble's allocated memtable bytes over every open database never
// passes MemTablesAtMost, three quarters of the budget. (With
// MaxMemTableBytes a store, what each Manager had before the budget, the
// sum passed it several times over: the memtables of 6 MiB written grow to
// 4 MiB each.) The budget counts the
// open stores, and the cache outlives the Managers until Close.
func TestBudgetBoundsMemTablesOfEveryStore(t *testing.T) {
	const stores = 12
	b, err := NewBudget(32<<20, stores)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	memBudget := b.Bytes() * 3 / 4
	var ms []*Manager
	for i := range 2 {
		m, err := Open(Options{Dir: t.TempDir(), Name: fmt.Sprintf("s%d", i), Topic: "c", NoRestore: true, Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ms = append(ms, m)
		for p := range stores / 2 {
			if _, err := m.Restore(context.Background(), int32(p)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if b.Open() != stores {
		t.Fatalf("budget counts %d open stores, want %d", b.Open(), stores)
	}
	value := make([]byte, 1<<10)
	var most int64
	for round := range 24 { // 24 × 256 KiB = 6 MiB a store
		for _, m := range ms {
			for p := range stores / 2 {
				task := m.Task(int32(p))
				for i := range 256 {
					if err := task.Set(fmt.Appendf(nil, "r%02d-%04d", round, i), value); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := m.Committed(); err != nil {
				t.Fatal(err)
			}
		}
		var sum int64
		for _, m := range ms {
			for _, task := range m.tasks {
				sum += int64(task.db.Metrics().MemTable.Size)
			}
		}
		most = max(most, sum)
	}
	t.Logf("memtable budget %d KiB (%d KiB a store); the most allocated at once %d KiB", memBudget>>10, b.MemTableBytes()>>10, most>>10)
	if most > memBudget {
		t.Fatalf("the stores' memtables held %d KiB at once, over the budget's %d KiB", most>>10, memBudget>>10)
	}
	ms[0].Close()
	if b.Open() != stores/2 {
		t.Fatalf("after one Manager closed, the budget counts %d open stores, want %d", b.Open(), stores/2)
	}
}

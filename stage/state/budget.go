package state

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Budget is the memory every task store of an instance shares, fixed when
// the instance starts and not growing with its task count (issue 24: with
// a 16 MiB memtable a store, 512 tasks could ask for 8 GiB). It is what a
// Kafka Streams user sets up for RocksDB with one shared block cache and a
// WriteBufferManager that charges memtables to it (RocksDBConfigSetter).
//
// Bytes is one Pebble block cache that every store of every stage of the
// instance reads through, and Pebble charges each memtable it allocates
// to the cache (Cache.Reserve), evicting blocks to make room: blocks and
// memtables together stay within Bytes while the memtables fit. Pebble
// has no write-buffer manager to bound the memtables themselves, so they
// are sized here: each store's MemTableSize is
//
//	clamp(¾ Bytes / (3 · Stores), MinMemTableBytes, MaxMemTableBytes)
//
// where 3 is the most memtables a store holds (Pebble's
// MemTableStopWritesThreshold of 2, a full one flushing while the next
// fills, and the freed one it keeps for reuse), Stores the most task
// stores the instance can hold (the partitions of every stateful stage's
// input: the whole application on one instance), and the quarter left is
// for blocks. A store's memtables start at 256 KiB and double at each
// flush up to its size (Pebble), so an idle store costs little whatever
// its size. Below MinMemTableBytes a store, every memtable of every store
// full would take more than Bytes: Exceeds says by how much.
//
// A Budget is safe for concurrent use (stages open stores from their own
// goroutines). Close releases the cache once every Manager using it is
// closed.
type Budget struct {
	bytes    int64
	stores   int
	cache    *pebble.Cache
	memTable int64

	mu     sync.Mutex
	open   int
	closed bool
}

const (
	// MaxMemTableBytes is the largest memtable a store gets: Kafka Streams'
	// RocksDB default write buffer (16 MiB; Pebble's default is 4 MiB). A
	// GroupByKey's values live until their window fires, often within a
	// commit or a few: in a larger memtable more of them are written and
	// deleted before a flush, and fewer L0 files feed compactions (Pebble's
	// compactions were 14% of BenchmarkGroupByKeyStage's CPU with 4 MiB).
	MaxMemTableBytes = 16 << 20
	// MinMemTableBytes is the smallest: Pebble's initial memtable size.
	MinMemTableBytes = 256 << 10
	// DefaultBudgetBytes is the runner's default budget (--state_memory_mb
	// 512): memtables of 16 MiB for up to 8 stores (two stateful stages of
	// four partitions), of 1 MiB for 128, of 256 KiB for 512.
	DefaultBudgetBytes = 512 << 20
)

// NewBudget returns the budget of an instance that can hold at most stores
// task stores (at least 1) in bytes bytes (at least 16 MiB). It fails on
// smaller values, naming them.
func NewBudget(bytes int64, stores int) (*Budget, error) {
	if bytes < 16<<20 {
		return nil, fmt.Errorf("state: a memory budget of %d bytes is below the 16 MiB minimum", bytes)
	}
	stores = max(stores, 1)
	mem := bytes * 3 / 4 / int64(3*stores)
	mem = min(max(mem, MinMemTableBytes), MaxMemTableBytes)
	return &Budget{bytes: bytes, stores: stores, cache: pebble.NewCache(bytes), memTable: mem}, nil
}

// Bytes is the budget in bytes: the shared block cache's size, memtables
// included.
func (b *Budget) Bytes() int64 { return b.bytes }

// MemTablesAtMost is the most bytes the stores' memtables take, every
// store open and holding its most memtables (3 · Stores · MemTableBytes).
func (b *Budget) MemTablesAtMost() int64 { return 3 * int64(b.stores) * b.memTable }

// MemTableBytes is each store's memtable size in bytes (Pebble's
// MemTableSize).
func (b *Budget) MemTableBytes() int64 { return b.memTable }

// Stores is the most task stores the budget was divided among.
func (b *Budget) Stores() int { return b.stores }

// Exceeds is how many bytes the stores' memtables alone can take beyond
// the budget, every store open and full: 0 unless the memtable size is
// clamped up to MinMemTableBytes.
func (b *Budget) Exceeds() int64 { return max(0, b.MemTablesAtMost()-b.bytes) }

// String describes the budget for a start-up log line.
func (b *Budget) String() string {
	return fmt.Sprintf("%d MiB shared by every task store (one block cache, memtables charged to it), memtables of %d KiB for each of at most %d stores",
		b.bytes>>20, b.memTable>>10, b.stores)
}

// opened and closedOne count the stores open on the budget.
func (b *Budget) opened() {
	b.mu.Lock()
	b.open++
	b.mu.Unlock()
}

func (b *Budget) closedOne() {
	b.mu.Lock()
	b.open--
	b.mu.Unlock()
}

// Open is the number of task stores open on the budget now.
func (b *Budget) Open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// Close releases the block cache (each open store holds its own reference
// until it closes). Later calls do nothing.
func (b *Budget) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.cache.Unref()
	}
}

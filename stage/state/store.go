package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Sentinel errors.
var (
	// ErrNotAssigned: the task has no open store (not assigned, or revoked).
	ErrNotAssigned = errors.New("state: task not assigned")
	// ErrRestore: the changelog could not be read to its end; wraps the
	// cause. Retryable: the assignment can be retried.
	ErrRestore = errors.New("state: restore from changelog failed")
	// ErrClosed: the Manager is closed.
	ErrClosed = errors.New("state: closed")
)

// ProduceFunc writes one record into the open transaction (step.ProduceFunc).
type ProduceFunc func(topic string, partition int32, key, value []byte) error

// Options configure a Manager.
type Options struct {
	// Dir is the base directory (the runner's --state_dir). Task p's
	// database lives in Dir/<Name>/task-<p>, kept when the task is dropped
	// (keep.go; removed instead with NoRestore). Default: a directory
	// under os.TempDir().
	Dir string
	// Name names the stage (a directory under Dir, and in logs). Required.
	Name string
	// Topic is the changelog topic (see kafkaclient.ChangelogTopic). Required.
	Topic string
	// Changelog reads a task's changelog partition for Restore: partition
	// p of topic, read_committed. It first learns the partition's
	// ChangelogInfo (topic id, log start and end offsets) and calls from
	// with it, which returns the offset to read from (Start for a full
	// restore, a kept store's Meta.Next for a tail) or an error that ends
	// the read; then it reads from there to the log end offset when the
	// read began (not the first read_committed EOF), handing each record's
	// key and value (value nil: a tombstone) to apply in offset order; it
	// returns the records read, and an error of from or apply as is.
	// kafkaclient.ChangelogReader is the runner's. Required unless
	// NoRestore. (A function, so that this package imports no Kafka
	// client: the heads that use it stay pure.)
	Changelog func(ctx context.Context, topic string, p int32, from func(ChangelogInfo) (int64, error), apply func(key, value []byte) error) (int, error)
	// CloseChangelog, if set, is called once by Close, before the stores
	// close: no Restore reads through Changelog after it (the runner's
	// reader keeps one consumer for all of a stage's restores).
	CloseChangelog func()
	// NoRestore: Restore opens an empty store and reads no changelog
	// (Prepare still writes the changelog records through its produce
	// function). For tests of the heads without a broker; a store opened
	// so survives no restart.
	NoRestore bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Budget is the memory the stores share with every other stage's of
	// the instance (the runner's, from --state_memory_mb). Nil: a budget
	// of the Manager's own, a 32 MiB block cache and 16 MiB memtables,
	// closed with it.
	Budget *Budget
	// FS is the file system the task databases are written through:
	// vfs.Default if nil. Tests give one that injects faults (Pebble's
	// vfs/errorfs).
	FS vfs.FS
}

// Manager holds the stores of one stage's tasks in one instance. Not safe
// for concurrent use: every call comes from the goroutine running the
// stage's loop.
type Manager struct {
	opts   Options
	log    *slog.Logger
	base   string
	tasks  map[int32]*Task
	closed bool
	// budget gives the block cache the tasks' databases share and their
	// memtable size; ownBudget says the Manager made it (Options.Budget
	// nil) and closes it.
	budget    *Budget
	ownBudget bool
	// ws is Prepare's buffer, kept for the next commit's.
	ws []write
	// dir is the first file system error of the databases' background
	// work (dirfull.go).
	dir dirHealth

	// keep is what the loop's goroutine (Restore, Drop, Close) and a
	// standby follower's (Follow, Copy) share: the tasks active here and
	// the followed copies, by task (keep.go). Lock order: keep, then a
	// Copy's mu.
	keep struct {
		sync.Mutex
		active map[int32]bool
		copies map[int32]*Copy
		closed bool
	}

	// remove: Close removes the stores instead of keeping them
	// (RemoveOnClose).
	remove atomic.Bool

	// pub is what Stats reads from other goroutines: the loop's goroutine
	// writes it in Restore and Drop, holding mu.
	pub struct {
		sync.Mutex
		tasks map[int32]*published
	}
}

// privateBudget is the budget of a Manager given none (tests of the
// heads): 128 MiB, memtables of MaxMemTableBytes. (Before the instance's
// stores shared a budget, each Manager had a 32 MiB block cache, Pebble's
// default being 8 MiB a database: a fired window reads its values back,
// and with the default cache a third of the GroupByKey benchmark's store
// reads went to re-reading and decompressing index blocks.)
func privateBudget() *Budget {
	b, err := NewBudget(128<<20, 2)
	if err != nil {
		panic(err) // constant arguments
	}
	return b
}

// pebbleOptions are the options of a task's database. A task's store is
// always restored from its changelog into a fresh directory (Restore), so
// its database needs no durability of its own: no write-ahead log (a
// Commit only fills the memtable) and no compression (the files are
// temporary and local; compression and decompression were 8% of the
// GroupByKey benchmark's CPU).
func (m *Manager) pebbleOptions() *pebble.Options {
	o := &pebble.Options{Logger: pebbleLogger{m.log}, EventListener: m.eventListener(), DisableWAL: true, Cache: m.budget.cache, MemTableSize: uint64(m.budget.memTable), FS: m.opts.FS}
	for i := range o.Levels {
		o.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	return o
}

// published is one task store as Stats sees it.
type published struct {
	db        *pebble.DB
	restoring bool
	restored  atomic.Int64
	kind      string
	from      int64
}

// StoreStats is one task store's size and restore progress, for metrics.
type StoreStats struct {
	Partition int32
	// SizeBytes is the store's disk space (Pebble's DiskSpaceUsage: SSTs,
	// WAL, manifests), in bytes.
	SizeBytes uint64
	// Restoring is true while the store is being filled from its changelog
	// partition; RestoredRecords counts the records applied so far.
	Restoring       bool
	RestoredRecords int64
	// RestoreKind is how the store was restored: KindFull (the changelog
	// from its start), KindKept (this instance's kept store and the
	// changelog's tail) or KindStandby (a standby follower's copy and the
	// tail); "" while restoring. RestoredFrom is the changelog offset the
	// restore read from.
	RestoreKind  string
	RestoredFrom int64
}

// Stats returns the size and restore progress of every task store of the
// stage, sorted by partition. Unlike the rest of Manager it is safe to call
// from any goroutine.
func (m *Manager) Stats() []StoreStats {
	m.pub.Lock()
	defer m.pub.Unlock()
	out := make([]StoreStats, 0, len(m.pub.tasks))
	for p, t := range m.pub.tasks {
		st := StoreStats{Partition: p, Restoring: t.restoring, RestoredRecords: t.restored.Load(), RestoreKind: t.kind, RestoredFrom: t.from}
		if t.db != nil {
			st.SizeBytes = t.db.Metrics().DiskSpaceUsage()
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Task is the store of one task: its Pebble database with the current
// attempt's pending writes overlaid. Reads see pending writes.
type Task struct {
	p   int32
	dir string
	db  *pebble.DB
	// pending is the attempt's writes (an indexed batch: reads merge it
	// with db); nil when the attempt wrote nothing.
	pending *pebble.Batch
	// lookups counts Prepare's look-ups in db (has): tests check that a
	// GroupByKey's fired values cost none.
	lookups int
	// budget is the Manager's, counting the store open until close.
	budget *Budget
	// meta is the kept-store meta written when the task is dropped (with
	// Written then); TopicID "" keeps no store (NoRestore).
	meta Meta
}

// Open returns a Manager. It creates Dir/<Name> but opens no database.
func Open(opts Options) (*Manager, error) {
	if opts.Name == "" || opts.Topic == "" || opts.Changelog == nil && !opts.NoRestore {
		return nil, errors.New("state: Options need Name, Topic and Changelog (or NoRestore)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Dir == "" {
		opts.Dir = filepath.Join(os.TempDir(), "kafkastreams-state")
	}
	base := filepath.Join(opts.Dir, opts.Name)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	removeLegacy(base)
	m := &Manager{opts: opts, log: opts.Logger.With("stage", opts.Name), base: base, tasks: map[int32]*Task{}, budget: opts.Budget}
	if m.budget == nil {
		m.budget, m.ownBudget = privateBudget(), true
	}
	return m, nil
}

// Task returns task p's store, or nil if it is not assigned.
func (m *Manager) Task(p int32) *Task { return m.tasks[p] }

// Restore opens task p's database and fills it from changelog partition
// p, read_committed (no record of an open or aborted transaction is ever
// applied), to the partition's log end offset when the restore began
// (kafkaclient.ReadToEnd: every transaction below it has ended, so a
// commit made a moment ago is in). It first takes the task over from a
// standby follower (its copy is released before Restore opens the
// directory). If the task's directory holds a kept store that decide
// accepts (keep.go: same changelog topic id, offset within the log,
// recent), only the tail from its meta offset is read ("kept", or
// "standby" for a follower's copy); otherwise the directory is wiped and
// the changelog read from its start ("full"). A store task p already had
// is dropped first. It logs the kind, the offset read from, the records,
// bytes, and rate (records/s, MB/s). Errors wrap ErrRestore; the
// directory is then removed.
func (m *Manager) Restore(ctx context.Context, p int32) (*Task, error) {
	if m.closed {
		return nil, ErrClosed
	}
	m.Drop(p)
	m.takeOver(p)
	dir := m.taskDir(p)
	var db *pebble.DB
	var meta Meta
	var ok bool
	var err error
	_, statErr := os.Stat(dir)
	existed := statErr == nil
	if m.opts.NoRestore {
		_ = os.RemoveAll(dir)
		existed = false
		if db, err = pebble.Open(dir, m.pebbleOptions()); err != nil {
			err = openErr(dir, err)
		}
	} else {
		db, meta, ok, err = m.openKept(dir)
	}
	if err != nil {
		m.handBack(p)
		return nil, fmt.Errorf("%w: task %d: %w", ErrRestore, p, err)
	}
	m.budget.opened()
	t := &Task{p: p, dir: dir, db: db, budget: m.budget}
	pub := &published{db: db, restoring: true}
	m.pub.Lock()
	if m.pub.tasks == nil {
		m.pub.tasks = map[int32]*published{}
	}
	m.pub.tasks[p] = pub
	m.pub.Unlock()
	start := time.Now()
	res, err := m.restore(ctx, t, meta, ok, existed, pub)
	m.pub.Lock()
	pub.restoring = false
	pub.kind, pub.from = res.kind, res.from
	if err != nil {
		delete(m.pub.tasks, p)
	}
	m.pub.Unlock()
	if err != nil {
		t.close()
		m.handBack(p)
		return nil, fmt.Errorf("%w: task %d from %s[%d]: %w", ErrRestore, p, m.opts.Topic, p, err)
	}
	el := time.Since(start)
	secs := max(el.Seconds(), 1e-6)
	args := []any{"task", p, "topic", m.opts.Topic, "kind", res.kind, "from", res.from, "changelog_end", res.info.End,
		"records", res.records, "bytes", res.size, "elapsed", el.Round(time.Millisecond),
		"records_per_s", int64(float64(res.records) / secs), "mb_per_s", fmt.Sprintf("%.2f", float64(res.size)/1e6/secs)}
	if res.why != "" {
		args = append(args, "kept_store_not_used", res.why)
	}
	m.log.Info("state: restored task store from changelog", args...)
	m.tasks[p] = t
	return t, nil
}

// restoreBatch is the size in bytes past which a restore commits its
// batch of changelog records to the store (and starts the next).
const restoreBatch = 4 << 20

// restored is what restore did.
type restored struct {
	kind          string
	from          int64
	why           string
	info          ChangelogInfo
	records, size int64
}

// restore applies changelog partition t.p to t.db (a kept store with meta
// meta if ok; existed: the directory was there before Open) and returns
// what it did. It reads with Options.Changelog (the runner's: one
// consumer for the stage's restores, Assign only, never joining a group), read_committed, from the
// offset decide chooses until a partition-EOF event at or past the
// partition's log end offset when it began (kafkaclient.ReadToEnd): the EOF
// alone comes at the last stable offset, which a transaction the previous
// owner committed a moment ago has not passed until its commit marker is
// written, and stopping there would restore a store one commit behind the
// offsets committed with it. The meta record (Next = the log end offset
// the read reached) goes into the last batch, after every record: a crash
// before it keeps no usable meta.
func (m *Manager) restore(ctx context.Context, t *Task, meta Meta, ok, existed bool, pub *published) (res restored, err error) {
	if m.opts.NoRestore {
		return restored{kind: KindFull}, nil
	}
	var b *pebble.Batch
	// The batch committing while the next one fills (commitBatch, in the
	// background): the read does not wait for each commit (Pebble's
	// flushes and compactions run beside it), but a batch starts to
	// commit only once the one before it has, so the store's writes keep
	// the changelog's order and the meta record stays last.
	var committing chan error
	wait := func() error {
		if committing == nil {
			return nil
		}
		err := <-committing
		committing = nil
		return err
	}
	defer func() {
		if werr := wait(); err == nil && werr != nil {
			err = werr
		}
		if b != nil {
			_ = b.Close()
		}
	}()
	flush := func() error {
		if b == nil || b.Empty() {
			return nil
		}
		if err := wait(); err != nil {
			return err
		}
		if err := m.dirErr(); err != nil {
			return err
		}
		done, next := make(chan error, 1), b
		b = nil
		go func() { done <- m.commitBatch(next) }() // it closes next
		committing = done
		return nil
	}
	from := func(info ChangelogInfo) (int64, error) {
		res.info = info
		res.kind, res.from, res.why = decide(meta, ok, info, time.Now(), MaxKeptAge)
		if res.kind == KindFull && existed {
			db, err := m.wipe(t.db, t.dir)
			if err != nil {
				return 0, err
			}
			t.db = db
			m.pub.Lock()
			pub.db = db
			m.pub.Unlock()
		}
		return res.from, nil
	}
	n, err := m.opts.Changelog(ctx, m.opts.Topic, t.p, from, func(key, value []byte) error {
		res.size += int64(len(key) + len(value))
		pub.restored.Add(1)
		if b == nil {
			// Sized for what it takes before it commits: grown from
			// Pebble's default by doubling, its copies were a third of
			// the restore goroutine's CPU (1 GiB of 1 KiB values).
			b = t.db.NewBatchWithSize(restoreBatch + restoreBatch/8)
		}
		var err error
		if value == nil {
			err = b.Delete(key, nil)
		} else {
			err = b.Set(key, value, nil)
		}
		if err != nil {
			return err
		}
		if b.Len() > restoreBatch {
			return flush()
		}
		return nil
	})
	res.records = int64(n)
	if err != nil {
		return res, err
	}
	if res.info.TopicID != "" {
		t.meta = Meta{TopicID: res.info.TopicID, Next: max(res.info.End, res.from), Written: time.Now(), Writer: writerActive}
		if b == nil {
			b = t.db.NewBatch()
		}
		if err := b.Set(metaKey, encodeMeta(t.meta), nil); err != nil {
			return res, err
		}
	}
	if err := flush(); err != nil {
		return res, err
	}
	return res, wait()
}

// Drop closes task p's store (on revocation) and keeps it (keep.go) with
// its meta written now: its pending writes are dropped, so it holds the
// committed records up to its last commit, at or past Meta.Next. A store
// of NoRestore, of a changelog whose topic id was not known, or of a
// Manager whose directory failed (dirfull.go) is removed instead.
func (m *Manager) Drop(p int32) {
	if t := m.tasks[p]; t != nil {
		m.pub.Lock()
		delete(m.pub.tasks, p)
		if t.meta.TopicID != "" && m.dirErr() == nil {
			t.keep()
		} else {
			t.close()
		}
		m.pub.Unlock()
		delete(m.tasks, p)
		m.handBack(p)
	}
}

// Pending is how many writes the tasks' pending batches hold: at least
// as many as the records the next Prepare produces (it keeps each key's
// last write, and drops a deletion of a key set in the attempt), so a
// capacity for what its caller collects them in.
func (m *Manager) Pending() int {
	n := 0
	for _, t := range m.tasks {
		if t.pending != nil {
			n += int(t.pending.Count())
		}
	}
	return n
}

// Prepare writes the pending writes of every task as changelog records into
// the open transaction: for each key written in the attempt, its last value
// (a nil value, a tombstone, if it was deleted), in key order per task,
// tasks in partition order. A deletion of a key set in the attempt that the
// task's committed store does not hold (set and deleted within the
// attempt) is left out: the
// committed store is the changelog's state (restored from it, and changed
// only by Committed after the changelog records of the same writes
// committed), so the changelog never saw that key. A merging GroupByKey's
// session meta moves to a new key at every value that grows the session,
// so such deletions were 22% of the main job's changelog records (34 000
// of its Sessions stage's 154 000). The records' keys and values are the pending
// batch's own bytes, valid until Committed or Aborted: produce must copy
// what it keeps (librdkafka's produce does). Once a database's background
// write has failed for the file system (dirfull.go), Prepare writes
// nothing and returns ErrStateDir.
func (m *Manager) Prepare(produce ProduceFunc) error {
	if err := m.dirErr(); err != nil {
		return err
	}
	ws := m.ws[:0]
	defer func() { clear(ws); m.ws = ws[:0] }()
	for _, p := range m.sortedTasks() {
		t := m.tasks[p]
		if t.pending == nil || t.pending.Empty() {
			continue
		}
		ws = ws[:0]
		r := t.pending.Reader()
		for {
			kind, k, v, ok, err := r.Next()
			if err != nil {
				return fmt.Errorf("state: task %d: pending batch: %w", p, err)
			}
			if !ok {
				break
			}
			switch kind {
			case pebble.InternalKeyKindSet:
				if v == nil {
					v = []byte{} // an empty value, not a tombstone
				}
				ws = append(ws, write{k, v, len(ws)})
			case pebble.InternalKeyKindDelete:
				ws = append(ws, write{k, nil, len(ws)})
			default:
				return fmt.Errorf("state: task %d: unexpected batch record kind %v", p, kind)
			}
		}
		// Key order, and the batch's order among writes of one key: the
		// last of each run of equal keys is the key's last write. (An
		// unstable sort on (key, position) is the stable sort's order in
		// O(n log n); SortStableFunc's in-place merge is O(n log² n), and
		// the largest cost of a GroupByKey stage's commit.)
		slices.SortFunc(ws, func(a, b write) int {
			if c := bytes.Compare(a.key, b.key); c != 0 {
				return c
			}
			return a.seq - b.seq
		})
		set := false // a Set of the current run of equal keys came before
		for i, w := range ws {
			if w.value != nil {
				set = true
			}
			if i+1 < len(ws) && bytes.Equal(w.key, ws[i+1].key) {
				continue
			}
			setInAttempt := set
			set = false
			if w.value == nil && setInAttempt {
				// A deletion of a key the committed store lacks (set and
				// deleted within this attempt) needs no tombstone. Only a
				// key set in this attempt can be one: a key only deleted
				// (a GroupByKey's fired values, written in earlier
				// attempts) gets its tombstone without a look-up: a Pebble
				// Get per fired value was 39% of the GroupByKey stage
				// benchmark's CPU (6.2 of 15.9 s).
				had, err := t.has(w.key)
				if err != nil {
					return fmt.Errorf("state: task %d: %w", p, err)
				}
				if !had {
					continue
				}
			}
			if err := produce(m.opts.Topic, p, w.key, w.value); err != nil {
				return err
			}
		}
	}
	return nil
}

// has reports whether t's committed store holds key; it counts the
// look-up in t.lookups.
func (t *Task) has(key []byte) (bool, error) {
	t.lookups++
	_, closer, err := t.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_ = closer.Close()
	return true, nil
}

// write is one record of a pending batch: value nil for a deletion; seq
// its position in the batch.
type write struct {
	key, value []byte
	seq        int
}

// Committed applies every task's pending writes to its database (the
// transaction that carried them to the changelog has committed). Once the
// state directory has failed, a write that waits for room returns
// ErrStateDir after wedgeWait (commitBatch): the writes are safe in the
// changelog, the store is not.
func (m *Manager) Committed() error {
	for _, p := range m.sortedTasks() {
		t := m.tasks[p]
		if t.pending == nil {
			continue
		}
		b := t.pending
		t.pending = nil
		if err := m.commitBatch(b); err != nil {
			return fmt.Errorf("state: task %d: apply committed writes: %w", p, err)
		}
	}
	return nil
}

// Aborted drops the pending writes of tasks ps (of every task if ps is nil).
func (m *Manager) Aborted(ps []int32) {
	if ps == nil {
		ps = m.sortedTasks()
	}
	for _, p := range ps {
		if t := m.tasks[p]; t != nil && t.pending != nil {
			_ = t.pending.Close()
			t.pending = nil
		}
	}
}

// RemoveOnClose makes Close remove every task's store and standby copy
// instead of keeping them: for a job that is done. Safe from any
// goroutine.
func (m *Manager) RemoveOnClose() { m.remove.Store(true) }

// Close drops (keeps, or removes after RemoveOnClose) every task's store
// and releases every standby copy: Follow refuses every task from now on.
func (m *Manager) Close() {
	if m.closed {
		return
	}
	m.closed = true
	if m.opts.CloseChangelog != nil {
		m.opts.CloseChangelog()
	}
	m.dir.mu.Lock()
	wedged := m.dir.wedged
	m.dir.mu.Unlock()
	if wedged {
		// A commit waits in a database for ever (Committed): closing
		// it would too. The stage is failing with ErrStateDir; the
		// databases are left to the process's exit.
		m.log.Error("state: the state directory failed with a commit waiting: the task stores are left open", "dir", m.base)
		return
	}
	if m.remove.Load() {
		defer func() {
			es, _ := os.ReadDir(m.base)
			for _, e := range es {
				_ = os.RemoveAll(filepath.Join(m.base, e.Name()))
			}
		}()
	}
	m.keep.Lock()
	m.keep.closed = true
	copies := m.keep.copies
	m.keep.copies = nil
	m.keep.Unlock()
	for _, c := range copies {
		c.release()
	}
	for p := range m.tasks {
		m.Drop(p)
	}
	if m.ownBudget {
		m.budget.Close()
	}
}

func (m *Manager) sortedTasks() []int32 {
	out := make([]int32, 0, len(m.tasks))
	for p := range m.tasks {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// close closes t's database and removes its directory.
func (t *Task) close() {
	if t.pending != nil {
		_ = t.pending.Close()
		t.pending = nil
	}
	_ = t.db.Close()
	_ = os.RemoveAll(t.dir)
	if t.budget != nil {
		t.budget.closedOne()
	}
}

// keep closes t's database and keeps it (keepDB) with t.meta written now.
func (t *Task) keep() {
	if t.pending != nil {
		_ = t.pending.Close()
		t.pending = nil
	}
	meta := t.meta
	meta.Written = time.Now()
	_ = keepDB(t.db, t.dir, meta)
	if t.budget != nil {
		t.budget.closedOne()
	}
}

func (t *Task) batch() *pebble.Batch {
	if t.pending == nil {
		t.pending = t.db.NewIndexedBatch()
	}
	return t.pending
}

// Get returns the value of key (pending writes first), ok=false if absent.
// The value is a copy.
func (t *Task) Get(key []byte) (value []byte, ok bool, err error) {
	var v []byte
	var c interface{ Close() error }
	if t.pending != nil {
		v, c, err = t.pending.Get(key)
	} else {
		v, c, err = t.db.Get(key)
	}
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: task %d: get: %w", t.p, err)
	}
	out := append([]byte{}, v...)
	_ = c.Close()
	return out, true, nil
}

// Set writes key=value in the pending writes.
func (t *Task) Set(key, value []byte) error {
	if value == nil {
		value = []byte{} // nil is the changelog's tombstone
	}
	return t.batch().Set(key, value, nil)
}

// Delete deletes key in the pending writes.
func (t *Task) Delete(key []byte) error {
	return t.batch().Delete(key, nil)
}

// Scan calls fn for every key with the prefix, in key order, with pending
// writes merged in (never the kept store's meta record). fn must not keep key or value, nor write to the task.
func (t *Task) Scan(prefix []byte, fn func(key, value []byte) error) error {
	opts := &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)}
	var it *pebble.Iterator
	var err error
	if t.pending != nil {
		it, err = t.pending.NewIter(opts)
	} else {
		it, err = t.db.NewIter(opts)
	}
	if err != nil {
		return fmt.Errorf("state: task %d: scan: %w", t.p, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return err
		}
		if !bytes.HasPrefix(it.Key(), prefix) {
			break
		}
		if bytes.Equal(it.Key(), metaKey) {
			continue // the kept store's meta record (keep.go), not the task's
		}
		if err := fn(it.Key(), v); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// prefixEnd is the smallest key greater than every key with the prefix
// (nil: no upper bound).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte{}, prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// pebbleLogger drops Pebble's info logs and forwards its errors to slog.
type pebbleLogger struct{ log *slog.Logger }

func (pebbleLogger) Infof(string, ...any) {}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Warn("state: pebble: " + fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error("state: pebble: fatal: " + fmt.Sprintf(format, args...))
	panic(fmt.Sprintf("pebble: "+format, args...))
}

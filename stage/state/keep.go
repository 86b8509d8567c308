package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// This file is the kept stores: a task's Pebble database stays on disk
// when the task is dropped (revoked, closed), with a meta record saying up
// to which changelog offset it is current, so that the next Restore of the
// task in this instance (or of a task a standby follower kept a copy of,
// stage/standby) reads only the changelog's tail (KIP-441's warm-up, Kafka
// Streams' standby tasks and its .checkpoint file).
//
// The kept-store invariant, kept by every writer of a task's directory
// (Restore, Committed, Copy.Apply): with meta (TopicID, Next = S), for
// every key k the store holds k's value after the committed records
// [0, X) of changelog partition p applied in offset order, for some X >= S
// (X may differ from key to key), X at most the partition's last stable
// offset. Nothing of an open or aborted transaction is ever in the store.
// Hence applying the committed records [S, E) in offset order makes the
// store equal to the committed records [0, E) applied (a key written in
// [S, E) gets its last write; any other key already had its value at S,
// which is its value at E): a tail restore is a full restore's result.
// Each writer puts the meta record in the same Pebble batch as the data it
// covers, or after it, so that a crash (no WAL: a crash keeps a prefix of
// the batches, the flushed memtables) keeps the invariant.
//
// Compaction of the changelog keeps the result: it drops a record only for
// a later one of the same key (in the tail if the dropped one was), except
// tombstones, which the cleaner removes delete.retention.ms (default 24 h)
// after they were cleaned: a store not current for longer could miss one.
// So a kept store last current (Meta.Written) more than MaxKeptAge ago is
// not used.

// Restore kinds (StoreStats.RestoreKind, the restore log line's kind).
const (
	// KindFull: no usable kept store; the changelog read from its start.
	KindFull = "full"
	// KindKept: the store this instance kept when it last dropped the task
	// (or before it was killed), read from its meta offset.
	KindKept = "kept"
	// KindStandby: the copy a standby follower kept current, read from
	// its meta offset.
	KindStandby = "standby"
)

// Writers of a kept store (Meta.Writer).
const (
	writerActive  = "active"
	writerStandby = "standby"
)

// MaxKeptAge is how long after its meta was written (Meta.Written) a kept
// store is still used: 12 h, half the changelog topic's
// delete.retention.ms default (24 h), within which a tombstone the store
// has not applied yet is still in the changelog.
const MaxKeptAge = 12 * time.Hour

// metaKey is the key of the meta record in a task's database. No head
// writes a key starting with 0x00 (gbk 'm'/'v', userstate 'u'/'t',
// splittable "r/"), and the meta record is never in the changelog
// (Prepare writes only the attempt's pending writes).
var metaKey = []byte("\x00kafkastreams/kept")

// Meta is a kept store's meta record.
type Meta struct {
	// TopicID is the changelog topic's id (KIP-516) the store was filled
	// from: a topic deleted and created again under the same name has
	// another, and its stores are never reused.
	TopicID string `json:"topic_id"`
	// Next is S, the changelog offset from which a tail restore reads: the
	// store reflects every committed record below it (the invariant above).
	Next int64 `json:"next"`
	// Written is when the store was last current with the changelog up
	// to Next (its meta written).
	Written time.Time `json:"written"`
	// Writer is "active" (the task's store, kept when dropped) or
	// "standby" (a follower's copy).
	Writer string `json:"writer"`
}

func encodeMeta(m Meta) []byte {
	b, _ := json.Marshal(m) // plain fields: cannot fail
	return b
}

func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("state: kept store meta: %w", err)
	}
	if m.TopicID == "" || m.Next < 0 || m.Written.IsZero() {
		return Meta{}, fmt.Errorf("state: kept store meta %s is incomplete", b)
	}
	return m, nil
}

// ChangelogInfo is what the changelog reader learns of a partition before
// reading it (Options.Changelog's from).
type ChangelogInfo struct {
	// TopicID is the changelog topic's id (KIP-516); "" if not known.
	TopicID string
	// Start is the partition's log start offset; End its log end offset
	// (the next offset to be written) when the read began. The read stops
	// once every committed record below End is read.
	Start, End int64
}

// decide chooses how task p's store is restored: from a kept store with
// meta m (ok: one was found and its meta read) or in full. It uses the kept
// store, reading from m.Next, only if its topic id is the changelog's
// (and known), Start <= m.Next <= End (no record it lacks was deleted; an
// offset past the end is another log's), m.Next > Start unless the log is
// empty (else there is nothing to skip: the restore is full and reported
// so), and now - m.Written < maxAge.
// Otherwise the restore is full, from Start, and why says what ruled the
// kept store out ("" if there was none). Pure.
func decide(m Meta, ok bool, info ChangelogInfo, now time.Time, maxAge time.Duration) (kind string, from int64, why string) {
	switch {
	case !ok:
		return KindFull, info.Start, ""
	case info.TopicID == "":
		why = "the changelog's topic id is not known"
	case m.TopicID != info.TopicID:
		why = fmt.Sprintf("kept from topic id %s, the changelog's is %s (deleted and created again)", m.TopicID, info.TopicID)
	case m.Next < info.Start:
		why = fmt.Sprintf("kept up to offset %d, the changelog starts at %d (records it lacks were deleted)", m.Next, info.Start)
	case m.Next == info.Start && info.End > info.Start:
		// Nothing to skip: reading from the start is a full restore, and
		// says so (a store kept before any record was written, such as
		// one revoked at the group's first rebalance).
		why = fmt.Sprintf("kept at offset %d, the changelog's start: nothing to skip", m.Next)
	case m.Next > info.End:
		why = fmt.Sprintf("kept up to offset %d, past the changelog's end %d", m.Next, info.End)
	case now.Sub(m.Written) >= maxAge:
		why = fmt.Sprintf("written %v ago, more than %v", now.Sub(m.Written).Round(time.Second), maxAge)
	default:
		if m.Writer == writerStandby {
			return KindStandby, m.Next, ""
		}
		return KindKept, m.Next, ""
	}
	return KindFull, info.Start, why
}

// taskDir is task p's database directory: one per task, kept across drops.
func (m *Manager) taskDir(p int32) string {
	return filepath.Join(m.base, "task-"+strconv.Itoa(int(p)))
}

// legacyDir matches the fresh directories of stores before they were kept
// ("<p>-<8 hex digits>"): never reused, removed by Open.
var legacyDir = regexp.MustCompile(`^[0-9]+-[0-9a-f]{8}$`)

// removeLegacy removes legacyDir directories under base.
func removeLegacy(base string) {
	es, _ := os.ReadDir(base)
	for _, e := range es {
		if e.IsDir() && legacyDir.MatchString(e.Name()) {
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// openKept opens the database in dir (creating it if absent) and reads its
// meta record: ok is false if there is none or it does not decode. A
// database that does not open (a crash's leftovers Pebble refuses) is
// removed and a fresh one opened; one whose directory lock is held (by a
// database still open in this process, or by another process) is an
// error, and the directory is left alone: it is in use, not broken.
func (m *Manager) openKept(dir string) (db *pebble.DB, meta Meta, ok bool, err error) {
	if err := unlocked(dir); err != nil {
		return nil, Meta{}, false, fmt.Errorf("open %s: the store's directory is in use (its Pebble lock is held): %w", dir, err)
	}
	db, err = pebble.Open(dir, m.pebbleOptions())
	if err != nil {
		m.log.Warn("state: kept store does not open; removed", "dir", dir, "err", err)
		_ = os.RemoveAll(dir)
		if db, err = pebble.Open(dir, m.pebbleOptions()); err != nil {
			return nil, Meta{}, false, openErr(dir, err)
		}
	}
	v, closer, err := db.Get(metaKey)
	if err != nil {
		return db, Meta{}, false, nil
	}
	meta, derr := decodeMeta(v)
	_ = closer.Close()
	return db, meta, derr == nil, nil
}

// unlocked returns nil if dir does not exist or its Pebble lock is free
// (taken and given back at once), and the lock's error otherwise.
func unlocked(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	l, err := pebble.LockDirectory(dir, vfs.Default)
	if err != nil {
		return err
	}
	return l.Close()
}

// wipe closes db, removes dir and opens a fresh database there.
func (m *Manager) wipe(db *pebble.DB, dir string) (*pebble.DB, error) {
	_ = db.Close()
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	db, err := pebble.Open(dir, m.pebbleOptions())
	if err != nil {
		return nil, openErr(dir, err)
	}
	return db, nil
}

// keepDB writes meta into db, flushes its memtables (no WAL: what is not
// flushed is lost at Close) and closes it; on any error it removes dir
// instead, so that no store of unknown state is ever kept.
func keepDB(db *pebble.DB, dir string, meta Meta) error {
	err := db.Set(metaKey, encodeMeta(meta), pebble.NoSync)
	if err == nil {
		err = db.Flush()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	return err
}

// ErrActive: a standby follower asked for, or wrote to, the copy of a task
// that is active in this instance (Restore took it over) or of a closed
// Manager. Not retryable for that task: the follower stops following it.
var ErrActive = errors.New("state: task is active here")

// Record is one changelog record for Copy.Apply: Value nil is a tombstone.
type Record struct {
	Key, Value []byte
}

// Copy is a standby copy of task p's store, kept current by a follower
// (stage/standby) from the changelog. The follower is its only writer
// until Restore takes the task over (Manager.Restore releases the copy
// first: one writer at a time on a Pebble directory). Safe for use by one
// follower goroutine while the loop's goroutine restores.
type Copy struct {
	m   *Manager
	p   int32
	dir string
	// mu guards db and meta; db is nil once released.
	mu   sync.Mutex
	db   *pebble.DB
	meta Meta
}

// Follow opens task p's kept store as a standby copy for a follower
// reading changelog partition p, info its ChangelogInfo. A kept store that
// decide rules out is wiped, and the copy starts at info.Start. It returns
// ErrActive if p is active here (or the Manager closed), and an error if p
// is already followed.
func (m *Manager) Follow(p int32, info ChangelogInfo) (*Copy, error) {
	m.keep.Lock()
	defer m.keep.Unlock()
	if m.keep.closed || m.keep.active[p] {
		return nil, ErrActive
	}
	if m.keep.copies[p] != nil {
		return nil, fmt.Errorf("state: task %d already followed", p)
	}
	dir := m.taskDir(p)
	db, meta, ok, err := m.openKept(dir)
	if err != nil {
		return nil, err
	}
	kind, from, why := decide(meta, ok, info, time.Now(), MaxKeptAge)
	if kind == KindFull {
		if why != "" {
			m.log.Info("state: standby copy: kept store not used", "task", p, "why", why)
		}
		if db, err = m.wipe(db, dir); err != nil {
			return nil, err
		}
		meta = Meta{TopicID: info.TopicID, Next: from, Written: time.Now(), Writer: writerStandby}
	}
	meta.Writer = writerStandby
	m.budget.opened()
	c := &Copy{m: m, p: p, dir: dir, db: db, meta: meta}
	if m.keep.copies == nil {
		m.keep.copies = map[int32]*Copy{}
	}
	m.keep.copies[p] = c
	return c, nil
}

// Partition is the copy's task.
func (c *Copy) Partition() int32 { return c.p }

// Next is the changelog offset the copy is current up to (exclusive): the
// follower reads from it.
func (c *Copy) Next() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.meta.Next
}

// Apply writes committed changelog records rs of partition p, the
// records below offset next that the follower read (read_committed) since
// the copy's Next, and the meta record (Next = next) in one batch. It
// returns ErrActive once the copy was released (the task became active
// here, or the Manager closed).
func (c *Copy) Apply(rs []Record, next int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		return ErrActive
	}
	b := c.db.NewBatch()
	for _, r := range rs {
		var err error
		if r.Value == nil {
			err = b.Delete(r.Key, nil)
		} else {
			err = b.Set(r.Key, r.Value, nil)
		}
		if err != nil {
			_ = b.Close()
			return err
		}
	}
	meta := c.meta
	meta.Next, meta.Written = next, time.Now()
	if err := b.Set(metaKey, encodeMeta(meta), nil); err != nil {
		_ = b.Close()
		return err
	}
	if err := c.m.commitBatch(b); err != nil { // it closes b
		return fmt.Errorf("state: standby copy of task %d: %w", c.p, err)
	}
	c.meta = meta
	return nil
}

// Close ends the follower's use of the copy: the store is kept on disk
// (keepDB) for a later Restore or Follow. Safe after a release. It holds
// the Manager's keep lock until the database is closed: a copy no longer
// listed must no longer hold its directory, or a Restore of the task that
// finds no copy to take over (takeOver) would open a directory Pebble
// still locks. The follower closes a copy when the group gives its task
// to this instance, at the same rebalance as the loop's Restore.
func (c *Copy) Close() {
	c.m.keep.Lock()
	defer c.m.keep.Unlock()
	if c.m.keep.copies[c.p] == c {
		delete(c.m.keep.copies, c.p)
	}
	c.release()
}

// release flushes and closes the copy's database, keeping it, once the
// follower's Apply in progress (if any) has returned.
func (c *Copy) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		return
	}
	if err := keepDB(c.db, c.dir, c.meta); err != nil {
		c.m.log.Warn("state: standby copy not kept", "task", c.p, "err", err)
	}
	c.db = nil
	c.m.budget.closedOne()
}

// takeOver marks task p active (Follow refuses it from now on) and
// releases its standby copy, if a follower has one: after it returns no
// follower writes p's directory.
func (m *Manager) takeOver(p int32) {
	m.keep.Lock()
	if m.keep.active == nil {
		m.keep.active = map[int32]bool{}
	}
	m.keep.active[p] = true
	c := m.keep.copies[p]
	delete(m.keep.copies, p)
	m.keep.Unlock()
	if c != nil {
		c.release()
	}
}

// handBack marks task p no longer active here (dropped).
func (m *Manager) handBack(p int32) {
	m.keep.Lock()
	delete(m.keep.active, p)
	m.keep.Unlock()
}

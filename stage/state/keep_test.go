package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestDecide: a kept store is used only with the changelog's topic id,
// an offset within [Start, End] and a meta younger than maxAge; the kind
// says who wrote it.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	info := ChangelogInfo{TopicID: "T1", Start: 10, End: 100}
	kept := Meta{TopicID: "T1", Next: 50, Written: now.Add(-time.Minute), Writer: writerActive}
	with := func(f func(*Meta)) Meta { m := kept; f(&m); return m }
	for _, c := range []struct {
		name      string
		m         Meta
		ok        bool
		info      ChangelogInfo
		kind      string
		from      int64
		whyPrefix string
	}{
		{"none", Meta{}, false, info, KindFull, 10, ""},
		{"kept", kept, true, info, KindKept, 50, ""},
		{"standby", with(func(m *Meta) { m.Writer = writerStandby }), true, info, KindStandby, 50, ""},
		{"at the end", with(func(m *Meta) { m.Next = 100 }), true, info, KindKept, 100, ""},
		{"at the start", with(func(m *Meta) { m.Next = 10 }), true, info, KindFull, 10, "kept at offset 10, the changelog's start: nothing to skip"},
		{"empty log", with(func(m *Meta) { m.Next = 10 }), true, ChangelogInfo{TopicID: "T1", Start: 10, End: 10}, KindKept, 10, ""},
		{"other topic id", with(func(m *Meta) { m.TopicID = "T0" }), true, info, KindFull, 10, "kept from topic id T0"},
		{"id unknown", kept, true, ChangelogInfo{Start: 10, End: 100}, KindFull, 10, "the changelog's topic id is not known"},
		{"below the start", with(func(m *Meta) { m.Next = 9 }), true, info, KindFull, 10, "kept up to offset 9, the changelog starts at 10"},
		{"past the end", with(func(m *Meta) { m.Next = 101 }), true, info, KindFull, 10, "kept up to offset 101, past"},
		{"too old", with(func(m *Meta) { m.Written = now.Add(-MaxKeptAge) }), true, info, KindFull, 10, "written 12h0m0s ago"},
	} {
		kind, from, why := decide(c.m, c.ok, c.info, now, MaxKeptAge)
		if kind != c.kind || from != c.from || !strings.HasPrefix(why, c.whyPrefix) || (c.whyPrefix == "") != (why == "") {
			t.Errorf("%s: decide = %s from %d (%q), want %s from %d (%q…)", c.name, kind, from, why, c.kind, c.from, c.whyPrefix)
		}
	}
}

// TestMetaRoundTrip: the meta record decodes to what was encoded; a
// record without topic id, time, or not JSON does not decode.
func TestMetaRoundTrip(t *testing.T) {
	m := Meta{TopicID: "abc", Next: 7, Written: time.Unix(1700000000, 5).UTC(), Writer: writerStandby}
	got, err := decodeMeta(encodeMeta(m))
	if err != nil || got != m {
		t.Fatalf("round trip %+v, %v; want %+v", got, err, m)
	}
	for _, b := range []string{`{}`, `{"topic_id":"x","next":1}`, `not json`, `{"topic_id":"x","next":-1,"written":"2026-01-01T00:00:00Z"}`} {
		if _, err := decodeMeta([]byte(b)); err == nil {
			t.Errorf("decodeMeta(%s) = nil error, want one", b)
		}
	}
}

// fakeLog is a changelog partition in memory: record i is at offset i,
// every record committed.
type fakeLog struct {
	id   string
	recs []Record
	// froms are the offsets reads started at.
	froms []int64
}

func (l *fakeLog) append(k, v string) {
	var val []byte
	if v != "" {
		val = []byte(v)
	}
	l.recs = append(l.recs, Record{Key: []byte(k), Value: val})
}

func (l *fakeLog) read(ctx context.Context, topic string, p int32, from func(ChangelogInfo) (int64, error), apply func(key, value []byte) error) (int, error) {
	info := ChangelogInfo{TopicID: l.id, End: int64(len(l.recs))}
	off, err := from(info)
	if err != nil {
		return 0, err
	}
	l.froms = append(l.froms, off)
	n := 0
	for _, r := range l.recs[off:] {
		n++
		if err := apply(r.Key, r.Value); err != nil {
			return n, err
		}
	}
	return n, nil
}

// replay is the store a full restore of l gives: key=value, sorted.
func (l *fakeLog) replay() string {
	m := map[string]string{}
	for _, r := range l.recs {
		if r.Value == nil {
			delete(m, string(r.Key))
		} else {
			m[string(r.Key)] = string(r.Value)
		}
	}
	return dumpMap(m)
}

func dumpMap(m map[string]string) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sortStrings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s=%s ", k, m[k])
	}
	return b.String()
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func dumpTask(t *testing.T, tk *Task) string {
	t.Helper()
	m := map[string]string{}
	if err := tk.Scan([]byte("k"), func(k, v []byte) error { m[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return dumpMap(m)
}

// commit writes kvs in task p's attempt, "produces" them into l (the
// Prepare) and commits.
func commit(t *testing.T, m *Manager, l *fakeLog, p int32, kvs ...string) {
	t.Helper()
	tk := m.Task(p)
	for i := 0; i+1 < len(kvs); i += 2 {
		var err error
		if kvs[i+1] == "" {
			err = tk.Delete([]byte(kvs[i]))
		} else {
			err = tk.Set([]byte(kvs[i]), []byte(kvs[i+1]))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Prepare(func(_ string, _ int32, k, v []byte) error {
		l.append(string(k), string(v))
		if v == nil {
			l.recs[len(l.recs)-1].Value = nil
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.Committed(); err != nil {
		t.Fatal(err)
	}
}

func restoreStats(t *testing.T, m *Manager, p int32) StoreStats {
	t.Helper()
	for _, s := range m.Stats() {
		if s.Partition == p {
			return s
		}
	}
	t.Fatalf("no stats of task %d", p)
	return StoreStats{}
}

// TestKeptStoreRestoresTheTail: a dropped task's store is kept; the next
// Restore reads only the changelog from the restore's end on ("kept"),
// and gives the full replay's store, also after another owner's writes
// and deletes; a changelog of another topic id makes it full again.
func TestKeptStoreRestoresTheTail(t *testing.T) {
	l := &fakeLog{id: "T1"}
	for i := 0; i < 10; i++ {
		l.append(fmt.Sprintf("k%d", i), "a")
	}
	dir := t.TempDir()
	m, err := Open(Options{Dir: dir, Name: "s", Topic: "c", Changelog: l.read})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Restore(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if s := restoreStats(t, m, 0); s.RestoreKind != KindFull || s.RestoredRecords != 10 {
		t.Fatalf("first restore %+v, want full of 10", s)
	}
	commit(t, m, l, 0, "k1", "b", "k2", "")
	m.Drop(0)
	// Another owner's commits: a new key, an overwrite, a delete.
	l.append("k10", "c")
	l.append("k3", "c")
	l.append("k4", "")
	tk, err := m.Restore(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// The tail from the first restore's end (10): our 2 commits and their 3.
	if s := restoreStats(t, m, 0); s.RestoreKind != KindKept || s.RestoredFrom != 10 || s.RestoredRecords != 5 {
		t.Fatalf("second restore %+v, want kept from 10, 5 records", s)
	}
	if got, want := dumpTask(t, tk), l.replay(); got != want {
		t.Fatalf("kept store + tail:\n %s\nwant the full replay:\n %s", got, want)
	}
	// Closed and opened again (a restart in the same slot): still kept.
	m.Close()
	m, err = Open(Options{Dir: dir, Name: "s", Topic: "c", Changelog: l.read})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Restore(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if s := restoreStats(t, m, 0); s.RestoreKind != KindKept || s.RestoredRecords != 0 {
		t.Fatalf("restore after a restart %+v, want kept, 0 records", s)
	}
	m.Drop(0)
	// The topic deleted and created again: another id, a full restore.
	l.id = "T2"
	tk, err = m.Restore(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if s := restoreStats(t, m, 0); s.RestoreKind != KindFull || s.RestoredRecords != int64(len(l.recs)) {
		t.Fatalf("restore of another topic id %+v, want full", s)
	}
	if got, want := dumpTask(t, tk), l.replay(); got != want {
		t.Fatalf("full restore:\n %s\nwant:\n %s", got, want)
	}
	m.Close()
}

// TestStandbyCopyHandsOver: a follower's copy is current up to its Next;
// Restore releases it (Apply then returns ErrActive), reads only the tail
// ("standby"), and Follow refuses a task active here.
func TestStandbyCopyHandsOver(t *testing.T) {
	l := &fakeLog{id: "T1"}
	for i := 0; i < 6; i++ {
		l.append(fmt.Sprintf("k%d", i), "a")
	}
	m, err := Open(Options{Dir: t.TempDir(), Name: "s", Topic: "c", Changelog: l.read})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := m.Follow(1, ChangelogInfo{TopicID: "T1", End: 6})
	if err != nil {
		t.Fatal(err)
	}
	if c.Next() != 0 {
		t.Fatalf("a new copy's Next = %d, want 0", c.Next())
	}
	if err := c.Apply(l.recs[:4], 4); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Follow(1, ChangelogInfo{TopicID: "T1", End: 6}); err == nil {
		t.Fatal("a second Follow of a followed task succeeded")
	}
	l.append("k0", "")
	tk, err := m.Restore(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if s := restoreStats(t, m, 1); s.RestoreKind != KindStandby || s.RestoredFrom != 4 || s.RestoredRecords != 3 {
		t.Fatalf("restore over the copy %+v, want standby from 4, 3 records", s)
	}
	if got, want := dumpTask(t, tk), l.replay(); got != want {
		t.Fatalf("copy + tail:\n %s\nwant:\n %s", got, want)
	}
	if err := c.Apply(l.recs[4:5], 5); err != ErrActive {
		t.Fatalf("Apply after the take-over = %v, want ErrActive", err)
	}
	c.Close()
	if _, err := m.Follow(1, ChangelogInfo{TopicID: "T1", End: 7}); err != ErrActive {
		t.Fatalf("Follow of an active task = %v, want ErrActive", err)
	}
	// Dropped, it can be followed again, from its kept meta.
	m.Drop(1)
	c, err = m.Follow(1, ChangelogInfo{TopicID: "T1", End: 7})
	if err != nil {
		t.Fatal(err)
	}
	if c.Next() != 7 {
		t.Fatalf("the kept store's copy starts at %d, want 7", c.Next())
	}
	c.Close()
}

// TestCopyCloseRacesATakeOver: a follower closing its copy of a task (the
// group gave the task to this instance, so the follower no longer wants
// it) while the loop's goroutine restores the same task. The two come
// from one rebalance; the Restore must never open the directory while the
// copy still holds it (Pebble: "lock held by current process", which
// failed a SIGKILL handover in CI, stop 33).
func TestCopyCloseRacesATakeOver(t *testing.T) {
	l := &fakeLog{id: "T1"}
	for i := 0; i < 200; i++ {
		l.append(fmt.Sprintf("k%d", i), strings.Repeat("v", 100))
	}
	m, err := Open(Options{Dir: t.TempDir(), Name: "s", Topic: "c", Changelog: l.read})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := 0; i < 50; i++ {
		c, err := m.Follow(1, ChangelogInfo{TopicID: "T1", End: int64(len(l.recs))})
		if err != nil {
			t.Fatalf("round %d: Follow: %v", i, err)
		}
		if err := c.Apply(l.recs[c.Next():], int64(len(l.recs))); err != nil {
			t.Fatalf("round %d: Apply: %v", i, err)
		}
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		// Restore once the follower has begun to close (the copy is
		// no longer listed), as the rebalance's two sides meet.
		for listed := true; listed; {
			m.keep.Lock()
			listed = m.keep.copies[1] != nil
			m.keep.Unlock()
		}
		if _, err := m.Restore(context.Background(), 1); err != nil {
			t.Fatalf("round %d: Restore while the follower closes its copy: %v", i, err)
		}
		<-closed
		m.Drop(1)
		l.append(fmt.Sprintf("k%d", i), "w")
	}
}

// TestOpenKeptLeavesALockedStoreAlone: a task directory whose Pebble lock
// is held (a database open on it) is in use, not a crash's leftovers:
// Restore fails naming it, and removes nothing.
func TestOpenKeptLeavesALockedStoreAlone(t *testing.T) {
	l := &fakeLog{id: "T1"}
	l.append("k", "v")
	m, err := Open(Options{Dir: t.TempDir(), Name: "s", Topic: "c", Changelog: l.read})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := m.taskDir(1)
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Set([]byte("held"), []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_, err = m.Restore(context.Background(), 1)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Restore of a locked store = %v, want an error saying it is in use", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "LOCK")); serr != nil {
		t.Fatalf("the locked store's directory was removed: %v", serr)
	}
	if _, err := m.Follow(1, ChangelogInfo{TopicID: "T1", End: 1}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Follow of a locked store = %v, want an error saying it is in use", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "LOCK")); serr != nil {
		t.Fatalf("the locked store's directory was removed: %v", serr)
	}
}

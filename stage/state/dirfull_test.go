package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestStateDirFullFailsPrepare: once the state directory's disk is full
// (every write of a table file fails with ENOSPC, as on a full tmpfs), a
// later Prepare fails with ErrStateDir naming the directory and the
// file system's error, before anything reaches the changelog, and no call
// blocks. Before, the flushes failed and were retried in the background
// with only a warning, the memtables filled, and Committed blocked for
// ever (on an 8 MiB tmpfs: at the 42nd attempt of 1 MB).
func TestStateDirFullFailsPrepare(t *testing.T) {
	var full atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpFileWrite && strings.HasSuffix(op.Path, ".sst") {
			return &fs.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})
	dir := t.TempDir()
	m, err := Open(Options{Dir: dir, Name: "s", Topic: "s-changelog", NoRestore: true, FS: errorfs.Wrap(vfs.Default, inj)})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := m.Restore(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	within := func(what string, f func() error) error {
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s blocked 20 s", what)
			return nil
		}
	}
	val := make([]byte, 1000)
	var records int
	for a := 0; a < 200; a++ {
		if a == 5 {
			full.Store(true)
		}
		for i := 0; i < 1000; i++ {
			must(t, tk.Set([]byte(fmt.Sprintf("k%03d-%04d", a, i)), val))
		}
		err := within("Prepare", func() error {
			return m.Prepare(func(string, int32, []byte, []byte) error { records++; return nil })
		})
		if err != nil {
			if !errors.Is(err, ErrStateDir) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("attempt %d: Prepare: %v; want ErrStateDir naming %s and ENOSPC", a, err, dir)
			}
			if a <= 5 {
				t.Fatalf("attempt %d: Prepare failed before the disk was full: %v", a, err)
			}
			if n := 1000 * a; records != n {
				t.Fatalf("%d changelog records written, want %d: the failed attempt wrote some", records, n)
			}
			m.Aborted(nil)
			t.Logf("attempt %d (the disk full since attempt 5): %v", a, err)
			if err := within("Close", func() error { m.Close(); return nil }); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := within("Committed", m.Committed); err != nil {
			t.Fatalf("attempt %d: Committed: %v", a, err)
		}
	}
	t.Fatal("200 attempts of 1 MB with the disk full from the 5th, and Prepare never failed")
}

// TestStateDirFailingLateFailsCommitted: the directory's first failure
// comes after the attempt's Prepare (a flush slow to fail: the test holds
// the first failing table write until Committed waits for room): Committed
// returns ErrStateDir naming the directory within seconds of the failure,
// and Close returns. Before, Committed waited for ever for a flush that
// never succeeds (seen on a loaded machine in
// TestStateDirFullFailsPrepare: "Committed blocked 20 s").
func TestStateDirFailingLateFailsCommitted(t *testing.T) {
	var full atomic.Bool
	release := make(chan struct{})
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpFileWrite && strings.HasSuffix(op.Path, ".sst") {
			<-release
			return &fs.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})
	// Not t.TempDir: the left-open store's flush retries write in it
	// until the process exits, and TempDir's cleanup fails on that.
	dir, err := os.MkdirTemp("", "statedir-late-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var m *Manager
	m, err = Open(Options{Dir: dir, Name: "s", Topic: "s-changelog", NoRestore: true, FS: errorfs.Wrap(vfs.Default, inj)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	tk, err := m.Restore(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	val := make([]byte, 1000)
	for a := 0; a < 500; a++ {
		for i := 0; i < 1000; i++ {
			must(t, tk.Set([]byte(fmt.Sprintf("k%03d-%04d", a, i)), val))
		}
		if err := m.Prepare(func(string, int32, []byte, []byte) error { return nil }); err != nil {
			t.Fatalf("attempt %d: Prepare failed before the directory did: %v", a, err)
		}
		done := make(chan error, 1)
		go func() { done <- m.Committed() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("attempt %d: Committed failed before the directory did: %v", a, err)
			}
			continue
		case <-time.After(2 * time.Second):
		}
		// Committed waits for room: the flush now fails.
		failedAt := time.Now()
		close(release)
		select {
		case err := <-done:
			if !errors.Is(err, ErrStateDir) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("attempt %d: Committed: %v; want ErrStateDir naming %s and ENOSPC", a, err, dir)
			}
			t.Logf("attempt %d: Committed returned %v after the failure: %v", a, time.Since(failedAt).Round(time.Millisecond), err)
		case <-time.After(20 * time.Second):
			t.Fatalf("attempt %d: Committed blocked 20 s after the directory failed", a)
		}
		closed := make(chan struct{})
		go func() { m.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(20 * time.Second):
			t.Fatal("Close blocked 20 s")
		}
		return
	}
	t.Fatal("500 attempts of 1 MB and Committed never waited for a flush")
}

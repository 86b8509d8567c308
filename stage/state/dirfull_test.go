package state

import (
	"errors"
	"fmt"
	"io/fs"
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

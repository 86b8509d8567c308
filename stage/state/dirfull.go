package state

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// This file is what a Manager does when its state directory cannot be
// written (issue 23: a --state_dir that fills up). A task's database has
// no write-ahead log, so a commit only fills its memtable and the disk is
// written in the background, by Pebble's flushes and compactions: when
// they fail, Pebble logs the error and tries again, the memtables fill,
// and the next commit waits for a flush that never comes (measured on an
// 8 MiB tmpfs: Committed blocked at the 42nd attempt of 1 MB, with only
// "pebble: background error" warnings). The Manager records the first
// such error and fails what comes next with ErrStateDir: Prepare, before
// the attempt's transaction commits, so nothing is committed that the
// store did not take; and a restore, between its batches.

// ErrStateDir: a task's store could not write its files in the state
// directory (the disk is full, a quota is reached, the file system is
// read-only: Options.Dir, the runner's --state_dir). The error names the
// directory and the file system's error. Not retryable in this instance:
// its stage fails (a restart of the clients would meet the same disk), the
// attempt's transaction is aborted, and the tasks move to another
// instance, which restores them from their changelogs. Free space there,
// or give --state_dir a larger disk, and start the instance again.
var ErrStateDir = errors.New("state: the state directory cannot be written")

// dirHealth is the first file system error of a Manager's databases'
// background work (flushes, compactions), set from Pebble's goroutines.
type dirHealth struct {
	mu     sync.Mutex
	err    error
	logged time.Time
}

// backgroundError is the Manager's pebble.EventListener.BackgroundError:
// it records err if it is the file system's (fs.PathError, an errno), and
// logs every error at most once every 10 s (Pebble retries a failed flush
// at once and reports each retry).
func (m *Manager) backgroundError(err error) {
	var pe *fs.PathError
	var errno syscall.Errno
	isFS := errors.As(err, &pe) || errors.As(err, &errno)
	m.dir.mu.Lock()
	if isFS && m.dir.err == nil {
		m.dir.err = err
	}
	now := time.Now()
	logIt := now.Sub(m.dir.logged) >= 10*time.Second
	if logIt {
		m.dir.logged = now
	}
	m.dir.mu.Unlock()
	if logIt {
		m.log.Error("state: a task store's background write failed (logged at most every 10 s)", "dir", m.base, "err", err)
	}
}

// dirErr returns ErrStateDir naming the directory and the first file
// system error of the Manager's databases, or nil if there was none.
func (m *Manager) dirErr() error {
	m.dir.mu.Lock()
	defer m.dir.mu.Unlock()
	if m.dir.err == nil {
		return nil
	}
	return fmt.Errorf("%w: stage %s: %s: %w (a task store could not flush its writes to disk: free space there or point --state_dir at a larger disk; the tasks' state is safe in their changelogs)", ErrStateDir, m.opts.Name, m.base, m.dir.err)
}

// openErr wraps an error of pebble.Open in dir: ErrStateDir too if it is
// the file system's (the directory could not be made or written).
func openErr(dir string, err error) error {
	var pe *fs.PathError
	var errno syscall.Errno
	if errors.As(err, &pe) || errors.As(err, &errno) {
		return fmt.Errorf("%w: open %s: %w", ErrStateDir, dir, err)
	}
	return fmt.Errorf("open %s: %w", dir, err)
}

// eventListener is the Manager's databases' pebble.EventListener.
func (m *Manager) eventListener() *pebble.EventListener {
	return &pebble.EventListener{BackgroundError: m.backgroundError}
}

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
// store did not take; a restore, between its batches; and Committed, if
// its writes wait for room once the directory has failed (the failure
// can come after the attempt's Prepare: seen under load, Committed
// blocked in the unit test).

// wedgeWait is how long Committed still waits for its writes after the
// directory failed: writes that need no flush apply in microseconds.
const wedgeWait = time.Second

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
	// failed is closed when err is set (failedCh makes it).
	failed chan struct{}
	// wedged says a Committed returned while a database's commit was
	// still waiting for room that a failing flush never makes: Close
	// leaves the databases open (closing one would wait for that commit).
	wedged bool
}

// failedCh is the channel closed once the directory has failed.
func (m *Manager) failedCh() <-chan struct{} {
	m.dir.mu.Lock()
	defer m.dir.mu.Unlock()
	if m.dir.failed == nil {
		m.dir.failed = make(chan struct{})
		if m.dir.err != nil {
			close(m.dir.failed)
		}
	}
	return m.dir.failed
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
		if m.dir.failed != nil {
			close(m.dir.failed)
		}
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

// commitBatch commits b (pebble.NoSync) and closes it. A commit waits for
// memtable room while a flush is due, and a flush that fails never makes
// it: once the directory has failed and the commit has not returned
// within wedgeWait, commitBatch returns ErrStateDir and leaves b and its
// database to the process's exit (dirHealth.wedged: Close does not close
// them). Every write of the Manager's databases goes through it:
// Committed, a restore's batches, a standby copy's Apply.
func (m *Manager) commitBatch(b *pebble.Batch) error {
	done := make(chan error, 1)
	go func() {
		err := b.Commit(pebble.NoSync)
		_ = b.Close()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-m.failedCh():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(wedgeWait):
		m.dir.mu.Lock()
		m.dir.wedged = true
		m.dir.mu.Unlock()
		return m.dirErr()
	}
}

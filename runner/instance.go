package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxSlots bounds the instances of one application that share one state
// directory (one machine, as a rule).
const maxSlots = 1024

// instance is this process's place in an application on this machine: a
// slot under the state directory, held with an exclusive flock(2) while the
// process runs, and the identity stored in it.
//
// The slot is what Kafka Streams keeps in its state directory (the process
// id) and for the same reason: the transactional ids of this instance's
// stages are "<application_id>-<stage>-<ID>", so a copy restarted after a
// SIGKILL, which takes the slot the kernel released, uses its
// predecessor's transactional ids, and its InitTransactions aborts the
// transactions the killed copy left open at once and fences it. With a
// fresh id every start, those transactions stay open until the broker
// times them out (transaction.timeout.ms, checked every 10 s), holding
// back every read_committed reader of the partitions they wrote.
//
// Layout: <state_dir>/<application_id>/instance-<slot>.lock (the lock) and
// instance-<slot>/ with "id" (the identity, written once) and "stores/"
// (the task state stores, which a new holder empties: a task's store is
// always restored from its changelog).
type instance struct {
	// Slot is the lowest free slot number when the process started, in
	// [0, maxSlots).
	Slot int
	// ID is the slot's identity: "<host>-<slot>-<12 hex digits>", created
	// by the slot's first holder and kept by every later one.
	ID string
	// Stores is the directory for this instance's task state stores.
	Stores string
	// Reused is true when the slot had an ID already (a previous instance
	// held it: this one takes over its transactional ids).
	Reused bool

	lock *os.File
}

// claimInstance takes the lowest free slot of application appID under
// stateDir (default: os.TempDir()/kafkastreams-state) and returns it; the
// caller releases it when the job ends. The state directory must be a
// local file system (flock(2) across machines is not relied on). Errors
// name the path; every slot taken is ErrNoSlot.
func claimInstance(stateDir, appID string) (*instance, error) {
	if stateDir == "" {
		stateDir = filepath.Join(os.TempDir(), "kafkastreams-state")
	}
	appDir := filepath.Join(stateDir, appID)
	if err := os.MkdirAll(appDir, 0o755); err != nil {
		return nil, fmt.Errorf("kafkastreams: state directory: %w", err)
	}
	for slot := 0; slot < maxSlots; slot++ {
		path := filepath.Join(appDir, fmt.Sprintf("instance-%d.lock", slot))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("kafkastreams: state directory: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another running instance holds it
			}
			return nil, fmt.Errorf("kafkastreams: lock %s: %w", path, err)
		}
		in, err := takeSlot(f, filepath.Join(appDir, fmt.Sprintf("instance-%d", slot)), slot)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		return in, nil
	}
	return nil, fmt.Errorf("%w: %d instances of %s already run with state directory %s", ErrNoSlot, maxSlots, appID, stateDir)
}

// ErrNoSlot: every instance slot of the application in the state
// directory is held by a running process.
var ErrNoSlot = errors.New("kafkastreams: no free instance slot")

func takeSlot(lock *os.File, dir string, slot int) (*instance, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafkastreams: instance slot: %w", err)
	}
	in := &instance{Slot: slot, Stores: filepath.Join(dir, "stores"), lock: lock}
	idPath := filepath.Join(dir, "id")
	b, err := os.ReadFile(idPath)
	switch {
	case err == nil && validID(strings.TrimSpace(string(b))):
		in.ID, in.Reused = strings.TrimSpace(string(b)), true
	case err == nil || errors.Is(err, os.ErrNotExist):
		// No identity yet (or a torn one from a crash mid-write): make it.
		in.ID = newID(slot)
		tmp := idPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(in.ID+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("kafkastreams: instance slot: %w", err)
		}
		if err := os.Rename(tmp, idPath); err != nil {
			return nil, fmt.Errorf("kafkastreams: instance slot: %w", err)
		}
	default:
		return nil, fmt.Errorf("kafkastreams: instance slot: %w", err)
	}
	// Stores a killed holder left behind: never read (a task restores from
	// its changelog), only disk.
	if err := os.RemoveAll(in.Stores); err != nil {
		return nil, fmt.Errorf("kafkastreams: clearing %s: %w", in.Stores, err)
	}
	return in, nil
}

// validID: what newID makes (a transactional id must not be empty or
// carry whitespace).
func validID(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n") && len(s) < 200
}

func newID(slot int) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	return host + "-" + strconv.Itoa(slot) + "-" + hex.EncodeToString(b)
}

// release gives the slot back (closing the file drops the flock).
func (in *instance) release() {
	if in != nil && in.lock != nil {
		_ = in.lock.Close()
		in.lock = nil
	}
}

// logAttrs describes the slot for the start-up log.
func (in *instance) logAttrs() []any {
	return []any{slog.Int("slot", in.Slot), slog.String("instance_id", in.ID), slog.Bool("reused", in.Reused), slog.String("stores", in.Stores)}
}

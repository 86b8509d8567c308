package runner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestInstanceSlots(t *testing.T) {
	dir := t.TempDir()
	a, err := claimInstance(dir, "app")
	if err != nil {
		t.Fatal(err)
	}
	b, err := claimInstance(dir, "app")
	if err != nil {
		t.Fatal(err)
	}
	if a.Slot != 0 || b.Slot != 1 || a.ID == b.ID || a.Reused || b.Reused {
		t.Fatalf("two running instances: slots %d, %d, ids %s, %s, reused %v %v; want slots 0 and 1, distinct new ids", a.Slot, b.Slot, a.ID, b.ID, a.Reused, b.Reused)
	}
	other, err := claimInstance(dir, "other-app")
	if err != nil {
		t.Fatal(err)
	}
	if other.Slot != 0 {
		t.Errorf("another application's first slot is %d, want 0 (slots are per application)", other.Slot)
	}
	other.release()

	// A store left behind by slot 0's holder (killed: nothing removed it).
	left := filepath.Join(a.Stores, "s4-CoGBK", "0-abcd", "MANIFEST")
	if err := os.MkdirAll(filepath.Dir(left), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(left, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.release()

	// A restart takes the lowest free slot, 0, with its identity.
	c, err := claimInstance(dir, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer c.release()
	defer b.release()
	if c.Slot != 0 || c.ID != a.ID || !c.Reused {
		t.Fatalf("restart: slot %d id %s reused %v; want slot 0, id %s, reused", c.Slot, c.ID, c.Reused, a.ID)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the predecessor's store is still there (stat: %v)", err)
	}

	// A torn identity file (a crash mid-write) gets a new identity.
	b.release()
	if err := os.WriteFile(filepath.Join(dir, "app", "instance-1", "id"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := claimInstance(dir, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer d.release()
	if d.Slot != 1 || d.Reused || !validID(d.ID) || d.ID == b.ID {
		t.Errorf("torn id file: slot %d id %q reused %v; want slot 1 with a new id", d.Slot, d.ID, d.Reused)
	}
}

func TestInstanceSlotBadStateDir(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := claimInstance(f, "app"); err == nil {
		t.Fatal("a state directory that is a file was accepted")
	}
}

package state

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
)

// TestPrepareLastWritePerKey: Prepare writes, per task in partition order,
// each key written in the attempt once, in key order, with its last value:
// a deletion as a nil value (a tombstone), an empty value as an empty,
// non-nil one; a deletion of a key set in the attempt that the committed
// store lacks is left out (one only deleted keeps its tombstone).
// Checked against a map of last writes and a model of the committed store
// over random attempts (keys overwritten and deleted in any order; every
// other attempt committed, the rest aborted); and the changelog records of
// the committed attempts, replayed in order, give the committed store.
// Pending, before Prepare, counts the attempt's writes.
func TestPrepareLastWritePerKey(t *testing.T) {
	m, err := Open(Options{Dir: t.TempDir(), Name: "s", Topic: "s-changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rng := rand.New(rand.NewSource(7))
	committed := map[int32]map[string][]byte{0: {}, 2: {}} // the model
	replayed := map[int32]map[string][]byte{0: {}, 2: {}}  // the changelog's state
	for p := range committed {
		if _, err := m.Restore(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	for attempt := 0; attempt < 40; attempt++ {
		want := map[int32]map[string][]byte{}
		setIn := map[int32]map[string]bool{} // keys set in this attempt
		for _, p := range []int32{2, 0} {
			tk := m.Task(p)
			want[p] = map[string][]byte{}
			setIn[p] = map[string]bool{}
			for i := 0; i < 200; i++ {
				k := fmt.Sprintf("k%02d", rng.Intn(30))
				switch rng.Intn(4) {
				case 0:
					must(t, tk.Delete([]byte(k)))
					want[p][k] = nil
				case 1:
					must(t, tk.Set([]byte(k), nil))
					want[p][k] = []byte{}
					setIn[p][k] = true
				default:
					v := []byte(fmt.Sprint(p, "-", i))
					must(t, tk.Set([]byte(k), v))
					want[p][k] = v
					setIn[p][k] = true
				}
			}
		}
		var got, exp []string
		type record struct {
			p int32
			k string
			v []byte
		}
		var records []record
		rec := func(p int32, k string, v []byte) string {
			switch {
			case v == nil:
				return fmt.Sprintf("%d:%s tombstone", p, k)
			case len(v) == 0:
				return fmt.Sprintf("%d:%s empty", p, k)
			}
			return fmt.Sprintf("%d:%s=%s", p, k, v)
		}
		// Pending counts every write of the attempt (200 a task): at
		// least the records Prepare makes, a caller's capacity for them.
		pending := m.Pending()
		if pending != 400 {
			t.Fatalf("attempt %d: Pending %d, want the attempt's 400 writes", attempt, pending)
		}
		must(t, m.Prepare(func(topic string, p int32, k, v []byte) error {
			if topic != "s-changelog" {
				t.Fatalf("topic %s", topic)
			}
			got = append(got, rec(p, string(k), v))
			r := record{p: p, k: string(k)}
			if v != nil {
				r.v = append([]byte{}, v...)
			}
			records = append(records, r)
			return nil
		}))
		for _, p := range []int32{0, 2} {
			keys := make([]string, 0, len(want[p]))
			for k := range want[p] {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if _, had := committed[p][k]; want[p][k] == nil && !had && setIn[p][k] {
					continue // set and deleted in this attempt
				}
				exp = append(exp, rec(p, k, want[p][k]))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Fatalf("attempt %d: changelog records\n%v\nwant\n%v", attempt, got, exp)
		}
		if len(got) > pending {
			t.Fatalf("attempt %d: Prepare made %d records, Pending said %d", attempt, len(got), pending)
		}
		if attempt%2 == 1 {
			m.Aborted(nil)
			continue
		}
		must(t, m.Committed())
		for p, w := range want {
			for k, v := range w {
				if v == nil {
					delete(committed[p], k)
				} else {
					committed[p][k] = v
				}
			}
		}
		for _, r := range records {
			if r.v == nil {
				delete(replayed[r.p], r.k)
			} else {
				replayed[r.p][r.k] = r.v
			}
		}
		for p := range committed {
			if fmt.Sprint(replayed[p]) != fmt.Sprint(committed[p]) {
				t.Fatalf("attempt %d: task %d: the changelog replayed gives\n%v\nthe committed store is\n%v", attempt, p, replayed[p], committed[p])
			}
			for k, v := range committed[p] {
				got, ok, err := m.Task(p).Get([]byte(k))
				must(t, err)
				if !ok || string(got) != string(v) {
					t.Fatalf("attempt %d: task %d: store has %s=%q (%v), the model %q", attempt, p, k, got, ok, v)
				}
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPrepareDeletionsOfCommittedKeysLookNothingUp: an attempt that only
// deletes keys (a GroupByKey firing values written in earlier attempts)
// writes a tombstone for each without a look-up in the committed store;
// only a key set and then deleted in the attempt is looked up. A Pebble Get
// per fired value cost the GroupByKey stage benchmark a third of its rate
// (b8e179b).
func TestPrepareDeletionsOfCommittedKeysLookNothingUp(t *testing.T) {
	m, err := Open(Options{Dir: t.TempDir(), Name: "s", Topic: "s-changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tk, err := m.Restore(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	count := func() (records, tombstones int) {
		must(t, m.Prepare(func(_ string, _ int32, _, v []byte) error {
			records++
			if v == nil {
				tombstones++
			}
			return nil
		}))
		return records, tombstones
	}
	for i := 0; i < 1000; i++ {
		must(t, tk.Set([]byte(fmt.Sprintf("v%04d", i)), []byte("x")))
	}
	count()
	must(t, m.Committed())
	for i := 0; i < 1000; i++ {
		must(t, tk.Delete([]byte(fmt.Sprintf("v%04d", i))))
	}
	must(t, tk.Set([]byte("new"), []byte("y")))
	must(t, tk.Delete([]byte("new")))
	before := tk.lookups
	if r, ts := count(); r != 1000 || ts != 1000 {
		t.Fatalf("%d changelog records, %d tombstones; want 1000 tombstones (the key set and deleted in the attempt left out)", r, ts)
	}
	if n := tk.lookups - before; n != 1 {
		t.Fatalf("Prepare looked up %d keys in the committed store; want 1 (the key set and deleted in the attempt)", n)
	}
}

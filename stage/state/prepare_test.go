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
// non-nil one. Checked against a map of last writes over random attempts
// (keys overwritten and deleted in any order).
func TestPrepareLastWritePerKey(t *testing.T) {
	m, err := Open(Options{Dir: t.TempDir(), Name: "s", Topic: "s-changelog", NoRestore: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rng := rand.New(rand.NewSource(7))
	for attempt := 0; attempt < 20; attempt++ {
		want := map[int32]map[string][]byte{}
		for _, p := range []int32{2, 0} {
			tk, err := m.Restore(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			want[p] = map[string][]byte{}
			for i := 0; i < 200; i++ {
				k := fmt.Sprintf("k%02d", rng.Intn(30))
				switch rng.Intn(4) {
				case 0:
					must(t, tk.Delete([]byte(k)))
					want[p][k] = nil
				case 1:
					must(t, tk.Set([]byte(k), nil))
					want[p][k] = []byte{}
				default:
					v := []byte(fmt.Sprint(p, "-", i))
					must(t, tk.Set([]byte(k), v))
					want[p][k] = v
				}
			}
		}
		var got, exp []string
		rec := func(p int32, k string, v []byte) string {
			switch {
			case v == nil:
				return fmt.Sprintf("%d:%s tombstone", p, k)
			case len(v) == 0:
				return fmt.Sprintf("%d:%s empty", p, k)
			}
			return fmt.Sprintf("%d:%s=%s", p, k, v)
		}
		must(t, m.Prepare(func(topic string, p int32, k, v []byte) error {
			if topic != "s-changelog" {
				t.Fatalf("topic %s", topic)
			}
			got = append(got, rec(p, string(k), v))
			return nil
		}))
		for _, p := range []int32{0, 2} {
			keys := make([]string, 0, len(want[p]))
			for k := range want[p] {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				exp = append(exp, rec(p, k, want[p][k]))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Fatalf("attempt %d: changelog records\n%v\nwant\n%v", attempt, got, exp)
		}
		m.Aborted(nil)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package standby

import (
	"fmt"
	"testing"
)

// TestStandbys: a member keeps copies of the tasks of the n members after
// it in client.id order, wrapping around, never its own nor itself's.
func TestStandbys(t *testing.T) {
	ms := []Member{{"app-2", []int32{2, 5}}, {"app-0", []int32{0, 3}}, {"app-1", []int32{1, 4}}}
	for _, c := range []struct {
		self string
		n    int
		want string
	}{
		{"app-0", 1, "[1 4]"},
		{"app-1", 1, "[2 5]"},
		{"app-2", 1, "[0 3]"}, // wraps around
		{"app-0", 2, "[1 2 4 5]"},
		{"app-0", 5, "[1 2 4 5]"}, // never itself
		{"app-0", 0, "[]"},
		{"app-9", 1, "[]"}, // not (yet) a member
	} {
		if got := fmt.Sprint(Standbys(ms, c.self, c.n)); got != c.want {
			t.Errorf("Standbys(%s, %d) = %s, want %s", c.self, c.n, got, c.want)
		}
	}
	// Two instances: each keeps the other's tasks; a task moving between
	// descriptions is never its own copy.
	two := []Member{{"a", []int32{0, 1}}, {"b", []int32{2, 3, 1}}}
	if got := fmt.Sprint(Standbys(two, "a", 1)); got != "[2 3]" {
		t.Errorf("two members: a keeps %s, want [2 3]", got)
	}
	if got := ClientID("", "slot-1"); got != "kafkastreams-slot-1" {
		t.Errorf("ClientID = %s", got)
	}
}

// TestDeparted: a member is fenced once it has been missing from two
// descriptions in a row, once; one back in the group before is not;
// this instance never is.
func TestDeparted(t *testing.T) {
	f := &follower{cfg: Config{ClientID: "a"}}
	desc := func(ids ...string) string {
		var ms []Member
		for _, id := range ids {
			ms = append(ms, Member{ClientID: id})
		}
		return fmt.Sprint(f.departed(ms))
	}
	for i, c := range []struct {
		members []string
		want    string
	}{
		{[]string{"a", "b", "c"}, "[]"},
		{[]string{"a", "c"}, "[]"},      // b missing once
		{[]string{"a", "b", "c"}, "[]"}, // b back: a client restart
		{[]string{"a"}, "[]"},           // b, c missing once
		{[]string{"a"}, "[b c]"},        // twice: fenced
		{[]string{"a"}, "[]"},           // once only
		{[]string{"b"}, "[]"},           // b back, a (this instance) missing
		{[]string{}, "[]"},
		{[]string{}, "[b]"},
	} {
		if got := desc(c.members...); got != c.want {
			t.Errorf("description %d %v: fence %s, want %s", i, c.members, got, c.want)
		}
	}
}

package stage

import (
	"errors"
	"strings"
	"testing"
)

// TestTopicWatch: a topic seen with an id and then missing twice in a row,
// or answered with another id, is gone (ErrTopicGone, naming it); one
// missing once between answers with its id, or missing before it was
// ever seen (just created, not in the metadata yet), is not.
func TestTopicWatch(t *testing.T) {
	type answer struct {
		id      string
		missing bool
	}
	for _, tc := range []struct {
		name    string
		answers []answer
		want    string // "" : never gone
	}{
		{"steady", []answer{{id: "A"}, {id: "A"}, {id: "A"}}, ""},
		{"missing before seen", []answer{{missing: true}, {missing: true}, {missing: true}, {id: "A"}, {id: "A"}}, ""},
		{"one stale answer", []answer{{id: "A"}, {missing: true}, {id: "A"}, {missing: true}, {id: "A"}}, ""},
		{"deleted", []answer{{id: "A"}, {missing: true}, {missing: true}}, "topic t (id A) no longer exists"},
		{"created again", []answer{{id: "A"}, {id: "B"}}, "topic t was deleted and created again (id A, now B)"},
		{"created again after a gap", []answer{{id: "A"}, {missing: true}, {id: "B"}}, "created again (id A, now B)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w topicWatch
			var gone error
			for i, a := range tc.answers {
				if gone = w.observe("t", a.id, a.missing); gone != nil {
					if i != len(tc.answers)-1 {
						t.Fatalf("gone at answer %d of %d: %v", i+1, len(tc.answers), gone)
					}
					break
				}
			}
			switch {
			case tc.want == "" && gone != nil:
				t.Fatalf("gone: %v", gone)
			case tc.want != "" && (!errors.Is(gone, ErrTopicGone) || !strings.Contains(gone.Error(), tc.want)):
				t.Fatalf("got %v, want ErrTopicGone with %q", gone, tc.want)
			}
		})
	}
}

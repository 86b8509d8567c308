package stage

import (
	"errors"
	"strings"
	"testing"
)

// TestJudgeOutOfRange: an out-of-range fetch is data lost only when the
// group's committed offset (the authority) is below the log start; a
// position this instance holds below it while the group committed past it
// is stale (its tasks moved and their new owner purged what it consumed:
// make soak's "committed offset 3970 is below the log start 3974" on an
// instance whose tasks were lost, the group at 3974), and so is one it
// could not judge. Before, outOfRange judged by the instance's own view
// (Loop.next) and every out-of-range fetch failed the job.
func TestJudgeOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name        string
		parts       []rangeCheck
		lost, stale []string
	}{
		{name: "the group moved past: stale",
			parts: []rangeCheck{{Partition: 0, Next: 3970, LogStart: 3974, Committed: 3974}, {Partition: 1, Next: 4424, LogStart: 4428, Committed: 4430}},
			stale: []string{"partition 0: this instance at 3970, the group committed 3974, log start 3974", "partition 1: this instance at 4424, the group committed 4430, log start 4428"}},
		{name: "committed below the log start: lost",
			parts: []rangeCheck{{Partition: 2, Next: 10, LogStart: 25, Committed: 10}},
			lost:  []string{"partition 2: committed offset 10 is below the log start 25 (offsets 10 to 24 deleted unread)"}},
		{name: "nothing committed, records deleted: lost from 0",
			parts: []rangeCheck{{Partition: 0, Next: 0, LogStart: 5, Committed: 0}},
			lost:  []string{"partition 0: committed offset 0 is below the log start 5 (offsets 0 to 4 deleted unread)"}},
		{name: "one lost, one stale",
			parts: []rangeCheck{{Partition: 0, Next: 3, LogStart: 9, Committed: 9}, {Partition: 1, Next: 3, LogStart: 9, Committed: 4}},
			lost:  []string{"partition 1: committed offset 4 is below the log start 9 (offsets 4 to 8 deleted unread)"},
			stale: []string{"partition 0: this instance at 3, the group committed 9, log start 9"}},
		{name: "not judged",
			parts: []rangeCheck{{Partition: 0, Next: 3, LogStart: 9, Committed: -1, Err: errors.New("committed offsets: timed out")}},
			stale: []string{"partition 0 at offset 3: not judged: committed offsets: timed out"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost, stale := judgeOutOfRange(tc.parts)
			if strings.Join(lost, "|") != strings.Join(tc.lost, "|") || strings.Join(stale, "|") != strings.Join(tc.stale, "|") {
				t.Fatalf("judgeOutOfRange(%+v) = lost %q, stale %q; want lost %q, stale %q", tc.parts, lost, stale, tc.lost, tc.stale)
			}
		})
	}
}

package recordtime

import (
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// TestFor: an event time Kafka takes is the record's
// timestamp; one at or before the epoch, too far ahead of the topic's
// limit or past 2262 is left to the producer (the time of writing), and
// the last two are reported ahead.
func TestFor(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ms := func(t time.Time) mtime.Time { return mtime.FromTime(t) }
	for _, c := range []struct {
		name      string
		ts        mtime.Time
		afterMax  time.Duration
		wantKept  bool
		wantAhead bool
	}{
		{"now", ms(now), time.Hour, true, false},
		{"an hour ago", ms(now.Add(-time.Hour)), time.Hour, true, false},
		{"1 ms after the epoch", 1, time.Hour, true, false},
		{"the epoch", 0, time.Hour, false, false},
		{"Beam's start of time", mtime.MinTimestamp, time.Hour, false, false},
		{"58 min ahead, limit 1 h", ms(now.Add(58 * time.Minute)), time.Hour, true, false},
		{"59 min ahead + 1 ms, limit 1 h", ms(now.Add(59*time.Minute)) + 1, time.Hour, false, true},
		{"a day ahead, limit 1 h", ms(now.Add(24 * time.Hour)), time.Hour, false, true},
		{"a day ahead, no limit", ms(now.Add(24 * time.Hour)), NoTimestampLimit, true, false},
		{"limit 0: now is kept", ms(now), 0, true, false},
		{"limit 0: 1 ms ahead", ms(now) + 1, 0, false, true},
		{"limit 10 s: 4 s ahead", ms(now.Add(4 * time.Second)), 10 * time.Second, true, false},
		{"limit 10 s: 6 s ahead", ms(now.Add(6 * time.Second)), 10 * time.Second, false, true},
		{"2262, no limit", maxClientTimestamp, NoTimestampLimit, true, false},
		{"past 2262, no limit", maxClientTimestamp + 1, NoTimestampLimit, false, true},
		{"the end of the global window", mtime.EndOfGlobalWindowTime, NoTimestampLimit, false, true},
		{"the end of time", mtime.MaxTimestamp, time.Hour, false, true},
	} {
		got, ahead := For(c.ts, now, c.afterMax)
		if kept := !got.IsZero(); kept != c.wantKept || ahead != c.wantAhead {
			t.Errorf("%s: For(%d) = %v, ahead %v; want kept %v, ahead %v", c.name, c.ts, got, ahead, c.wantKept, c.wantAhead)
			continue
		}
		if c.wantKept && got.UnixNano()/int64(time.Millisecond) != int64(c.ts) {
			t.Errorf("%s: For(%d) = %v: the client would send %d ms", c.name, c.ts, got, got.UnixNano()/int64(time.Millisecond))
		}
	}
}

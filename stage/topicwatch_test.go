package stage

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kafkastreams/kafkastreams/stage/step"
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

// TestWatchedTopicsAreEveryTopicWritten: the loop watches every topic a
// transaction of it may hold records of, not only its input, outputs and
// sinks: the report topic, the dead-letter topic under
// ErrorPolicyDeadLetter, and Config.WrittenTopics (the changelog, the
// metrics topic). Before, a deleted dead-letter topic was not noticed and
// the stage's commits waited for its records for txnCallTimeout.
func TestWatchedTopicsAreEveryTopicWritten(t *testing.T) {
	l := &Loop{cfg: Config{
		Spec: step.Spec{InputTopic: "in", Outputs: []step.Output{{Topics: []step.OutputTopic{{Name: "a-s2"}, {Name: "in"}}}},
			Sinks: []step.Sink{{Topic: "out"}}},
		ReportTopic: "a-watermarks", ErrorPolicy: ErrorPolicyDeadLetter, DeadLetterTopic: "a.dead-letters",
		WrittenTopics: []string{"a-metrics", "a-s1-changelog"},
	}}
	want := "a-metrics a-s1-changelog a-s2 a-watermarks a.dead-letters in out"
	if got := strings.Join(l.watchedTopics(), " "); got != want {
		t.Errorf("watched %q, want %q", got, want)
	}
	l.cfg.ErrorPolicy = ErrorPolicyFail
	if got := strings.Join(l.watchedTopics(), " "); strings.Contains(got, "dead-letters") {
		t.Errorf("watched %q under --error_policy=fail: the dead-letter topic is not written", got)
	}
}

// TestCallWithinEndsWhenATopicIsGone: a transaction call that waits (a
// CommitTransaction holding records of a deleted topic, which librdkafka
// retries until the call's 30 s timeout) returns as soon as watchTopics
// finds a topic gone, with its ErrTopicGone error, and the producer is
// abandoned (never closed, never aborted: the call is still under way).
func TestCallWithinEndsWhenATopicIsGone(t *testing.T) {
	l := &Loop{cfg: Config{Spec: step.Spec{Name: "s1"}}, gone: make(chan struct{})}
	release := make(chan struct{})
	defer close(release)
	go func() {
		time.Sleep(100 * time.Millisecond)
		var w topicWatch
		w.observe("out", "A", false)
		w.observe("out", "", true)
		gone := w.observe("out", "", true)
		if l.topicGone.CompareAndSwap(nil, &gone) {
			close(l.gone)
		}
	}()
	start := time.Now()
	err := l.callWithin("commit", func() error { <-release; return nil })
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("callWithin returned after %v", took)
	}
	if !errors.Is(err, ErrTopicGone) || !strings.Contains(err.Error(), "topic out") || !l.abandoned {
		t.Fatalf("callWithin: %v (abandoned %v), want ErrTopicGone naming topic out and the producer abandoned", err, l.abandoned)
	}
}

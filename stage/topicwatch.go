package stage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// ErrTopicGone: a topic the stage reads or writes was deleted while the
// job ran, or deleted and created again (another topic id, KIP-516). Not
// retryable: the stage stops with an error naming the topic, and nothing
// is committed past it (the loop checks before every attempt, and its
// producers never create a topic: allow.auto.create.topics false). Kafka
// deletes a group's committed offsets of a deleted topic, so a consumer
// of a topic created again under the same name would silently read it
// from its start; a producer, with the broker's auto.create.topics.enable,
// would write into a new topic with the broker's default partition count.
var ErrTopicGone = errors.New("stage: a topic was deleted while the job ran")

// TopicCheck is how often a stage loop asks the broker for the topic ids
// of the topics it reads and writes (watchTopics): a deleted topic stops
// the stage within about this long.
const TopicCheck = time.Second

// topicRecheck is how soon watchTopics asks again after an answer with a
// topic missing (the second answer decides), and topicAskTimeout bounds
// one request: a request that timed out is asked again at once, not a
// TopicCheck later. Before, a request had 5 s (partitionCheckTimeout) and
// the second answer came a TopicCheck after the first: on a loaded CI
// machine a deleted internal topic stopped the job 10.2 s after the
// delete.
const (
	topicRecheck    = 200 * time.Millisecond
	topicAskTimeout = 2 * time.Second
)

// topicWatch decides, from successive answers, whether a topic is gone:
// one seen with an id that is then missing twice in a row (a single
// "unknown topic" may be a broker's stale metadata), or answered with
// another id (ids never flap). A topic missing before it was ever seen is
// not gone: an internal topic another instance created a moment ago may
// not be in the metadata yet. Pure: watchTopics feeds it.
type topicWatch struct {
	ids     map[string]string
	missing map[string]int
}

// observe takes one answer for topic: its id, or missing. It returns an
// ErrTopicGone error once the topic is gone.
func (w *topicWatch) observe(topic, id string, missing bool) error {
	if w.ids == nil {
		w.ids, w.missing = map[string]string{}, map[string]int{}
	}
	known, seen := w.ids[topic]
	switch {
	case !seen && !missing:
		w.ids[topic] = id
	case !seen:
	case missing:
		w.missing[topic]++
		if w.missing[topic] >= 2 {
			return fmt.Errorf("%w: topic %s (id %s) no longer exists", ErrTopicGone, topic, known)
		}
	case id != known:
		return fmt.Errorf("%w: topic %s was deleted and created again (id %s, now %s): its records and committed offsets are not the ones the job read and wrote", ErrTopicGone, topic, known, id)
	default:
		delete(w.missing, topic)
	}
	return nil
}

// watchedTopics are the topics the loop reads and writes: its input topic,
// its output topics, its sinks, the report topic, the dead-letter topic
// (ErrorPolicyDeadLetter) and Config.WrittenTopics (its changelog, the
// metrics topic), sorted, each once. Every topic a transaction of the
// loop may hold records of is here: a record produced to a deleted topic
// holds CommitTransaction up to txnCallTimeout unless the watch ends it
// (callWithin).
func (l *Loop) watchedTopics() []string {
	ts := []string{l.cfg.Spec.InputTopic}
	for _, o := range l.cfg.Spec.Outputs {
		for _, t := range o.Topics {
			ts = append(ts, t.Name)
		}
	}
	for _, k := range l.cfg.Spec.Sinks {
		ts = append(ts, k.Topic)
	}
	if l.cfg.ReportTopic != "" {
		ts = append(ts, l.cfg.ReportTopic)
	}
	if l.cfg.ErrorPolicy == ErrorPolicyDeadLetter && l.cfg.DeadLetterTopic != "" {
		ts = append(ts, l.cfg.DeadLetterTopic)
	}
	ts = append(ts, l.cfg.WrittenTopics...)
	slices.Sort(ts)
	return slices.Compact(ts)
}

// watchTopics asks for the ids of the loop's topics (watchedTopics) every
// TopicCheck (topicRecheck after an answer with a topic missing or a
// failed request) until ctx is done, judging them with l.watch, which
// outlives a restart of the clients, through admin (the loop's, ownAdmin:
// on the consumer's connections each request waited behind a fetch, and
// with fetch.wait.max.ms 9 s timed out), and stores the first
// ErrTopicGone error in topicGone, which the loop checks before each
// attempt, and closes gone, which ends a transaction call waiting
// meanwhile (callWithin). A failed request (a broker away) is asked again
// at the next tick; a topic an answer has another error for
// (authorization) is not judged. The caller stops it before admin is
// closed.
func (l *Loop) watchTopics(ctx context.Context, admin *kafka.AdminClient) {
	topics := l.watchedTopics()
	w := &l.watch
	var failed int
	var lastWarn time.Time
	for {
		next := TopicCheck
		asked := time.Now()
		// Not asked of a controller that refuses connections
		// (kafkaclient.DescribeTopics).
		res, err := kafkaclient.DescribeTopics(ctx, admin, topics, topicAskTimeout)
		if err != nil {
			// Said (at most every 10 s): a watch that cannot ask does
			// not notice a deleted topic.
			failed++
			if ctx.Err() == nil && time.Since(lastWarn) >= 10*time.Second {
				lastWarn = time.Now()
				l.log.Warn("stage: cannot ask the broker for the stage's topics: a deleted topic is noticed only once it answers", "failed_in_a_row", failed, "took", time.Since(asked).Round(time.Millisecond), "err", err)
			}
			next = topicRecheck
		} else {
			failed = 0
			for _, d := range res.TopicDescriptions {
				var gone error
				switch d.Error.Code() {
				case kafka.ErrNoError:
					gone = w.observe(d.Name, d.TopicID.String(), false)
				case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic, kafka.ErrUnknownTopicID:
					gone = w.observe(d.Name, "", true)
					if w.missing[d.Name] > 0 {
						next = topicRecheck
					}
				}
				if gone != nil {
					if l.topicGone.CompareAndSwap(nil, &gone) {
						close(l.gone)
					}
					l.log.Error("stage: a topic of the stage is gone: the stage stops", "err", gone)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// checkTopics returns the error watchTopics stored, if any (wrapping
// ErrTopicGone).
func (l *Loop) checkTopics() error {
	if p := l.topicGone.Load(); p != nil {
		return *p // the runner names the stage
	}
	return nil
}

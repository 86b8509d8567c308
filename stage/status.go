package stage

import (
	"encoding/json"
	"sort"
	"strconv"
	"sync"
	"time"
)

// TaskStatus is what one instance knows of one of its tasks (an input
// partition it is assigned) at a moment: for the live page, the "why is it
// stuck" explanation (watermarkmgr/explain) and /metrics. Times are wall
// clock; a zero time means "not so".
type TaskStatus struct {
	// Partition is the task's input partition.
	Partition int32
	// AssignedAt is when this instance was assigned the task.
	AssignedAt time.Time
	// AttemptSince is when the attempt now running for the task began
	// (its bundles, then its Kafka transaction); zero between attempts.
	AttemptSince time.Time
	// LastCommit is when a transaction holding the task's work last
	// committed here; zero before the first.
	LastCommit time.Time
	// Paused is true while the head holds the partition back (watermark
	// alignment, Head.Pause).
	Paused bool
	// LagRecords is the consumer lag in records: the partition's last
	// stable offset (read_committed; its high watermark otherwise) minus
	// the offset the loop reads next, from librdkafka's statistics every
	// StatsInterval (ConsumerLag); -1 while unknown. Transaction markers
	// count as offsets, so it can read a few records high.
	LagRecords int64
}

// CommitObservation is one committed transaction of a stage's loop, for
// metrics: durations in wall-clock time.
type CommitObservation struct {
	// Process is the time the step took to decide the attempt: running the
	// bundles (the SDK's processing) and the head's work.
	Process time.Duration
	// Commit is from BeginTransaction to the end of CommitTransaction:
	// producing the outputs, the offsets and the commit round trips.
	Commit time.Duration
	// Stats are the counts the commit added (RecordsIn, ElementsIn,
	// ElementsOut, Bundles; Commits is 1).
	Stats Stats
}

// Observer is told of a loop's events, on the loop's goroutine or, for
// Committed, the goroutine its commit runs on (prefetch.go), never two at
// once: it must not block. Every field may be nil.
type Observer struct {
	// Committed is called after every committed transaction.
	Committed func(CommitObservation)
	// Aborted is called after every aborted attempt.
	Aborted func()
	// Rebalanced is called after each rebalance event with the partitions
	// assigned or revoked (one of the two is empty).
	Rebalanced func(assigned, revoked []int32)
	// Untrusted is called after a committed transaction that skipped n
	// input records of topic (step.Untrusted), the stage's input topic:
	// the runner's kafkastreams_untrusted_records_total{topic}.
	Untrusted func(topic string, n int)
}

// StatsInterval is how often librdkafka reports a loop's consumer
// statistics (statistics.interval.ms), which give TaskStatus.LagRecords.
const StatsInterval = time.Second

// taskStatuses is the copy of the loop's per-task status that other
// goroutines read (Loop.Tasks); the loop's goroutine writes it.
type taskStatuses struct {
	mu struct {
		sync.Mutex
		tasks map[int32]*TaskStatus
	}
}

// update applies f to task p's status, creating it (lag unknown) if absent.
func (s *taskStatuses) update(p int32, f func(*TaskStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.tasks == nil {
		s.mu.tasks = map[int32]*TaskStatus{}
	}
	t := s.mu.tasks[p]
	if t == nil {
		t = &TaskStatus{Partition: p, LagRecords: -1}
		s.mu.tasks[p] = t
	}
	f(t)
}

func (s *taskStatuses) remove(p int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.mu.tasks, p)
}

// snapshot returns copies sorted by partition.
func (s *taskStatuses) snapshot() []TaskStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TaskStatus, 0, len(s.mu.tasks))
	for _, t := range s.mu.tasks {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// PartitionsReachable reads librdkafka's statistics JSON (its STATISTICS.md)
// and says, per partition of topic the document lists, whether the consumer
// can fetch it: the partition has a leader (leader >= 0) and the consumer's
// connection to that broker is up (the broker whose nodeid is the leader
// has state "UP"). A partition whose leader died, is being elected, or
// cannot be reached is false. The internal partition -1 is left out; a
// document that does not parse is an error.
func PartitionsReachable(statsJSON, topic string) (map[int32]bool, error) {
	var doc struct {
		Brokers map[string]struct {
			NodeID int32  `json:"nodeid"`
			State  string `json:"state"`
		} `json:"brokers"`
		Topics map[string]struct {
			Partitions map[string]struct {
				Leader int32 `json:"leader"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(statsJSON), &doc); err != nil {
		return nil, err
	}
	up := map[int32]bool{}
	for _, b := range doc.Brokers {
		if b.State == "UP" && b.NodeID >= 0 {
			up[b.NodeID] = true
		}
	}
	out := map[int32]bool{}
	for key, p := range doc.Topics[topic].Partitions {
		n, err := strconv.Atoi(key)
		if err != nil || n < 0 {
			continue
		}
		out[int32(n)] = p.Leader >= 0 && up[p.Leader]
	}
	return out, nil
}

// ConsumerLag reads librdkafka's statistics JSON (the statistics.interval.ms
// event; its STATISTICS.md) and returns, per partition of topic, the records
// not read yet: ls_offset (the last stable offset; hi_offset if it is
// unknown) minus app_offset (the offset after the last record handed to the
// loop; fetch_offset before the first). Not librdkafka's consumer_lag: that
// is measured from the consumer's own committed offset, which a loop that
// commits its offsets in its producer's transactions (KIP-447) never sets,
// so it reads -1. Partitions with either offset unknown (negative), and the
// internal partition -1, are left out. A document that does not parse is an
// error.
func ConsumerLag(statsJSON, topic string) (map[int32]int64, error) {
	var doc struct {
		Topics map[string]struct {
			Partitions map[string]struct {
				LSOffset    int64 `json:"ls_offset"`
				HiOffset    int64 `json:"hi_offset"`
				AppOffset   int64 `json:"app_offset"`
				FetchOffset int64 `json:"fetch_offset"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(statsJSON), &doc); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for key, p := range doc.Topics[topic].Partitions {
		n, err := strconv.Atoi(key)
		if err != nil || n < 0 {
			continue
		}
		end, pos := p.LSOffset, p.AppOffset
		if end < 0 {
			end = p.HiOffset
		}
		if pos < 0 {
			pos = p.FetchOffset
		}
		if end < 0 || pos < 0 {
			continue
		}
		out[int32(n)] = max(0, end-pos)
	}
	return out, nil
}

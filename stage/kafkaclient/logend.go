package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// LogEnds returns the log end offset of each of topic's partitions, asked
// through c's connection (kafka.NewAdminClientFromConsumer, no new client)
// with isolation level read_uncommitted whatever c's own is. The offsets are
// the next offsets to be written; 0 is an empty partition.
//
// A retriable answer (a topic created a moment ago whose leader is not
// known yet everywhere, for one) is asked again every 100 ms for up to
// retryFor, or until ctx ends; then, or on any other error, the error names
// the topic and partition.
func LogEnds(ctx context.Context, c *kafka.Consumer, topic string, partitions []int32) (map[int32]int64, error) {
	admin, err := kafka.NewAdminClientFromConsumer(c)
	if err != nil {
		return nil, fmt.Errorf("kafkaclient: admin client for %s: %w", topic, err)
	}
	defer admin.Close()
	warm(ctx, c, topic)
	var ends map[int32]int64
	err = askAgain(ctx, func() error {
		out, err := offsets(ctx, admin, topic, partitions, []offsetAsk{logEnd}, requestTimeout)
		ends = out[0]
		return err
	})
	if err != nil {
		return nil, err
	}
	return ends, nil
}

// askAgain calls ask until it returns nil or an error that is not a
// retriable kafka.Error (retriable; a joined error counts if any of its
// errors is one), every 100 ms for up to retryFor, or until ctx ends; it
// returns ask's last error (with ctx's, if ctx ended it).
func askAgain(ctx context.Context, ask func() error) error {
	deadline := time.Now().Add(retryFor)
	for {
		err := ask()
		var ke kafka.Error
		if err == nil || !errors.As(err, &ke) || !retriable(ke) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// warm asks for topic's metadata through c (bounded by ctx and 5 s; the
// answer and any error are ignored: the ListOffsets that follows reports
// the real one), so that c has a broker connection and the topic's leaders
// before LogEnds' ListOffsets. Without it, a ListOffsets through a consumer
// made a moment before sometimes took 3.0 s to answer: in 4 of 16 runs of
// the main job on a warm local broker, one or two task restores of an
// empty changelog (otherwise 2-20 ms) took 3.00-3.01 s, all of it in
// LogEnds. With it: none in 10 runs.
func warm(ctx context.Context, c *kafka.Consumer, topic string) {
	wait := 5 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
		wait = time.Until(d)
	}
	if wait > time.Millisecond {
		_, _ = c.GetMetadata(&topic, false, int(wait.Milliseconds()))
	}
}

// retryFor bounds how long LogEnds asks again after a retriable answer.
const retryFor = 30 * time.Second

// retriable: every answer but a refusal that asking again cannot change
// (authorization, authentication, a bad argument). librdkafka's codes for
// "no leader yet" vary with where it learned it (NOT_LEADER_OR_FOLLOWER,
// LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, or a local "no leaders
// found"), so they are not listed one by one.
func retriable(e kafka.Error) bool {
	if e.IsFatal() {
		return false
	}
	switch e.Code() {
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed, kafka.ErrGroupAuthorizationFailed,
		kafka.ErrSaslAuthenticationFailed, kafka.ErrAuthentication, kafka.ErrInvalidArg, kafka.ErrUnsupportedVersion:
		return false
	}
	return true
}

// requestTimeout bounds one ListOffsets of LogEnds and PartitionInfoOf:
// librdkafka's default socket.timeout.ms, which bounded them before.
const requestTimeout = 60 * time.Second

// AnsweredOffset is the offset of a ListOffsets answer for one partition
// (every reader of such answers takes it through here),
// or its error: the answer's own, or, for an answer with no error and no
// offset (below 0, such as kafka.OffsetInvalid, -1001), a kafka.Error
// ErrTimedOut (retriable: asked again), never the negative number as an
// offset. endAllowed accepts -1 (kafka.OffsetEnd), a timestamp spec's "no
// record that late". A restore once took an end of -1001 from such an
// answer (a ListOffsets to a leader SIGKILLed a moment before, answered
// after 60 s with no error) and read nothing: the task's store came back
// empty, its running totals restarted from zero (TestSoak, CI,
// 2026-12-05).
func AnsweredOffset(info kafka.ListOffsetsResultInfo, endAllowed bool) (int64, error) {
	switch {
	case info.Error.Code() != kafka.ErrNoError:
		return 0, info.Error
	case info.Offset >= 0, endAllowed && info.Offset == kafka.OffsetEnd:
		return int64(info.Offset), nil
	}
	return 0, kafka.NewError(kafka.ErrTimedOut, fmt.Sprintf("the broker's answer holds no offset (%d)", info.Offset), false)
}

// ReachedEnd reports whether a partition EOF event (whose Offset is the
// consumer's fetch position when it was raised) shows the reader has read
// every record below end, the partition's entry in LogEnds.
func ReachedEnd(eof kafka.PartitionEOF, end int64) bool {
	return int64(eof.Offset) >= end
}

// EndReaderConfig returns base (the caller's client properties) with what ReadToEnd
// needs of a consumer: isolation.level read_committed, partition EOF
// events, no offset commits, group.id group (librdkafka wants one; ReadToEnd
// never joins it), and fetch.wait.max.ms 20, since the EOF comes with a
// fetch that returns no records and the broker would hold that fetch the
// default 500 ms; and FitLargestFetch (a changelog's or the plan topic's
// largest batch is received).
func EndReaderConfig(base kafka.ConfigMap, group string) kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range base {
		cm[k] = v
	}
	cm["group.id"] = group
	cm["enable.auto.commit"] = false
	cm["isolation.level"] = "read_committed"
	cm["enable.partition.eof"] = true
	cm["fetch.wait.max.ms"] = 20
	FitLargestFetch(cm)
	return cm
}

// ReadToEnd reads partition p of topic from its beginning to its log end offset
// when ReadToEnd began (LogEnds, ReachedEnd), calling each for every committed record
// in offset order, and returns how many it read. An error of each stops
// the read and is returned as is; other errors name the topic and
// partition. c must be made with EndReaderConfig (NewEndReader) and not be
// assigned anything yet; ReadToEnd assigns it p.
func ReadToEnd(ctx context.Context, c *kafka.Consumer, topic string, p int32, each func(*kafka.Message) error) (int, error) {
	ends, err := LogEnds(ctx, c, topic, []int32{p})
	if err != nil {
		return 0, err
	}
	end := ends[p]
	if end == 0 {
		return 0, nil
	}
	return readFrom(ctx, c, topic, p, kafka.OffsetBeginning, end, each)
}

// readFrom reads partition p of topic through c from offset from until a
// partition EOF at or past end (ReachedEnd), calling each for every
// committed record; as ReadToEnd.
func readFrom(ctx context.Context, c *kafka.Consumer, topic string, p int32, from kafka.Offset, end int64, each func(*kafka.Message) error) (int, error) {
	return ReadRanges(ctx, c, topic, map[int32]Range{p: {From: from, End: end}}, each)
}

// Range is what ReadRanges reads of one partition: the records at offsets
// From (an offset, or kafka.OffsetBeginning) and after, to a partition EOF
// at or past End (ReachedEnd; an offset from LogEnds).
type Range struct {
	From kafka.Offset
	End  int64
}

// ReadRanges reads the partitions of topic in ranges, each over its Range,
// through c (EndReaderConfig, assigned nothing yet; ReadRanges assigns it
// every partition at once, so librdkafka fetches them concurrently, one
// connection per leader), calling each for every committed record: in
// offset order within a partition, the partitions interleaved as their
// fetches come. It returns how many records it read once every partition
// has reached its End (a Range with End 0, or From at or past End, is read
// at once); a record that comes after its partition's end was reached, or
// of another topic or partition (an earlier read's), is skipped. An error
// of each stops the read and is returned as is; other
// errors name the topic and partition. A bounded Read on runners other than
// kafkastreams reads its topic this way (runner/kafkaio).
func ReadRanges(ctx context.Context, c *kafka.Consumer, topic string, ranges map[int32]Range, each func(*kafka.Message) error) (int, error) {
	var assign []kafka.TopicPartition
	left := map[int32]bool{}
	for p, r := range ranges {
		if r.End == 0 || r.From >= 0 && int64(r.From) >= r.End {
			continue
		}
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: r.From})
		left[p] = true
	}
	if len(assign) == 0 {
		return 0, nil
	}
	if err := c.Assign(assign); err != nil {
		return 0, fmt.Errorf("kafkaclient: assign %s%v: %w", topic, slices.Sorted(maps.Keys(left)), err)
	}
	n := 0
	for len(left) > 0 {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("kafkaclient: reading %s%v: %w", topic, slices.Sorted(maps.Keys(left)), err)
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				return n, fmt.Errorf("kafkaclient: reading %s[%d]: %w", topic, e.TopicPartition.Partition, e.TopicPartition.Error)
			}
			if !left[e.TopicPartition.Partition] || e.TopicPartition.Topic == nil || *e.TopicPartition.Topic != topic {
				// Of a partition read to its end already, or of an
				// earlier read through c (ChangelogReader reuses it).
				continue
			}
			n++
			if err := each(e); err != nil {
				return n, err
			}
		case kafka.PartitionEOF:
			if left[e.Partition] && ReachedEnd(e, ranges[e.Partition].End) {
				delete(left, e.Partition)
			}
		case kafka.Error:
			if e.IsFatal() || e.Code() == kafka.ErrAutoOffsetReset {
				return n, fmt.Errorf("kafkaclient: reading %s%v: %w", topic, slices.Sorted(maps.Keys(left)), e)
			}
		}
	}
	return n, nil
}

// NewEndReader returns a consumer made with
// EndReaderConfig(Base(bootstrap, props), group), for ReadToEnd: the plan
// reader, the metrics reader, a state store's restore. The caller closes it.
func NewEndReader(bootstrap string, props map[string]string, group string) (*kafka.Consumer, error) {
	cc := EndReaderConfig(Base(bootstrap, props), group)
	return NewConsumer(cc)
}

// ReadLast reads partition 0 of topic to its end (ReadToEnd) through c and
// returns the value of its last committed record, or nil if it holds none:
// the plan topic's current plan.
func ReadLast(ctx context.Context, c *kafka.Consumer, topic string) ([]byte, error) {
	var last []byte
	if _, err := ReadToEnd(ctx, c, topic, 0, func(m *kafka.Message) error {
		last = m.Value
		return nil
	}); err != nil {
		return nil, err
	}
	return last, nil
}

// HighAndStable asks the broker, through admin, for the log ends of
// partitions of topic: ListOffsets latest twice, with isolation level
// read_uncommitted (high: the high watermark) and then read_committed
// (stable: the last stable offset), each bounded by ctx and timeout. A
// partition whose answer carries an error or no offset, or whose leader
// refuses connections (RefusingLeaders: not asked; an error only when no
// partition is left to ask), is left out of the maps. The first failed
// request ends the asking: its error is returned with what was answered
// before it (high only when the second failed).
func HighAndStable(ctx context.Context, admin *kafka.AdminClient, topic string, partitions []int32, timeout time.Duration) (high, stable map[int32]int64, err error) {
	answers, asked, refused, err := askOffsets(ctx, admin, topic, partitions, []offsetAsk{
		{spec: kafka.LatestOffsetSpec, iso: kafka.IsolationLevelReadUncommitted},
		{spec: kafka.LatestOffsetSpec, iso: kafka.IsolationLevelReadCommitted},
	}, timeout)
	if len(asked) == 0 {
		if err != nil { // the caller's context ended during the check
			return nil, nil, err
		}
		return nil, nil, refusedErrors(partitions, refused)
	}
	out := make([]map[int32]int64, len(answers))
	for i, a := range answers {
		out[i] = map[int32]int64{}
		for p, info := range a {
			if off, err := AnsweredOffset(info, false); err == nil {
				out[i][p] = off
			}
		}
	}
	if len(out) > 0 {
		high = out[0]
	}
	if len(out) > 1 {
		stable = out[1]
	}
	return high, stable, err
}

// LogStarts asks the broker, through admin, for the log start offset of
// each of partitions of topic (ListOffsets earliest: the offset of its
// first record not deleted; 0 for a partition never purged), in one
// request bounded by ctx and timeout. A partition whose answer carries an
// error, or whose leader refuses connections (RefusingLeaders: not asked),
// is left out of the map and named in the error, joined with the others';
// a failed request returns only its error.
//
// It is asked on admin's own connections, not a consumer's: a broker
// answers one request at a time per connection, so a ListOffsets queued
// behind a consumer's fetch waits out fetch.wait.max.ms, and a quota's
// throttle, first (the loop's positions once did, on its consumer).
func LogStarts(ctx context.Context, admin *kafka.AdminClient, topic string, partitions []int32, timeout time.Duration) (map[int32]int64, error) {
	out, err := offsets(ctx, admin, topic, partitions, []offsetAsk{logStart}, timeout)
	return out[0], err
}

// OffsetsAtTime asks the broker, through admin, for the offset of the
// first record of each of partitions of topic stamped at or after ms
// (Unix milliseconds; Kafka's offsetsForTimes, ListOffsets by timestamp),
// -1 (kafka.OffsetEnd) for a partition with no record that late, in one
// request bounded by ctx and timeout, at isolation level iso (a reader's
// own: read_committed looks no further than the last stable offset, as
// the reader's consumer did); errors as LogStarts', whose reason to use
// an admin client's connections it shares.
func OffsetsAtTime(ctx context.Context, admin *kafka.AdminClient, topic string, partitions []int32, ms int64, iso kafka.IsolationLevel, timeout time.Duration) (map[int32]int64, error) {
	out, err := offsets(ctx, admin, topic, partitions, []offsetAsk{{spec: kafka.NewOffsetSpecForTimestamp(ms), iso: iso, what: fmt.Sprintf("offset for time %d ms", ms)}}, timeout)
	return out[0], err
}

// StartsAndEnds asks the broker, through admin, for the log start and log
// end offsets (read_uncommitted: the high watermark) of each of
// partitions of topic: two ListOffsets (earliest, then latest), each
// bounded by ctx and timeout, after one check of the partitions' leaders
// for both (RefusingLeaders). Errors as LogStarts': a partition left out
// of either map is named in the error.
func StartsAndEnds(ctx context.Context, admin *kafka.AdminClient, topic string, partitions []int32, timeout time.Duration) (starts, ends map[int32]int64, err error) {
	out, err := offsets(ctx, admin, topic, partitions, []offsetAsk{logStart, logEnd}, timeout)
	return out[0], out[1], err
}

// offsetAsk is one ListOffsets of askOffsets: the spec every partition is
// asked with, the isolation level (read_uncommitted, the zero value,
// unless said) and what the offset is called in errors.
type offsetAsk struct {
	spec kafka.OffsetSpec
	iso  kafka.IsolationLevel
	what string
}

// The two asks of a partition's bounds.
var (
	logStart = offsetAsk{spec: kafka.EarliestOffsetSpec, what: "log start offset"}
	logEnd   = offsetAsk{spec: kafka.LatestOffsetSpec, what: "log end offset"}
)

// askOffsets is every ListOffsets this package sends to partition
// leaders (WaitServed's, which spans topics, aside): one request per ask
// for partitions of topic, in order, through admin. The leaders are
// checked once for all the asks (RefusingLeaders): partitions whose
// leader refuses connections are not asked (asked holds the others, in
// partitions' order; refused their errors), and with none left no
// request is sent. Each request is bounded by ctx and timeout, in
// librdkafka too (SetAdminRequestTimeout: a request waiting on a dead
// leader busy-loops while it lives, RefusingLeaders; librdkafka's own
// timeout is 60 s). answers[i] holds ask i's answer per partition as the
// broker gave it (AnsweredOffset reads one). The first failed request
// ends the asking: answers holds the asks answered before it and err its
// error, a kafka.Error ErrTimedOut for a request that outlived timeout
// with ctx live, as a consumer's QueryWatermarkOffsets fails, not the
// bare context.DeadlineExceeded confluent-kafka-go returns (a stage loop
// restarts its clients after a Kafka error, stage's restartable, and
// ends on any other).
func askOffsets(ctx context.Context, admin *kafka.AdminClient, topic string, partitions []int32, asks []offsetAsk, timeout time.Duration) (answers []map[int32]kafka.ListOffsetsResultInfo, asked []int32, refused map[int32]error, err error) {
	refused = RefusingLeaders(admin, topic, partitions, Within(ctx, timeout))
	if err := ended(ctx); err != nil {
		return nil, nil, nil, err
	}
	asked = askable(partitions, refused)
	if len(asked) == 0 {
		return nil, nil, refused, nil
	}
	for _, a := range asks {
		req := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(asked))
		for _, p := range asked {
			req[kafka.TopicPartition{Topic: &topic, Partition: p}] = a.spec
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := admin.ListOffsets(rctx, req, kafka.SetAdminIsolationLevel(a.iso), kafka.SetAdminRequestTimeout(timeout))
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = kafka.NewError(kafka.ErrTimedOut, fmt.Sprintf("no answer within %v", timeout), false)
			}
			return answers, asked, refused, err
		}
		// ResultInfos' keys hold topic pointers of their own: looked up
		// by partition, not by key.
		m := make(map[int32]kafka.ListOffsetsResultInfo, len(res.ResultInfos))
		for tp, info := range res.ResultInfos {
			m[tp.Partition] = info
		}
		answers = append(answers, m)
	}
	return answers, asked, refused, nil
}

// offsets is LogStarts, OffsetsAtTime, StartsAndEnds and LogEnds' ask:
// askOffsets, its answers read by readOffsets. A failed request's error
// names what it asked, and the maps are empty.
func offsets(ctx context.Context, admin *kafka.AdminClient, topic string, partitions []int32, asks []offsetAsk, timeout time.Duration) ([]map[int32]int64, error) {
	answers, asked, refused, err := askOffsets(ctx, admin, topic, partitions, asks, timeout)
	if err != nil && ctx.Err() != nil {
		return emptyOffsets(len(asks)), fmt.Errorf("kafkaclient: %s of %s %v: %w", whatOf(asks), topic, partitions, err)
	}
	if err != nil {
		return emptyOffsets(len(asks)), fmt.Errorf("kafkaclient: %s of %s %v: %w", whatOf(asks), topic, asked, errors.Join(err, refusedErrors(partitions, refused)))
	}
	return readOffsets(topic, partitions, asked, refused, asks, answers)
}

// readOffsets reads askOffsets' answers to asks for partitions of topic,
// each by AnsweredOffset: out[i] (never nil, one per ask) holds ask i's
// offset of each partition answered with one; every partition left out
// (its leader refused, absent from the answer, the answer's error or
// missing offset) is named in err, the refusals first, then each ask's,
// in partitions' order. With no partition asked, err names the topic,
// the partitions and the refusals.
func readOffsets(topic string, partitions, asked []int32, refused map[int32]error, asks []offsetAsk, answers []map[int32]kafka.ListOffsetsResultInfo) (out []map[int32]int64, err error) {
	out = emptyOffsets(len(asks))
	if len(asked) == 0 {
		return out, fmt.Errorf("kafkaclient: %s of %s %v: %w", whatOf(asks), topic, partitions, refusedErrors(partitions, refused))
	}
	errs := []error{refusedErrors(partitions, refused)}
	for i, a := range asks {
		endAllowed := a.spec != kafka.EarliestOffsetSpec && a.spec != kafka.LatestOffsetSpec
		for _, p := range asked {
			info, ok := answers[i][p]
			if !ok {
				errs = append(errs, fmt.Errorf("kafkaclient: no %s for %s[%d] in the broker's answer", a.what, topic, p))
				continue
			}
			off, err := AnsweredOffset(info, endAllowed)
			if err != nil {
				errs = append(errs, fmt.Errorf("kafkaclient: %s of %s[%d]: %w", a.what, topic, p, err))
				continue
			}
			out[i][p] = off
		}
	}
	return out, errors.Join(errs...)
}

// emptyOffsets returns n empty maps.
func emptyOffsets(n int) []map[int32]int64 {
	out := make([]map[int32]int64, n)
	for i := range out {
		out[i] = map[int32]int64{}
	}
	return out
}

// whatOf names what asks ask for: "log start offset and log end offset".
func whatOf(asks []offsetAsk) string {
	whats := make([]string, len(asks))
	for i, a := range asks {
		whats[i] = a.what
	}
	return strings.Join(whats, " and ")
}

// PartitionInfo is what ChangelogReader learns of a changelog partition
// before reading it (state.ChangelogInfo, field for field).
type PartitionInfo struct {
	// TopicID is the topic's id (KIP-516), "" if DescribeTopics did not
	// answer one.
	TopicID string
	// Start and End are the partition's log start and log end offsets
	// (read_uncommitted: the high watermark) when the read began.
	Start, End int64
}

// PartitionInfoOf asks the broker, through c's connection, for topic's id
// (TopicID; "" and no error if it fails: the caller then treats the topic
// as unknown) and partition p's log start and end offsets
// (StartsAndEnds: one check of the leader for both; asked again as
// LogEnds asks), bounded by ctx and requestTimeout per request.
func PartitionInfoOf(ctx context.Context, c *kafka.Consumer, topic string, p int32) (PartitionInfo, error) {
	admin, err := kafka.NewAdminClientFromConsumer(c)
	if err != nil {
		return PartitionInfo{}, fmt.Errorf("kafkaclient: admin client for %s: %w", topic, err)
	}
	defer admin.Close()
	warm(ctx, c, topic)
	var info PartitionInfo
	err = askAgain(ctx, func() error {
		starts, ends, err := StartsAndEnds(ctx, admin, topic, []int32{p}, requestTimeout)
		info.Start, info.End = starts[p], ends[p]
		return err
	})
	if err != nil {
		return PartitionInfo{}, err
	}
	info.TopicID, _ = TopicID(ctx, admin, topic, requestTimeout)
	return info, nil
}

// ChangelogReader reads the changelog partitions a stage's state stores
// restore their tasks from (state.Options.Changelog, through the runner's
// conversion of PartitionInfo), one at a time, with one consumer for all
// of them (NewEndReader, group "<topic>-restore" of the first topic read:
// assigned, never joined; read_committed), made at the first Read and
// kept until Close, as a Kafka Streams thread restores with one restore
// consumer. A consumer of its own for each task cost a client's start,
// its first metadata and its close per task: a GroupByKey stage given 128
// tasks at once took 7.5 s to restore 128 empty changelog partitions,
// 6-144 ms each, one after another. A Read that fails closes the
// consumer; the next makes a new one. Safe for concurrent use (Reads run
// one at a time).
type ChangelogReader struct {
	bootstrap string
	props     map[string]string
	mu        sync.Mutex
	c         *kafka.Consumer // nil until the first Read, after a failed one and after Close
	closed    bool
}

// NewChangelogReader returns a ChangelogReader for the cluster at
// bootstrap with the client properties props. It connects at its first
// Read.
func NewChangelogReader(bootstrap string, props map[string]string) *ChangelogReader {
	return &ChangelogReader{bootstrap: bootstrap, props: props}
}

// Read reads partition p of topic: it asks the partition's
// PartitionInfoOf and hands it to from, which returns the offset to read
// from; then it reads from there to the partition's log end offset when
// the read began (as ReadToEnd), handing every record's key and value
// (nil: a tombstone) to apply in offset order, and returns how many it
// read. An error of from or apply stops the read and is returned as is.
// After Close it returns net.ErrClosed.
func (r *ChangelogReader) Read(ctx context.Context, topic string, p int32, from func(PartitionInfo) (int64, error), apply func(key, value []byte) error) (n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, fmt.Errorf("kafkaclient: changelog reader of %s: %w", topic, net.ErrClosed)
	}
	if r.c == nil {
		// auto.offset.reset error: a tail's offset deleted between the
		// PartitionInfoOf and the fetch is an error, never a silent skip
		// to the log end (librdkafka's default).
		cc := EndReaderConfig(Base(r.bootstrap, r.props), topic+"-restore")
		cc["auto.offset.reset"] = InternalOffsetReset
		if r.c, err = NewConsumer(cc); err != nil {
			return 0, err
		}
	}
	defer func() {
		// Between reads the consumer fetches nothing; after a failed one
		// it is not trusted again.
		if uerr := r.c.Unassign(); err == nil && uerr != nil {
			err = fmt.Errorf("kafkaclient: changelog reader of %s: unassign: %w", topic, uerr)
		}
		if err != nil {
			_ = r.c.Close()
			r.c = nil
		}
	}()
	info, err := PartitionInfoOf(ctx, r.c, topic, p)
	if err != nil {
		return 0, err
	}
	off, err := from(info)
	if err != nil {
		return 0, err
	}
	if off >= info.End {
		return 0, nil
	}
	return readFrom(ctx, r.c, topic, p, kafka.Offset(off), info.End, func(e *kafka.Message) error { return apply(e.Key, e.Value) })
}

// Close closes the consumer. Reads after it fail; safe to call twice.
func (r *ChangelogReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.c != nil {
		_ = r.c.Close()
		r.c = nil
	}
}

package activity

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient/javapartition"
)

// Loaded says what Load wrote.
type Loaded struct {
	// Rows is how many records were written: every row of the file but
	// the header.
	Rows int
	// PerPartition counts the records of each partition.
	PerPartition []int
	// MinEventMillis and MaxEventMillis are the smallest and largest
	// record timestamps written (Unix epoch milliseconds).
	MinEventMillis, MaxEventMillis int64
	// Lateness counts the rows that watermarks could find late.
	Lateness Lateness
}

// Lateness counts, over rows in arrival order, how many a watermark of
// "newest event time read - OutOfOrderness" could find behind it. Set
// OutOfOrderness and AllowedLateness, then Observe each row.
type Lateness struct {
	// OutOfOrderness is the watermark's bound; AllowedLateness the
	// windows'.
	OutOfOrderness, AllowedLateness time.Duration
	// BehindNewest counts the rows more than OutOfOrderness behind the
	// newest event time of every row before them: late to a watermark
	// that saw every earlier row of the topic at once.
	BehindNewest int
	// Fired counts the rows whose 30-day window (WindowSize) ended before
	// the watermark of their partition alone (its newest event time before
	// them - OutOfOrderness), and Expired those whose window ended more
	// than AllowedLateness before it. They bound what a GroupByKey
	// downstream of a Kafka source finds late (a late pane) and expired
	// (dropped): its watermark is the minimum over the partitions, and a
	// row's partition reports a watermark only after the row's output.
	// (An idle partition leaves the minimum; these bounds assume that a
	// partition with records still to read does not idle out.)
	Fired, Expired int

	newest   int64
	newestOf map[int32]int64
}

// Observe counts the next row, of partition p at event time eventMillis.
func (l *Lateness) Observe(p int32, eventMillis int64) {
	if l.newestOf == nil {
		l.newestOf = map[int32]int64{}
	}
	bound := l.OutOfOrderness.Milliseconds()
	if l.newest != 0 && eventMillis < l.newest-bound {
		l.BehindNewest++
	}
	if n, ok := l.newestOf[p]; ok {
		size := WindowSize.Milliseconds()
		maxTs := eventMillis - ((eventMillis%size)+size)%size + size - 1 // the window's last millisecond
		wm := n - bound
		if maxTs < wm {
			l.Fired++
		}
		if maxTs+l.AllowedLateness.Milliseconds() < wm {
			l.Expired++
		}
	}
	if n, ok := l.newestOf[p]; !ok || eventMillis > n {
		l.newestOf[p] = eventMillis
	}
	l.newest = max(l.newest, eventMillis)
}

// TopicSpec is how Load creates its topic, and how the streaming job's
// output topic is created: CreateTime timestamps and no time-based
// retention (retention.ms=-1). The records' timestamps are event times, up
// to 21 years old: under the broker's default retention (7 days) every
// segment of such a topic is past retention, and the broker deletes it at
// its next retention check (every minute on the project's broker), while
// the job may still be reading it.
func TopicSpec(name string, partitions int) kafkaenv.TopicSpec {
	return kafkaenv.TopicSpec{Name: name, Partitions: partitions, Config: map[string]string{
		"message.timestamp.type": "CreateTime",
		"retention.ms":           "-1",
	}}
}

// Load writes the rows of git-commits.csv at path to a new topic of
// partitions partitions, in the file's order (arrival order; event times
// are out of order in it): one record per row, its key the row's area,
// its value the row as it is in the file (without a trailing "\r"), its
// partition the Java client's default for the key (javapartition.ForKey,
// murmur2: where a Java producer would put it) and its CreateTime the
// row's event_ms, so that a reader that takes the Kafka timestamp as event
// time (kafkaio.Read) sees the row's event time.
//
// The topic must not exist yet; Load creates it as TopicSpec says. A row that does
// not parse (ParseRow) is refused, naming its line: the record's timestamp
// would be unknown. So is a row with event_ms <= 0: librdkafka sends a
// CreateTime of 0 as "now" and Kafka has no negative timestamps (-1 is "no
// timestamp"), so the record would not carry the row's event time (the
// repository's file has none; see data/README.md). The producer is
// idempotent (acks=all), so each partition holds its rows once and in file
// order. outOfOrderness and allowedLateness are Loaded.Lateness's.
func Load(ctx context.Context, bootstrap, path, topic string, partitions int, outOfOrderness, allowedLateness time.Duration) (Loaded, error) {
	if partitions <= 0 {
		return Loaded{}, fmt.Errorf("commitactivity: load: %d partitions, want at least 1", partitions)
	}
	f, err := os.Open(path)
	if err != nil {
		return Loaded{}, fmt.Errorf("commitactivity: load: %w", err)
	}
	defer f.Close()
	if err := kafkaenv.CreateTopics(ctx, bootstrap, TopicSpec(topic, partitions)); err != nil {
		return Loaded{}, fmt.Errorf("commitactivity: load: %w", err)
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  bootstrap,
		"enable.idempotence": true,
		"acks":               "all",
		"linger.ms":          20,
	})
	if err != nil {
		return Loaded{}, fmt.Errorf("commitactivity: load: producer: %w", err)
	}
	defer p.Close()

	// Delivery reports: the first error is kept; the rest are counted.
	var (
		deliverErr error
		delivered  int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range p.Events() {
			m, ok := ev.(*kafka.Message)
			if !ok {
				continue
			}
			if m.TopicPartition.Error != nil && deliverErr == nil {
				deliverErr = kafkaclient.FatalCause(p, m.TopicPartition.Error)
			}
			delivered++
		}
	}()

	st := Loaded{PerPartition: make([]int, partitions), Lateness: Lateness{OutOfOrderness: outOfOrderness, AllowedLateness: allowedLateness}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	produced := 0
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if lineNo == 1 && line == Header {
			continue
		}
		r, err := ParseRow(line)
		if err != nil {
			return st, fmt.Errorf("commitactivity: load: %s:%d: %v: the record's timestamp would be unknown; fix or remove the row", path, lineNo, err)
		}
		if r.EventMillis <= 0 {
			return st, fmt.Errorf("commitactivity: load: %s:%d: event_ms %d <= 0: a Kafka CreateTime must be positive (librdkafka sends 0 as \"now\", and Kafka has no negative timestamps)", path, lineNo, r.EventMillis)
		}
		key := []byte(r.Area)
		part := javapartition.ForKey(key, int32(partitions))
		msg := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part},
			Key:            key,
			Value:          []byte(line),
			Timestamp:      time.UnixMilli(r.EventMillis),
		}
		if err := kafkaclient.Produce(p, msg, nil, nil); err != nil {
			return st, fmt.Errorf("commitactivity: load: produce to %s: %w", topic, err)
		}
		produced++
		st.PerPartition[part]++
		if st.Rows == 0 || r.EventMillis < st.MinEventMillis {
			st.MinEventMillis = r.EventMillis
		}
		st.MaxEventMillis = max(st.MaxEventMillis, r.EventMillis)
		st.Lateness.Observe(part, r.EventMillis)
		st.Rows++
		if err := ctx.Err(); err != nil {
			return st, err
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("commitactivity: load: %s: %w", path, err)
	}
	for left := kafkaclient.Drain(p, time.Second); left > 0; left = kafkaclient.Drain(p, time.Second) {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("commitactivity: load: %d records not delivered: %w", left, err)
		}
	}
	p.Close()
	<-done
	if deliverErr != nil {
		return st, fmt.Errorf("commitactivity: load: deliver to %s: %w", topic, deliverErr)
	}
	if delivered != produced {
		return st, fmt.Errorf("commitactivity: load: %d of %d records acknowledged", delivered, produced)
	}
	return st, nil
}

// TopicRecords returns how many records topic holds: the sum of its
// partitions' high watermarks (the topic is written without transactions,
// and nothing is deleted from it: see TopicSpec).
func TopicRecords(ctx context.Context, bootstrap, topic string) (int64, error) {
	c, err := kafkaclient.NewConsumer(kafka.ConfigMap{"bootstrap.servers": bootstrap, "group.id": "commitactivity-count"})
	if err != nil {
		return 0, fmt.Errorf("commitactivity: consumer: %w", err)
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return 0, fmt.Errorf("commitactivity: metadata of %s: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError {
		return 0, fmt.Errorf("commitactivity: topic %s: %v", topic, tm.Error)
	}
	var n int64
	for _, p := range tm.Partitions {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		lo, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return 0, fmt.Errorf("commitactivity: offsets of %s/%d: %w", topic, p.ID, err)
		}
		n += hi - lo
	}
	return n, nil
}

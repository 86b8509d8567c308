package integration

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// This file counts what a benchmark's side appended to the broker's logs,
// topic by topic: where the broker's request handlers and log cleaner
// spend their time (issue 24: "say where the CPU goes").

// brokerTopics are the broker's own topics every side writes to: its
// offset commits and its transactions' states.
var brokerTopics = []string{"__consumer_offsets", "__transaction_state"}

// logEnds returns the sum over partitions of the high watermark of each
// topic named prefix* (none for an empty prefix) and of brokerTopics: the
// records and transaction markers appended to it (each marker takes an
// offset of every partition a transaction wrote to), before its log
// start moved (a purge moves the start, never the end).
func logEnds(ctx context.Context, bs, prefix string) (map[string]int64, error) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bs})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	md, err := a.GetMetadata(nil, true, 10_000)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, t := range md.Topics {
		if !(prefix != "" && strings.HasPrefix(name, prefix) || slices.Contains(brokerTopics, name)) {
			continue
		}
		var ps []int32
		for _, p := range t.Partitions {
			ps = append(ps, p.ID)
		}
		high, _, err := kafkaclient.HighAndStable(ctx, a, name, ps, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("log ends of %s: %w", name, err)
		}
		for _, h := range high {
			out[name] += h
		}
	}
	return out, nil
}

// formatAppends gives the n topics of after that grew most since before
// (log ends, logEnds), largest first, prefix cut from their names, and
// the total: "total 3706542; s1-...-changelog 1574159, out 1000515, ...,
// __transaction_state 3399, 2 others" (the input topic, written before
// the run under another name, is not among them).
func formatAppends(before, after map[string]int64, prefix string, n int) string {
	type grew struct {
		name string
		by   int64
	}
	var gs []grew
	var total int64
	for name, end := range after {
		if by := end - before[name]; by > 0 {
			gs = append(gs, grew{strings.TrimPrefix(strings.TrimPrefix(name, prefix), "-"), by})
			total += by
		}
	}
	slices.SortFunc(gs, func(a, b grew) int { return cmp.Or(cmp.Compare(b.by, a.by), cmp.Compare(a.name, b.name)) })
	var parts []string
	for i, g := range gs {
		if i == n {
			parts = append(parts, fmt.Sprintf("%d others", len(gs)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", g.name, g.by))
	}
	return fmt.Sprintf("total %d; %s", total, strings.Join(parts, ", "))
}

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// longPollWait is TestKafkaSourceIdleDuringLongPoll's fetch.wait.max.ms: a
// fetch of partitions with nothing to read waits this long at the broker.
const longPollWait = 9 * time.Second

// TestKafkaSourceIdleDuringLongPoll: a source topic of two partitions,
// partition 0 with records at B + 0, 10, …, 180 s, partition 1 never
// written, read with 1 s of idleness and fetch.wait.max.ms 9 s (a user's
// setting for a quiet topic). Partition 1 is woken to report itself idle
// 1 s after its task was assigned; that task has never committed an
// offset, so the loop asks for its log start (the offset it commits).
// It asked on the consumer's connection, where the broker answers one
// request at a time: behind the fetch waiting out its 9 s, so partition 1
// reported idle, and the windows fired, about 8 s late. Now the loop asks
// on its own admin client's connections: partition 1 is idle on the page
// within 3 s of its idleness after partition 0's records are, and the
// three 1-minute windows the watermark has passed fire, 6 records each.
func TestKafkaSourceIdleDuringLongPoll(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, userTopic(in, 2), userTopic(out, 1)); err != nil {
		t.Fatal(err)
	}
	const base = 1_700_000_040_000 // a minute boundary
	var recs []kioRec
	for s := int64(0); s <= 180; s += 10 {
		recs = append(recs, kioRec{key: []byte(fmt.Sprint("k", s)), value: []byte("v"), ts: base + s*1000})
	}
	produceAt(t, bs, in, 0, recs...)

	const idleness = time.Second
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(idleness),
		kafkaio.WithProperty("fetch.wait.max.ms", fmt.Sprint(longPollWait.Milliseconds())))
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()
	url := "http://" + servingAddr(t, addrOf) + "/watermarks"

	// R: partition 0's records are read (seen on the page).
	last := fmt.Sprintf("lastEventTimeMs=%d", base+180000)
	var read time.Time
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		rows := sourcePartitionRows(t, url)
		if read.IsZero() && len(rows) == 2 && strings.Contains(rows[0], last) {
			read = time.Now()
		}
		if !read.IsZero() && len(rows) == 2 && strings.Contains(rows[1], "idle=true") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within a minute, partition 0's records were not read or partition 1 did not idle out: %q", rows)
		}
	}
	idled := time.Since(read)
	t.Logf("partition 1 idle on the page %v after partition 0's records were (idleness %v, fetch.wait.max.ms %v)", idled.Round(time.Millisecond), idleness, longPollWait)
	if limit := idleness + 3*time.Second; idled > limit {
		t.Fatalf("partition 1 reported idle %v after partition 0's records were read, want within %v: its idle report waited on the consumer's fetch (fetch.wait.max.ms %v)", idled.Round(time.Millisecond), limit, longPollWait)
	}
	var want []string
	for m := int64(0); m < 3; m++ {
		want = append(want, fmt.Sprintf("[%d,%d) 6", base+m*60000, base+(m+1)*60000))
	}
	if got := readValues(t, bs, out, 3, 30*time.Second); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("output %q, want %q", got, want)
	}
}

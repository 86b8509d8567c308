package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const idleness = time.Second
	_, out, p := idlenessJob(t, ctx, bs, 2, kafkaio.WithIdleness(idleness),
		kafkaio.WithProperty("fetch.wait.max.ms", fmt.Sprint(longPollWait.Milliseconds())))

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	done := startJob(sctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()
	url := "http://" + servingAddr(t, addrOf) + "/watermarks"

	// R: partition 0's records are read (seen on the page).
	last := fmt.Sprintf("lastEventTimeMs=%d", idlenessBase+180000)
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
	want := idlenessWindows()
	if got := readValues(t, bs, out, 3, 30*time.Second); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("output %q, want %q", got, want)
	}
}

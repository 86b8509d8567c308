package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// A source partition that goes quiet mid-stream, idles out, and comes back.

// kioHeartbeatKey is the key of the records that keep a partition live
// without being counted: kioSkipHeartbeats drops them after the source.
const kioHeartbeatKey = "heartbeat"

func kioSkipHeartbeats(key, value []byte, emit func([]byte, []byte)) {
	if string(key) != kioHeartbeatKey {
		emit(key, value)
	}
}

func init() {
	register.Function3x0(kioSkipHeartbeats)
}

// sourceStage returns the Kafka source stage (its name has "kafkaio.Read")
// of GET /watermarks at addr, and its name.
func sourceStage(addr string) (string, service.StageJSON, error) {
	resp, err := http.Get("http://" + addr + "/watermarks")
	if err != nil {
		return "", service.StageJSON{}, err
	}
	defer resp.Body.Close()
	var body service.WatermarksJSON
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", service.StageJSON{}, err
	}
	for name, st := range body.Stages {
		if strings.Contains(name, "kafkaio.Read") {
			return name, st, nil
		}
	}
	return "", service.StageJSON{}, fmt.Errorf("no Kafka source stage in GET /watermarks (stages %d)", len(body.Stages))
}

// waitSource polls GET /watermarks at addr until ok holds for the source
// stage, or fails the test after timeout naming what it waited for.
func waitSource(t *testing.T, addr, what string, timeout time.Duration, ok func(name string, st service.StageJSON) bool) service.StageJSON {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		name, st, err := sourceStage(addr)
		if err == nil && ok(name, st) {
			return st
		}
		if err != nil {
			last = err.Error()
		} else {
			b, _ := json.Marshal(st)
			last = string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /watermarks: waited %v for %s; the source stage: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// partitionOf returns source partition p of stage name in st.
func partitionOf(name string, st service.StageJSON, p int) (service.PartitionJSON, bool) {
	pj, ok := st.Partitions[name+":"+strconv.Itoa(p)]
	return pj, ok
}

// lateDropped sums kafkastreams_late_elements_dropped_total over the stages
// of GET /metrics at addr.
func lateDropped(addr string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kafkastreams_late_elements_dropped_total") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("GET /metrics: %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("GET /metrics has no kafkastreams_late_elements_dropped_total")
	}
	return sum, sc.Err()
}

// heartbeats produces a heartbeat record to partition p of topic every
// 300 ms, at the event time *ts holds, until stop is closed.
func heartbeats(t *testing.T, bs, topic string, p int32, ts *atomic.Int64, stop <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bs, "go.delivery.reports": false, "linger.ms": 0})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer pr.Close()
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p}, Key: []byte(kioHeartbeatKey), Value: []byte("hb"), Timestamp: time.UnixMilli(ts.Load())}
			_ = pr.Produce(m, nil)
			kafkaclient.Drain(pr, time.Second)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return &wg
}

// TestKafkaSourceIdlePartitionRejoins is the test 2: a partition
// that goes quiet mid-stream idles out, and when it gets records again it
// rejoins the minimum, and its records within the bound are not late.
//
// Bounded out-of-orderness 1 minute, idleness 5 s, 1-minute windows,
// allowed lateness 0, a count per window; B is a minute boundary. Partition
// 0 holds records every 10 s from B to B+5m (watermark B+4m) and stays
// live (heartbeats at its latest event time, not counted); partition 1
// holds records every 10 s from B+5s to B+1m55s (watermark B+55s) and then
// goes quiet. While it is quiet but not idle nothing fires; once it is
// idle (GET /watermarks says so) the watermark is partition 0's, B+4m, and
// the windows up to B+4m fire: [B, B+1m) 12, [B+1m, B+2m) 12, [B+2m, B+3m)
// 6, [B+3m, B+4m) 6. Then partition 1 gets records at B+4m−1ms (1 ms
// outside the bound: late), B+4m (exactly at the watermark) and B+4m30s:
// it is live again, its watermark B+3m30s, and it is the minimum: when
// partition 0 then moves to B+7m (watermark B+6m) the stage's watermark
// stays at B+4m. A record of partition 1 at B+7m releases it: [B+4m, B+5m)
// fires with 8 (partition 0's 6 and partition 1's records at B+4m and
// B+4m30s: not late) and [B+5m, B+6m) with 1. The record 1 ms outside the
// bound is the only one dropped as late (no second pane of [B+3m, B+4m)),
// and the output is exactly those six windows.
func TestKafkaSourceIdlePartitionRejoins(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 2, Config: keepOld}, kafkaenv.TopicSpec{Name: out, Partitions: 1, Config: keepOld}); err != nil {
		t.Fatal(err)
	}
	const (
		base   = 1_700_000_040_000 // B, a minute boundary
		minute = 60_000
		sec    = 1000
	)
	var p0, p1 []kioRec
	for s := int64(0); s <= 300; s += 10 {
		p0 = append(p0, kioRec{key: []byte(fmt.Sprint("p0-", s)), value: []byte("v"), ts: base + s*sec})
	}
	for s := int64(5); s <= 115; s += 10 {
		p1 = append(p1, kioRec{key: []byte(fmt.Sprint("p1-", s)), value: []byte("v"), ts: base + s*sec})
	}
	produceAt(t, bs, in, 0, p0...)
	produceAt(t, bs, in, 1, p1...)
	var hbTS atomic.Int64
	hbTS.Store(base + 5*minute) // partition 0's latest event time: its watermark does not move
	stopHB := make(chan struct{})
	hb := heartbeats(t, bs, in, 0, &hbTS, stopHB)
	defer func() {
		select {
		case <-stopHB:
		default:
			close(stopHB)
		}
		hb.Wait()
	}()

	const idleness = 5 * time.Second
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(time.Minute), kafkaio.WithIdleness(idleness))
	kvs = beam.ParDo(s, kioSkipHeartbeats, kvs)
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)
	start := time.Now()
	done := startJob(sctx, bs, uniqueName(t, "app"), p)
	defer func() { jcancel(); <-done }()
	addr := servingAddr(t, addrOf)

	win := func(from, n int64) string {
		return fmt.Sprintf("[%d,%d) %d", base+from*minute, base+(from+1)*minute, n)
	}
	// 1. Partition 1 quiet: once it is idle, the windows up to B+4m fire.
	want := []string{win(0, 12), win(1, 12), win(2, 6), win(3, 6)}
	got := readValues(t, bs, out, len(want), 60*time.Second)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("while partition 1 is quiet: output %q, want %q", got, want)
	}
	st := waitSource(t, addr, "partition 1 idle, partition 0 live, watermark B+4m", 10*time.Second, func(name string, st service.StageJSON) bool {
		q0, ok0 := partitionOf(name, st, 0)
		q1, ok1 := partitionOf(name, st, 1)
		return ok0 && ok1 && q1.Idle && !q0.Idle && st.GlobalMs == base+4*minute
	})
	t.Logf("%v: the windows to B+4m fired with partition 1 idle (minimum %v)", time.Since(start).Round(time.Millisecond), *st.MinimumPartition)

	// 2. Partition 1 wakes up: 1 ms outside the bound, at the bound, within it.
	produceAt(t, bs, in, 1,
		kioRec{key: []byte("p1-late"), value: []byte("v"), ts: base + 4*minute - 1},
		kioRec{key: []byte("p1-240"), value: []byte("v"), ts: base + 4*minute},
		kioRec{key: []byte("p1-270"), value: []byte("v"), ts: base + 4*minute + 30*sec})
	woke := time.Now()
	waitSource(t, addr, "partition 1 live again at watermark B+3m30s", 10*time.Second, func(name string, st service.StageJSON) bool {
		q1, ok := partitionOf(name, st, 1)
		return ok && !q1.Idle && q1.WatermarkMs == base+3*minute+30*sec
	})
	// Partition 0 moves on to B+7m: partition 1 is the minimum, the
	// watermark stays.
	produceAt(t, bs, in, 0, kioRec{key: []byte("p0-420"), value: []byte("v"), ts: base + 7*minute})
	hbTS.Store(base + 7*minute)
	st = waitSource(t, addr, "partition 0 at watermark B+6m", 10*time.Second, func(name string, st service.StageJSON) bool {
		q0, ok := partitionOf(name, st, 0)
		return ok && q0.WatermarkMs == base+6*minute
	})
	if el := time.Since(woke); el >= idleness {
		t.Fatalf("the checks took %v since partition 1 woke, more than its idleness (%v): it may have idled out again (a slow machine?)", el, idleness)
	}
	name, _, _ := sourceStage(addr)
	if st.GlobalMs != base+4*minute || st.MinimumPartition == nil || *st.MinimumPartition != name+":1" {
		b, _ := json.Marshal(st)
		t.Fatalf("partition 1 woke and partition 0 is at B+6m: the source stage's watermark is %d (B%+dms), minimum %v; want B+4m, minimum partition 1: %s", st.GlobalMs, st.GlobalMs-base, st.MinimumPartition, b)
	}
	t.Logf("%v after partition 1 woke: it is the minimum, the watermark stays at B+4m", time.Since(woke).Round(time.Millisecond))

	// 3. Partition 1 moves on too: the windows its records landed in fire.
	produceAt(t, bs, in, 1, kioRec{key: []byte("p1-420"), value: []byte("v"), ts: base + 7*minute})
	want = append(want, win(4, 8), win(5, 1))
	got = readValues(t, bs, out, len(want), 30*time.Second)
	if strings.Join(got, "|") != strings.Join(sortedCopy(want), "|") {
		t.Fatalf("after partition 1 rejoined: output %q, want %q", got, sortedCopy(want))
	}
	close(stopHB)
	hb.Wait()
	// Nothing else: read the whole topic, and the late counter.
	got = readValues(t, bs, out, 0, 30*time.Second)
	if strings.Join(got, "|") != strings.Join(sortedCopy(want), "|") {
		t.Fatalf("output %q, want exactly %q", got, sortedCopy(want))
	}
	dropped, err := lateDropped(addr)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 1 {
		t.Fatalf("%v elements dropped as late, want 1 (the record 1 ms outside the bound)", dropped)
	}
	t.Logf("%v: six windows, each once; one element dropped as late", time.Since(start).Round(time.Millisecond))
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

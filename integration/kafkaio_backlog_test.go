package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// A source partition with a backlog, read slowly, is not idle.

// kioSlowRecord passes a record on after Millis ms: a source stage that
// reads slowly.
type kioSlowRecord struct {
	Millis int
}

func (f *kioSlowRecord) ProcessElement(key, value []byte, emit func([]byte, []byte)) {
	time.Sleep(time.Duration(f.Millis) * time.Millisecond)
	emit(key, value)
}

func init() {
	register.DoFn3x0[[]byte, []byte, func([]byte, []byte)](&kioSlowRecord{})
}

// TestKafkaSourceBacklogNotIdle is the test 3: a partition with a
// backlog but no new records is not idle. Two partitions each hold 100
// records, one a second apart in event time (partition 1's half a second
// after partition 0's), and a last record at B+200s; nothing is produced
// while the job runs. The source (bounded out-of-orderness 0, idleness
// 2 s) reads them slowly: at most 10 records per bundle
// (--max_bundle_size=10) and 40 ms per record in the source stage, about
// 8 s for the 202 records, longer than the idleness, and the consumer
// hands over one partition's fetched records before the other's, so a
// partition can wait seconds with its whole backlog unread. GET
// /watermarks, polled throughout, must never show a partition idle before
// its watermark has reached its last record (B+200s), and the 10-second
// windows must not fire past a partition's unread records: the output is
// exactly the ten windows [B, B+10s) … [B+90s, B+100s), 20 records each,
// and no element is dropped as late.
func TestKafkaSourceBacklogNotIdle(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	in, out := uniqueName(t, "in"), uniqueName(t, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kafkaenv.CreateTopics(ctx, bs, kafkaenv.TopicSpec{Name: in, Partitions: 2, Config: keepOld}, kafkaenv.TopicSpec{Name: out, Partitions: 1, Config: keepOld}); err != nil {
		t.Fatal(err)
	}
	const (
		base    = 1_700_000_040_000 // B, a minute boundary
		perPart = 100
		last    = base + 200_000 // every partition's last record
	)
	for p := int32(0); p < 2; p++ {
		var recs []kioRec
		for i := int64(0); i < perPart; i++ {
			recs = append(recs, kioRec{key: []byte(fmt.Sprintf("p%d-%d", p, i)), value: []byte("v"), ts: base + i*1000 + int64(p)*500})
		}
		recs = append(recs, kioRec{key: []byte(fmt.Sprintf("p%d-last", p)), value: []byte("v"), ts: last})
		produceAt(t, bs, in, p, recs...)
	}

	const idleness = 2 * time.Second
	p, s := beam.NewPipelineWithRoot()
	kvs := kafkaio.Read(s, in, kafkaio.WithBoundedOutOfOrderness(0), kafkaio.WithIdleness(idleness))
	kvs = beam.ParDo(s, &kioSlowRecord{Millis: 40}, kvs)
	counted := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(10*time.Second), beam.ParDo(s, kioConst, kvs)))
	kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counted)))

	jctx, jcancel := context.WithCancel(ctx)
	sctx, addrOf := serving(t, jctx)

	// Watch GET /watermarks while the job runs.
	var (
		mu         sync.Mutex
		violations []string
		firstRead  time.Time // a partition's watermark first past the start of time
		allRead    time.Time // every partition at its last record
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			addr := addrOf()
			if addr == "" {
				continue // not serving yet
			}
			name, st, err := sourceStage(addr)
			if err != nil {
				continue // not serving yet, or the stage has not reported
			}
			now := time.Now()
			mu.Lock()
			done := 0
			for q := 0; q < 2; q++ {
				pj, ok := partitionOf(name, st, q)
				if !ok {
					continue
				}
				if pj.Reported && pj.WatermarkMs > int64(mtime.MinTimestamp) && firstRead.IsZero() {
					firstRead = now
				}
				if pj.WatermarkMs >= last {
					done++
				} else if pj.Idle && len(violations) < 5 {
					violations = append(violations, fmt.Sprintf("at %s partition %d idle at watermark B%+dms, before its last record (B+200000ms): its backlog unread (stage watermark B%+dms)",
						now.Format("15:04:05.000"), q, pj.WatermarkMs-base, st.GlobalMs-base))
				}
			}
			if done == 2 && allRead.IsZero() {
				allRead = now
			}
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	start := time.Now()
	done := startJob(sctx, bs, uniqueName(t, "app"), p, func(o *runner.Options) { o.MaxBundleSize = 10 })
	defer func() { jcancel(); <-done }()

	var want []string
	for k := int64(0); k < 10; k++ {
		want = append(want, fmt.Sprintf("[%d,%d) 20", base+k*10_000, base+(k+1)*10_000))
	}
	got := readValues(t, bs, out, len(want), 60*time.Second)
	// The last window fires as the partitions read their last records: GET
	// /watermarks (fed by the report topic) may show them there a moment
	// after the output is out; give the watcher that moment.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		seen := !allRead.IsZero()
		mu.Unlock()
		if seen {
			break
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%v: %d windows; the source read from %v to %v after the start", time.Since(start).Round(time.Millisecond), len(got), firstRead.Sub(start).Round(time.Millisecond), allRead.Sub(start).Round(time.Millisecond))
	if len(violations) > 0 {
		t.Errorf("GET /watermarks showed a partition idle while it still had records to read:\n  %s", strings.Join(violations, "\n  "))
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("output %q, want %q", got, want)
	}
	got = readValues(t, bs, out, 0, 30*time.Second)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the whole output %q, want exactly %q", got, want)
	}
	if dropped, err := lateDropped(servingAddr(t, addrOf)); err != nil {
		t.Error(err)
	} else if dropped != 0 {
		t.Errorf("%v elements dropped as late, want none", dropped)
	}
	if !t.Failed() && (firstRead.IsZero() || allRead.IsZero() || allRead.Sub(firstRead) < idleness) {
		t.Fatalf("the source was read in %v (from %v to %v), not longer than its idleness (%v): the test tested nothing (slow it down)", allRead.Sub(firstRead), firstRead, allRead, idleness)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// Idleness end to end (issue 21 §1, apache/beam#33815): an upstream whose
// every task is idle never holds a stage further down, wherever several
// upstreams meet.

// idleSideCount is kioConst for a main input with a side input: the side
// input (topic b's records) is read whole, so the element waits for its
// window to be ready (or for the side input to be idle).
func idleSideCount(key, _ []byte, side func(*[]byte, *[]byte) bool) ([]byte, int) {
	var k, v []byte
	for side(&k, &v) {
	}
	return []byte("all"), 1
}

// idleCoGBKCount counts the values of topic a's side of a CoGroupByKey.
func idleCoGBKCount(_ []byte, as, bs func(*[]byte) bool) ([]byte, int) {
	n := 0
	var v []byte
	for as(&v) {
		n++
	}
	for bs(&v) {
		n++
	}
	return []byte("all"), n
}

// idleKeyAll keys every record by "all", keeping its value.
func idleKeyAll(_, v []byte) ([]byte, []byte) { return []byte("all"), v }

func init() {
	register.Function3x2(idleSideCount)
	register.Function3x2(idleCoGBKCount)
	register.Function2x2(idleKeyAll)
	register.Iter1[[]byte]()
	register.Iter2[[]byte, []byte]()
}

// TestIdleUpstreamDoesNotHoldDownstream is the case of apache/beam#33815 on
// the real broker: topic a (2 partitions) gets records at event times
// B+5 s, B+15 s, …, B+185 s and a closer at B+250 s on each partition;
// topic b (1 partition) never gets a record. Both sources have
// WithBoundedOutOfOrderness(1 s) and WithIdleness(3 s); 1-minute windows
// count a's records. b's partition idles out 3 s after it is assigned and
// leaves the minimum, so the windows a's watermark (B+249 s) has passed
// fire: [B, B+60 s) 6, [B+60, B+120 s) 6, [B+120, B+180 s) 6,
// [B+180, B+240 s) 1. Four places where upstreams meet:
//
//   - flatten: two kafkaio.Read, beam.Flatten (the Flatten's stage);
//   - readtopics: one kafkaio.ReadTopics(a, b) (one source stage per topic);
//   - cogbk: a CoGroupByKey of the two reads (one GroupByKey stage fed by
//     both source stages);
//   - sideinput: a's records in a ParDo with b's records as a side input in
//     the same windows (b's side input is idle: its windows are served
//     empty instead of holding a's elements).
//
// On main before the fix nothing was written: GET /watermarks showed b's
// source stage idle at the start of time, and the stage where they met at
// the start of time too. The test also checks that the scenario happened:
// b's source stage is idle at the start of time while the windows fire.
func TestIdleUpstreamDoesNotHoldDownstream(t *testing.T) {
	b := needBroker(t)
	bs := b.BootstrapServers()
	const base = 1_700_000_040_000 // a minute boundary in 2023
	for _, shape := range []string{"flatten", "readtopics", "cogbk", "sideinput"} {
		t.Run(shape, func(t *testing.T) {
			ta, tb, out := uniqueName(t, "a"), uniqueName(t, "b"), uniqueName(t, "out")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := kafkaenv.CreateTopics(ctx, bs, userTopic(ta, 2), userTopic(tb, 1), userTopic(out, 1)); err != nil {
				t.Fatal(err)
			}
			var recs [2][]kioRec
			for i, s := 0, int64(5); s <= 185; i, s = i+1, s+10 {
				recs[i%2] = append(recs[i%2], kioRec{key: []byte(fmt.Sprint("k", s)), value: []byte("v"), ts: base + s*1000})
			}
			for p := range recs {
				recs[p] = append(recs[p], kioRec{key: []byte("closer"), value: []byte("v"), ts: base + 250_000})
				produceAt(t, bs, ta, int32(p), recs[p]...)
			}

			opts := []kafkaio.Option{kafkaio.WithBoundedOutOfOrderness(time.Second), kafkaio.WithIdleness(3 * time.Second)}
			p, s := beam.NewPipelineWithRoot()
			minute := window.NewFixedWindows(time.Minute)
			var counts beam.PCollection
			switch shape {
			case "flatten":
				all := beam.Flatten(s, kafkaio.Read(s, ta, opts...), kafkaio.Read(s, tb, opts...))
				counts = stats.SumPerKey(s, beam.WindowInto(s, minute, beam.ParDo(s, kioConst, all)))
			case "readtopics":
				all := kafkaio.ReadTopics(s, []string{ta, tb}, opts...)
				counts = stats.SumPerKey(s, beam.WindowInto(s, minute, beam.ParDo(s, kioConst, all)))
			case "cogbk":
				a := beam.WindowInto(s, minute, beam.ParDo(s, idleKeyAll, kafkaio.Read(s, ta, opts...)))
				bb := beam.WindowInto(s, minute, beam.ParDo(s, idleKeyAll, kafkaio.Read(s, tb, opts...)))
				counts = beam.ParDo(s, idleCoGBKCount, beam.CoGroupByKey(s, a, bb))
			case "sideinput":
				a := beam.WindowInto(s, minute, kafkaio.Read(s, ta, opts...))
				side := beam.WindowInto(s, minute, kafkaio.Read(s, tb, opts...))
				counts = stats.SumPerKey(s, beam.ParDo(s, idleSideCount, a, beam.SideInput{Input: side}))
			}
			kafkaio.Write(s, out, beam.ParDo(s, kioToBytes, beam.ParDo(s, kioWindowCount, counts)))

			jctx, jcancel := context.WithCancel(ctx)
			sctx, addrOf := serving(t, jctx)
			done := startJob(sctx, bs, uniqueName(t, "app"), p)
			defer func() { jcancel(); <-done }()
			addr := servingAddr(t, addrOf)

			want := []string{
				fmt.Sprintf("[%d,%d) 6", base, base+60_000),
				fmt.Sprintf("[%d,%d) 6", base+60_000, base+120_000),
				fmt.Sprintf("[%d,%d) 6", base+120_000, base+180_000),
				fmt.Sprintf("[%d,%d) 1", base+180_000, base+240_000),
			}
			got := readValues(t, bs, out, len(want), 60*time.Second)
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("output %q, want %q (GET /watermarks: %s)", got, want, stageWatermarks(t, "http://"+addr+"/watermarks"))
			}
			// The scenario happened: b's source stage is idle at the start
			// of time (it never got a record) while the windows fired. (The
			// source stages' names are cut before the topic's: b's is the
			// one Kafka source at the start of time.)
			wms := stageWatermarks(t, "http://"+addr+"/watermarks")
			if n := strings.Count(wms, " idle=true wm=min "); n != 1 || !regexp.MustCompile(`kafkaio\.Read[^;]* idle=true wm=min `).MatchString(wms) {
				t.Errorf("want topic b's source stage, and only it, idle at the start of time: %s", wms)
			}
		})
	}
}

// stageWatermarks returns GET /watermarks' stages in one line each, sorted
// by name: "<name> idle=<allIdle> wm=<ms|min|max>" (the stage name of a
// Kafka source names its topic).
func stageWatermarks(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Stages map[string]struct {
			GlobalMs int64 `json:"globalMs"`
			AllIdle  bool  `json:"allIdle"`
			Held     bool  `json:"held"`
		} `json:"stages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for name, st := range body.Stages {
		wm := fmt.Sprint(st.GlobalMs)
		switch {
		case st.GlobalMs <= int64(mtime.MinTimestamp):
			wm = "min"
		case st.GlobalMs >= int64(mtime.MaxTimestamp):
			wm = "max"
		}
		rows = append(rows, fmt.Sprintf("%s idle=%v wm=%s held=%v", name, st.AllIdle, wm, st.Held))
	}
	sort.Strings(rows)
	return strings.Join(rows, "; ")
}

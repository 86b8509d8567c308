package integration

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/exec"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv"
	"github.com/kafkastreams/kafkastreams/stage/envelope"
)

// diagnose says, for each window the output got wrong, where the wrong
// sum came from: the input records of that key and window (topic r.in,
// partition@offset=amount), and the accumulators the GroupByKey stage
// read for it (its input topic, written by the source stage's
// precombine), read_committed and read_uncommitted. A read_committed sum
// of the accumulators above the input's says the source stage committed a
// record's contribution twice; equal to it, the GroupByKey stage counted
// an accumulator twice. Logged only: the test has failed already.
func (r *scRun) diagnose(wins []scWin) {
	t := r.t
	if len(wins) > 5 {
		wins = wins[:5] // a running total carries one wrong sum into every later window
	}
	want := map[scWin]bool{}
	for _, w := range wins {
		want[w] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	win := scWindow.Milliseconds()
	in, err := kafkaenv.Consume(ctx, r.bs, r.in, 0, kafkaenv.ReadCommitted, time.Minute)
	if err != nil {
		t.Logf("diagnose: read %s: %v", r.in, err)
	}
	inputs := map[scWin][]string{}
	inSum := map[scWin]int64{}
	for _, m := range in {
		ts := m.Timestamp.UnixMilli()
		w := scWin{string(m.Key), ts - ts%win}
		if !want[w] {
			continue
		}
		n, _ := strconv.ParseInt(string(m.Value), 10, 64)
		inSum[w] += n
		inputs[w] = append(inputs[w], fmt.Sprintf("%d@%d=%d", m.Partition, m.Offset, n))
	}
	if len(r.stages) < 2 {
		return
	}
	gbkIn := r.app + "-" + r.stages[1]
	dec := exec.MakeElementDecoder(coder.NewW(coder.NewKV([]*coder.Coder{coder.NewString(), coder.NewVarInt()}), coder.NewIntervalWindow()))
	for _, iso := range []kafkaenv.Isolation{kafkaenv.ReadCommitted, kafkaenv.ReadUncommitted} {
		recs, err := kafkaenv.Consume(ctx, r.bs, gbkIn, 0, iso, time.Minute)
		if err != nil {
			t.Logf("diagnose: read %s %s: %v", gbkIn, iso, err)
			continue
		}
		accs := map[scWin][]string{}
		accSum := map[scWin]int64{}
		undecoded := 0
		for _, m := range recs {
			el, _, err := envelope.Decode(m.Value)
			if err != nil || el == nil {
				continue // a report
			}
			fv, err := dec.Decode(bytes.NewReader(el))
			if err != nil || len(fv.Windows) != 1 {
				undecoded++
				continue
			}
			k, _ := fv.Elm.(string)
			v, _ := fv.Elm2.(int64)
			iw, ok := fv.Windows[0].(window.IntervalWindow)
			if !ok {
				undecoded++
				continue
			}
			w := scWin{k, int64(iw.Start)}
			if !want[w] {
				continue
			}
			accSum[w] += v
			accs[w] = append(accs[w], fmt.Sprintf("%d@%d=%d", m.Partition, m.Offset, v))
		}
		keys := make([]scWin, 0, len(want))
		for w := range want {
			keys = append(keys, w)
		}
		sort.Slice(keys, func(i, j int) bool {
			return keys[i].key < keys[j].key || keys[i].key == keys[j].key && keys[i].start < keys[j].start
		})
		for _, w := range keys {
			t.Logf("diagnose %s [%d, +%v): input sum %d from %d records %s; %s accumulators in %s: sum %d from %d records %s (%d undecodable)",
				w.key, w.start, scWindow, inSum[w], len(inputs[w]), strings.Join(inputs[w], " "), iso, gbkIn, accSum[w], len(accs[w]), strings.Join(accs[w], " "), undecoded)
		}
	}
}

package teststream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/cockroachdb/datadriven"
)

// TestParse runs testdata/parse.txt. The input of "parse" is one event a
// line:
//
//	add ts=T v=a,b,c        AddElements (values as their bytes)
//	watermark T             AdvanceWatermark
//	processing D            AdvanceProcessingTime by D ms
//	tag=X                   prefix: the event's output tag
//
// and the output the segments, one a line, or the error. Times are ms, or
// min and max.
func TestParse(t *testing.T) {
	datadriven.RunTest(t, "testdata/parse.txt", func(t *testing.T, d *datadriven.TestData) string {
		p := &pipepb.TestStreamPayload{}
		if d.HasArg("endpoint") {
			p.Endpoint = &pipepb.ApiServiceDescriptor{Url: "localhost:1"}
		}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			tag := ""
			if strings.HasPrefix(f[0], "tag=") {
				tag, f = strings.TrimPrefix(f[0], "tag="), f[1:]
			}
			switch f[0] {
			case "add":
				ts := parseTime(t, strings.TrimPrefix(f[1], "ts="))
				var es []*pipepb.TestStreamPayload_TimestampedElement
				for _, v := range strings.Split(strings.TrimPrefix(f[2], "v="), ",") {
					es = append(es, &pipepb.TestStreamPayload_TimestampedElement{EncodedElement: []byte(v), Timestamp: ts})
				}
				p.Events = append(p.Events, &pipepb.TestStreamPayload_Event{Event: &pipepb.TestStreamPayload_Event_ElementEvent{ElementEvent: &pipepb.TestStreamPayload_Event_AddElements{Elements: es, Tag: tag}}})
			case "watermark":
				p.Events = append(p.Events, &pipepb.TestStreamPayload_Event{Event: &pipepb.TestStreamPayload_Event_WatermarkEvent{WatermarkEvent: &pipepb.TestStreamPayload_Event_AdvanceWatermark{NewWatermark: parseTime(t, f[1]), Tag: tag}}})
			case "processing":
				p.Events = append(p.Events, &pipepb.TestStreamPayload_Event{Event: &pipepb.TestStreamPayload_Event_ProcessingTimeEvent{ProcessingTimeEvent: &pipepb.TestStreamPayload_Event_AdvanceProcessingTime{AdvanceDuration: parseTime(t, f[1])}}})
			default:
				t.Fatalf("unknown event %q", line)
			}
		}
		segs, err := Parse("ts", p)
		if err != nil {
			kind := "malformed"
			if errors.Is(err, ErrUnsupported) {
				kind = "unsupported"
			}
			return fmt.Sprintf("error (%s): %v\n", kind, err)
		}
		var b strings.Builder
		for i, s := range segs {
			fmt.Fprintf(&b, "%s: [", Record(i, len(segs)))
			for j, e := range s.Elements {
				if j > 0 {
					b.WriteString(" ")
				}
				fmt.Fprintf(&b, "%s@%s", e.Encoded, fmtTime(e.Timestamp))
			}
			fmt.Fprintf(&b, "] wm=%s", fmtTime(s.Watermark))
			if s.ProcessingAdvance != 0 {
				fmt.Fprintf(&b, " processing+=%d", s.ProcessingAdvance)
			}
			b.WriteString("\n")
		}
		return b.String()
	})
}

func parseTime(t *testing.T, s string) int64 {
	switch s {
	case "min":
		return int64(mtime.MinTimestamp)
	case "max":
		return int64(mtime.MaxTimestamp)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func fmtTime(m mtime.Time) string {
	switch m {
	case mtime.MinTimestamp:
		return "min"
	case mtime.MaxTimestamp:
		return "max"
	}
	return strconv.FormatInt(int64(m), 10)
}

// TestRecordRoundTrip: every record parses back to its index and count;
// anything else is ErrMalformed.
func TestRecordRoundTrip(t *testing.T) {
	for n := 1; n < 5; n++ {
		for i := 0; i < n; i++ {
			gi, gn, err := ParseRecord(Record(i, n))
			if err != nil || gi != i || gn != n {
				t.Fatalf("ParseRecord(Record(%d, %d)) = %d, %d, %v", i, n, gi, gn, err)
			}
		}
	}
	for _, bad := range []string{"", "impulse", "teststream segment 3 of 3", "teststream segment -1 of 3", "teststream segment 01 of 3", "teststream segment 1 of 3 "} {
		if _, _, err := ParseRecord([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRecord(%q): got %v, want ErrMalformed", bad, err)
		}
	}
}

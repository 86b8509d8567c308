package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kafkastreams/kafkastreams/watermarkmgr/explain"
)

// WatermarksJSON is the body of GET /watermarks: every stage by name.
type WatermarksJSON struct {
	Stages map[string]StageJSON `json:"stages"`
}

// StageJSON is one stage in GET /watermarks, shaped like seed 002's endpoint:
// the global (stage) watermark in milliseconds since the Unix epoch and as
// ISO-8601 UTC, why it is held, and every source partition keyed by
// "<stage>:<partition>".
type StageJSON struct {
	GlobalMs  int64  `json:"globalMs"`
	GlobalIso string `json:"globalIso"`
	// State says the watermark in words: "held" (a source partition has not
	// reported), "not started" (at mtime.MinTimestamp), "end of time" (at
	// mtime.MaxTimestamp: the stage is done) or "running".
	State string `json:"state"`
	// Held is true until every one of TotalSourcePartitions has reported.
	Held bool `json:"held"`
	// HeldBecause says why in words; empty when not held.
	HeldBecause string `json:"heldBecause,omitempty"`
	// MissingPartitions are the source partitions that have not reported.
	MissingPartitions     []int32 `json:"missingPartitions"`
	TotalSourcePartitions int32   `json:"totalSourcePartitions"`
	AllIdle               bool    `json:"allIdle"`
	// MinimumPartition is the partition key that defines GlobalMs, or null.
	MinimumPartition *string `json:"minimumPartition"`
	// LagMs is wall-clock minus GlobalMs, at the time of the request; null
	// when the watermark is at either end of Beam's range.
	LagMs *int64 `json:"lagMs"`
	// RejectedReports counts reports of this stage the manager refused.
	RejectedReports uint64                   `json:"rejectedReports"`
	Partitions      map[string]PartitionJSON `json:"partitions"`
}

// PartitionJSON is one source partition in GET /watermarks.
type PartitionJSON struct {
	WatermarkMs  int64  `json:"watermarkMs"`
	WatermarkIso string `json:"watermarkIso"`
	Idle         bool   `json:"idle"`
	Reported     bool   `json:"reported"`
	// Minimum is true for the partition that defines the stage's watermark.
	Minimum bool `json:"minimum"`
	// LastReportMs is the wall-clock time this process last applied a report
	// of the partition, in ms since the Unix epoch; absent if none.
	LastReportMs  *int64  `json:"lastReportMs,omitempty"`
	LastReportIso *string `json:"lastReportIso,omitempty"`
	// Owner is the instance whose transaction carried the partition's last
	// report naming one (WatermarkReport.instance): the task's owner then.
	Owner *string `json:"owner,omitempty"`
	// The fields of seed 002's endpoint for a partition of a user's topic
	// (Kafka source stages), as of the partition's last report: the event
	// time of its latest record (null before one), the idleness timeout
	// in force (ms; 0: off), and the alignment group (null without
	// alignment), whether alignment holds the partition, and its drift
	// from the group's minimum (ms). For other stages they read null,
	// false and 0.
	Topic               *string `json:"topic"`
	LastEventTimeMs     *int64  `json:"lastEventTimeMs"`
	LastEventTimeIso    *string `json:"lastEventTimeIso"`
	IdlenessTimeoutMs   int64   `json:"idlenessTimeoutMs"`
	AlignmentGroup      *string `json:"alignmentGroup"`
	AlignmentHeld       bool    `json:"alignmentHeld"`
	DriftFromGroupMinMs int64   `json:"driftFromGroupMinMs"`
	// UnreadBecause, for a partition of a user's topic whose log holds
	// records its consumer cannot read yet, says why ("a transaction is
	// open (last stable offset 40, high watermark 55)"); such a partition
	// is never idle (issue 21, section 2). Absent otherwise.
	UnreadBecause *string `json:"unreadBecause,omitempty"`
	// NotIdleBecause, for a partition of a user's topic that has had no
	// record for its idleness timeout and is not idle for another cause,
	// says why ("its leader cannot be fetched from (no leader, or its
	// broker is down)"). Absent otherwise.
	NotIdleBecause *string `json:"notIdleBecause,omitempty"`
}

// ISO formats an mtime.Time (ms) as ISO-8601 UTC with milliseconds. The ends
// of Beam's range keep their numeric date (as Java prints them).
func ISO(t mtime.Time) string {
	return time.UnixMilli(int64(t)).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// ToJSON turns a stage view into its GET /watermarks shape. now gives LagMs.
func ToJSON(v StageView, now time.Time) StageJSON {
	s := v.Snapshot
	out := StageJSON{
		GlobalMs:              int64(s.Watermark),
		GlobalIso:             ISO(s.Watermark),
		Held:                  s.Held,
		MissingPartitions:     append([]int32{}, s.Missing...),
		TotalSourcePartitions: s.Total,
		AllIdle:               s.AllIdle,
		State:                 stateWords(s.Held, s.Watermark),
		RejectedReports:       v.Rejected,
		Partitions:            make(map[string]PartitionJSON, len(s.Partitions)),
	}
	if s.Watermark > mtime.MinTimestamp && s.Watermark < mtime.MaxTimestamp {
		lag := now.UnixMilli() - int64(s.Watermark)
		out.LagMs = &lag
	}
	if s.Held {
		out.HeldBecause = fmt.Sprintf("waiting for %d of %d source partitions to report: %v", len(s.Missing), s.Total, s.Missing)
	}
	for _, p := range s.Partitions {
		key := v.Stage + ":" + strconv.Itoa(int(p.Partition))
		pj := PartitionJSON{
			WatermarkMs:  int64(p.Watermark),
			WatermarkIso: ISO(p.Watermark),
			Idle:         p.Idle,
			Reported:     p.Reported,
			Minimum:      p.Partition == s.MinPartition,
		}
		if src := v.Source[p.Partition]; src != nil {
			topic := src.GetTopic()
			pj.Topic = &topic
			if src.GetHasLastEventTime() {
				ms, iso := src.GetLastEventTimeMillis(), ISO(mtime.Time(src.GetLastEventTimeMillis()))
				pj.LastEventTimeMs, pj.LastEventTimeIso = &ms, &iso
			}
			pj.IdlenessTimeoutMs = src.GetIdlenessTimeoutMillis()
			if g := src.GetAlignmentGroup(); g != "" {
				pj.AlignmentGroup = &g
			}
			pj.AlignmentHeld = src.GetAlignmentHeld()
			pj.DriftFromGroupMinMs = src.GetDriftFromGroupMinMillis()
			if u := src.GetUnreadBecause(); u != "" {
				pj.UnreadBecause = &u
			}
			if n := src.GetNotIdleBecause(); n != "" {
				pj.NotIdleBecause = &n
			}
		}
		if o, ok := v.Owner[p.Partition]; ok {
			pj.Owner = &o
		}
		if at, ok := v.LastReport[p.Partition]; ok {
			ms, iso := at.UnixMilli(), at.UTC().Format(time.RFC3339Nano)
			pj.LastReportMs, pj.LastReportIso = &ms, &iso
		}
		if pj.Minimum {
			k := key
			out.MinimumPartition = &k
		}
		out.Partitions[key] = pj
	}
	return out
}

// stateWords is StageJSON.State.
func stateWords(held bool, wm mtime.Time) string {
	switch {
	case held:
		return "held"
	case wm <= mtime.MinTimestamp:
		return "not started"
	case wm >= mtime.MaxTimestamp:
		return "end of time"
	}
	return "running"
}

// Health is what GET /healthz reports; a nil error is healthy.
type Health func() error

// NewHTTPHandler serves:
//   - GET /watermarks: WatermarksJSON for every stage; ?stage=NAME for one
//     (404 naming the stage if unknown);
//   - GET /healthz: 200 "ok", or 503 with the error from health;
//   - GET /metrics: the Prometheus registry reg (nil: a fresh one holding the
//     tracker's collector only).
func NewHTTPHandler(t *Tracker, health Health, reg *prometheus.Registry) http.Handler {
	return NewHTTPHandlerWith(t, health, reg, nil)
}

// NewHTTPHandlerWith is NewHTTPHandler that also serves what info (called
// on every request; nil: an empty Info) adds to the reports:
//   - GET /watermarks/explain: ExplainJSON, why each stage's watermark is
//     where it is (watermarkmgr/explain);
//   - GET /: the live page (page/index.html, embedded), with GET /state
//     (PageState as JSON) and GET /events (server-sent events: a "state"
//     event a second and on every change, at most four a second; at most
//     MaxEventStreams at once, 503 with Retry-After beyond; each ends with
//     its request's context).
//
// It checks no Host header and sets no timeout: Server (Config.HTTPAddr)
// serves it with both; a caller serving it on its own listener must add
// them.
func NewHTTPHandlerWith(t *Tracker, health Health, reg *prometheus.Registry, info func() Info) http.Handler {
	if info == nil {
		info = func() Info { return Info{} }
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(NewCollector(t))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /watermarks", func(w http.ResponseWriter, r *http.Request) {
		now := t.Now()
		body := WatermarksJSON{Stages: map[string]StageJSON{}}
		if name := r.URL.Query().Get("stage"); name != "" {
			v, err := t.Stage(name)
			if errors.Is(err, ErrUnknownStage) {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			body.Stages[name] = ToJSON(v, now)
		} else {
			for _, v := range t.Stages() {
				body.Stages[v.Stage] = ToJSON(v, now)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if health != nil {
			if err := health(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /watermarks/explain", func(w http.ResponseWriter, r *http.Request) {
		i := info()
		body := ExplainJSON{StuckAfterMs: i.stuckAfter().Milliseconds(), Stages: Explain(t, i)}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	})
	registerPage(mux, t, info, MaxEventStreams)
	return mux
}

// ExplainJSON is the body of GET /watermarks/explain.
type ExplainJSON struct {
	// StuckAfterMs is the threshold in force (Info.StuckAfter), in ms.
	StuckAfterMs int64                 `json:"stuckAfterMs"`
	Stages       []explain.Explanation `json:"stages"`
}

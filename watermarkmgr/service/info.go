package service

import (
	"sort"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/watermarkmgr/explain"
)

// DefaultStuckAfter is the default of Info.StuckAfter and of the runner's
// --watermark_stuck_threshold: how long a stage's watermark must not have
// moved before it is explained as stuck.
const DefaultStuckAfter = time.Minute

// Info is what the service knows besides the report topic: the stage graph
// (from the application's plan) and, in a runner instance, its own tasks.
// Every field may be zero: the page and the explanations then say less.
type Info struct {
	// Instance is this process's instance id; empty for cmd/watermarkmgr.
	Instance string
	// Application is the application id; shown on the page.
	Application string
	// Stages is the stage graph in plan order; nil while unknown.
	Stages []StageInfo
	// Local returns, per stage name, what this instance knows of its tasks
	// of the stage; nil in cmd/watermarkmgr. Called on every request.
	Local func() map[string]LocalStage
	// App returns, per stage name, the application's counts (AppStage,
	// from its metrics topic); nil on an instance's page. Called on every
	// request. Server sets it when it reads Config.MetricsTopic.
	App func() map[string]AppStage
	// StuckAfter is how long a watermark must not have moved for its stage
	// to be explained as stuck; 0 means DefaultStuckAfter.
	StuckAfter time.Duration
}

// StageInfo is one stage of the plan (runner/plan.Stage), as the page and
// the explainer need it: the runner fills it from the plan
// (runner/plantopic.StageInfos); this package never reads the plan.
type StageInfo struct {
	Name string `json:"name"`
	// Head is the head's kind (plan.HeadKind: "impulse", "kafka_source",
	// "group_by_key", "stateful", "side_inputs", …).
	Head string `json:"head"`
	// HeadTransform is the head transform's unique name.
	HeadTransform string `json:"headTransform"`
	// InputTopic is the topic its tasks read, Partitions its partitions.
	InputTopic string `json:"inputTopic"`
	Partitions int32  `json:"partitions"`
	// Upstreams are the stages writing InputTopic; SideUpstreams those whose
	// output it reads as a side input.
	Upstreams     []string `json:"upstreams"`
	SideUpstreams []string `json:"sideUpstreams"`
	// Transforms are the fused transforms' unique names.
	Transforms []string `json:"transforms"`
	// KafkaSinks are the users' topics the stage writes.
	KafkaSinks []string `json:"kafkaSinks"`
}

// LocalStage is this instance's share of a stage: committed counters and
// the tasks it is assigned.
type LocalStage struct {
	RecordsIn   uint64 `json:"recordsIn"`
	ElementsIn  uint64 `json:"elementsIn"`
	ElementsOut uint64 `json:"elementsOut"`
	Commits     uint64 `json:"commits"`
	Aborts      uint64 `json:"aborts"`
	// DeadLetters counts the input records the stage wrote to its
	// dead-letter topic (stage.Stats.DeadLetters; --error_policy).
	DeadLetters uint64 `json:"deadLetters"`
	// LateDropped counts elements the stage's GroupByKey dropped as too
	// late (-1: not a GroupByKey stage).
	LateDropped int64 `json:"lateDropped"`
	// WindowsHeld is the (key, window) panes a GroupByKey stage's tasks
	// here hold open; TimersPending the timers a stateful stage's tasks
	// here have set and not fired or cleared (-1: not that kind of stage).
	WindowsHeld   int64       `json:"windowsHeld"`
	TimersPending int64       `json:"timersPending"`
	Tasks         []LocalTask `json:"tasks"`
}

// LocalTask is one task this instance is assigned (stage.TaskStatus).
type LocalTask struct {
	Partition    int32     `json:"partition"`
	AssignedAt   time.Time `json:"assignedAt"`
	AttemptSince time.Time `json:"attemptSince"`
	LastCommit   time.Time `json:"lastCommit"`
	Paused       bool      `json:"paused"`
	// LagRecords is the consumer lag in records; -1 unknown.
	LagRecords int64 `json:"lagRecords"`
}

// infoBox holds an Info that can be set after the server started.
type infoBox struct {
	mu   sync.Mutex
	info Info
}

func (b *infoBox) get() Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info
}

func (b *infoBox) set(i Info) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.info = i
}

func (i Info) stuckAfter() time.Duration {
	if i.StuckAfter <= 0 {
		return DefaultStuckAfter
	}
	return i.StuckAfter
}

// ExplainInput builds explain.Input from the tracker's views, the stage
// graph and the local tasks (local: by stage name; may be nil) at now;
// since is when the reports began to be watched (Tracker.Started).
// Stages come in the graph's order, then the stages only the reports name,
// by name.
func ExplainInput(views []StageView, info Info, local map[string]LocalStage, since, now time.Time) explain.Input {
	in := explain.Input{Now: now, Since: since, StuckAfter: info.stuckAfter()}
	byName := map[string]StageView{}
	for _, v := range views {
		byName[v.Stage] = v
	}
	seen := map[string]bool{}
	add := func(name string, si *StageInfo) {
		seen[name] = true
		st := explain.Stage{Name: name, MinPartition: -1}
		if si != nil {
			st.Upstreams = append(append([]string{}, si.Upstreams...), si.SideUpstreams...)
			st.Head = si.Head
		}
		v, ok := byName[name]
		if ok {
			s := v.Snapshot
			st.Reported = true
			st.Watermark, st.Held, st.Missing, st.Total, st.AllIdle, st.MinPartition, st.MovedAt = s.Watermark, s.Held, s.Missing, s.Total, s.AllIdle, s.MinPartition, v.MovedAt
		}
		tasks := map[int32]LocalTask{}
		st.Instance = info.Instance
		if ls, ok := local[name]; ok {
			for _, t := range ls.Tasks {
				tasks[t.Partition] = t
				st.LocalTasks = append(st.LocalTasks, t.Partition)
			}
		}
		for _, p := range v.Snapshot.Partitions {
			ep := explain.Partition{Partition: p.Partition, Watermark: p.Watermark, Reported: p.Reported, Idle: p.Idle, LastReport: v.LastReport[p.Partition], Owner: v.Owner[p.Partition]}
			if src := v.Source[p.Partition]; src != nil {
				ep.Source = &explain.Source{
					Topic: src.GetTopic(), HasLastEventTime: src.GetHasLastEventTime(), LastEventTime: mtime.Time(src.GetLastEventTimeMillis()),
					Idleness:       time.Duration(src.GetIdlenessTimeoutMillis()) * time.Millisecond,
					AlignmentGroup: src.GetAlignmentGroup(), AlignmentHeld: src.GetAlignmentHeld(),
					DriftFromGroupMin: time.Duration(src.GetDriftFromGroupMinMillis()) * time.Millisecond,
					UnreadBecause:     src.GetUnreadBecause(),
					NotIdleBecause:    src.GetNotIdleBecause(),
				}
			}
			if t, ok := tasks[p.Partition]; ok {
				ep.Local = &explain.Local{Instance: info.Instance, AttemptSince: t.AttemptSince, LastCommit: t.LastCommit, Paused: t.Paused, LagRecords: t.LagRecords}
			}
			st.Partitions = append(st.Partitions, ep)
		}
		in.Stages = append(in.Stages, st)
	}
	for i := range info.Stages {
		add(info.Stages[i].Name, &info.Stages[i])
	}
	var rest []string
	for name := range byName {
		if !seen[name] {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	for _, name := range rest {
		add(name, nil)
	}
	return in
}

// Explain returns the explanation of every stage the tracker or the graph
// knows, at the tracker's now.
func Explain(t *Tracker, info Info) []explain.Explanation {
	var local map[string]LocalStage
	if info.Local != nil {
		local = info.Local()
	}
	return explain.Explain(ExplainInput(t.Stages(), info, local, t.Started(), t.Now()))
}

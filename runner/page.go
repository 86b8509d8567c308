package runner

import (
	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/step"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

// localStages is this instance's share of every stage for the page and the
// explanations: committed counters and assigned tasks per stage.
func localStages(loops map[string]*stage.Loop, counters map[string]gbkCounters, heads map[string]step.Head) map[string]service.LocalStage {
	out := make(map[string]service.LocalStage, len(loops))
	for name, l := range loops {
		st := l.Stats()
		ls := service.LocalStage{RecordsIn: st.RecordsIn, ElementsIn: st.ElementsIn, ElementsOut: st.ElementsOut, Commits: st.Commits, Aborts: st.Aborts, DeadLetters: st.DeadLetters, LateDropped: -1, WindowsHeld: -1, TimersPending: -1}
		if h := counters[name]; h != nil {
			ls.LateDropped = h.Dropped()
		}
		if h, ok := heads[name].(windowCounts); ok {
			ls.WindowsHeld = h.WindowsHeld()
		}
		if h, ok := heads[name].(timerCounts); ok {
			ls.TimersPending = h.PendingTimers()
		}
		for _, t := range l.Tasks() {
			ls.Tasks = append(ls.Tasks, service.LocalTask{Partition: t.Partition, AssignedAt: t.AssignedAt, AttemptSince: t.AttemptSince, LastCommit: t.LastCommit, Paused: t.Paused, LagRecords: t.LagRecords})
		}
		out[name] = ls
	}
	return out
}

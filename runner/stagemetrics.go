package runner

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafkastreams/kafkastreams/stage"
	"github.com/kafkastreams/kafkastreams/stage/state"
)

// stageMetrics are the per-stage metrics an operator of a Kafka Streams
// application expects, on the instance's /metrics, in Prometheus' naming
// conventions: counters end in _total, durations are histograms in
// seconds, sizes in bytes. They count this instance's committed work
// (an aborted attempt adds to aborts only), like Kafka Streams' per-thread
// and per-task metrics.
type stageMetrics struct {
	recordsIn, elementsIn, elementsOut, bundles, commits, aborts, deadLetters *prometheus.CounterVec
	rebalances                                                                *prometheus.CounterVec
	commitSeconds, processSeconds                                             *prometheus.HistogramVec
	// untrusted is the service's kafkastreams_untrusted_records_total
	// (service.Server.Untrusted), by topic; nil in tests without one.
	untrusted *prometheus.CounterVec
}

// newStageMetrics registers the stage metrics on reg.
func newStageMetrics(reg prometheus.Registerer) *stageMetrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"stage"}, labels...))
		reg.MustRegister(c)
		return c
	}
	hist := func(name, help string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help,
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"stage"})
		reg.MustRegister(h)
		return h
	}
	return &stageMetrics{
		recordsIn:   counter("kafkastreams_stage_records_in_total", "Input records of the stage this instance committed (Kafka Streams: process-total)."),
		elementsIn:  counter("kafkastreams_stage_elements_in_total", "Elements that entered the stage's bundles in committed transactions (GroupByKey panes for a GroupByKey stage)."),
		elementsOut: counter("kafkastreams_stage_elements_out_total", "Elements the stage wrote to its output and sink topics in committed transactions."),
		bundles:     counter("kafkastreams_stage_bundles_total", "Bundles of the stage in committed transactions."),
		commits:     counter("kafkastreams_stage_commits_total", "Kafka transactions of the stage this instance committed (Kafka Streams: commit-total)."),
		aborts:      counter("kafkastreams_stage_aborts_total", "Attempts of the stage this instance aborted and rewound (a failed bundle, a failed commit)."),
		deadLetters: counter("kafkastreams_dead_letter_records_total", "Input records of the stage whose bundle failed every time (a DoFn's error or panic) that this instance wrote to the dead-letter topic in committed transactions (--error_policy=dead_letter; Kafka Streams: dropped-records-total)."),
		rebalances:  counter("kafkastreams_stage_rebalances_total", "Rebalance events of the stage's consumer on this instance, by event (assigned, revoked).", "event"),
		commitSeconds: hist("kafkastreams_stage_commit_duration_seconds",
			"Commit latency: from BeginTransaction to the end of CommitTransaction (producing the outputs, reports and offsets, and the commit), per committed transaction."),
		processSeconds: hist("kafkastreams_stage_bundle_processing_seconds",
			"Processing time of one committed transaction's bundles: the SDK harness running them and the head's work (runner-side GroupByKey, timers), before the transaction begins."),
	}
}

// observer is the stage loop's Observer feeding the metrics of stage name.
func (m *stageMetrics) observer(name string) stage.Observer {
	recordsIn, elementsIn, elementsOut := m.recordsIn.WithLabelValues(name), m.elementsIn.WithLabelValues(name), m.elementsOut.WithLabelValues(name)
	bundles, commits, aborts := m.bundles.WithLabelValues(name), m.commits.WithLabelValues(name), m.aborts.WithLabelValues(name)
	deadLetters := m.deadLetters.WithLabelValues(name)
	assigned, revoked := m.rebalances.WithLabelValues(name, "assigned"), m.rebalances.WithLabelValues(name, "revoked")
	commitSeconds, processSeconds := m.commitSeconds.WithLabelValues(name), m.processSeconds.WithLabelValues(name)
	return stage.Observer{
		Committed: func(o stage.CommitObservation) {
			recordsIn.Add(float64(o.Stats.RecordsIn))
			elementsIn.Add(float64(o.Stats.ElementsIn))
			elementsOut.Add(float64(o.Stats.ElementsOut))
			bundles.Add(float64(o.Stats.Bundles))
			deadLetters.Add(float64(o.Stats.DeadLetters))
			commits.Inc()
			commitSeconds.Observe(o.Commit.Seconds())
			processSeconds.Observe(o.Process.Seconds())
		},
		Aborted: func() { aborts.Inc() },
		Untrusted: func(topic string, n int) {
			if m.untrusted != nil {
				m.untrusted.WithLabelValues(topic).Add(float64(n))
			}
		},
		Rebalanced: func(a, r []int32) {
			if len(a) > 0 {
				assigned.Inc()
			}
			if len(r) > 0 {
				revoked.Inc()
			}
		},
	}
}

var (
	descAssignedTasks = prometheus.NewDesc("kafkastreams_instance_assigned_tasks",
		"Tasks (input partitions) of the stage this instance is assigned.", []string{"stage"}, nil)
	descConsumerLag = prometheus.NewDesc("kafkastreams_task_consumer_lag_records",
		"Records of the task's input partition not read yet: its last stable offset (high watermark under read_uncommitted) minus the offset the loop reads next, from librdkafka's statistics every second (stage.ConsumerLag); no sample while unknown.", []string{"stage", "partition"}, nil)
	descStoreBytes = prometheus.NewDesc("kafkastreams_task_state_store_bytes",
		"Disk space of the task's state store (Pebble: SSTs, WAL, manifests), in bytes.", []string{"stage", "partition"}, nil)
	descRestoring = prometheus.NewDesc("kafkastreams_task_state_restoring",
		"1 while the task's state store is being restored from its changelog partition, else 0.", []string{"stage", "partition"}, nil)
	descRestored = prometheus.NewDesc("kafkastreams_task_state_restored_records",
		"Changelog records applied by the task's current (or last) state store restore.", []string{"stage", "partition"}, nil)
	descRestoreKind = prometheus.NewDesc("kafkastreams_task_state_restore_kind",
		"1 for how the task's last state store restore began (state.StoreStats.RestoreKind): full (the changelog from its start), kept (the store this instance kept, and the changelog's tail) or standby (a standby copy, --standby_replicas, and the tail); no sample while restoring.", []string{"stage", "partition", "kind"}, nil)
)

// taskCollector exports, at scrape time, the per-task gauges: assigned
// tasks, consumer lag, state store size and restore progress. tasks and
// stores return, per stage, what the loops and the state managers say.
type taskCollector struct {
	tasks  func() map[string][]stage.TaskStatus
	stores func() map[string][]state.StoreStats
}

// Describe implements prometheus.Collector.
func (c taskCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAssignedTasks, descConsumerLag, descStoreBytes, descRestoring, descRestored, descRestoreKind} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c taskCollector) Collect(ch chan<- prometheus.Metric) {
	for name, ts := range c.tasks() {
		ch <- prometheus.MustNewConstMetric(descAssignedTasks, prometheus.GaugeValue, float64(len(ts)), name)
		for _, t := range ts {
			if t.LagRecords >= 0 {
				ch <- prometheus.MustNewConstMetric(descConsumerLag, prometheus.GaugeValue, float64(t.LagRecords), name, strconv.Itoa(int(t.Partition)))
			}
		}
	}
	for name, ss := range c.stores() {
		for _, s := range ss {
			p := strconv.Itoa(int(s.Partition))
			restoring := 0.0
			if s.Restoring {
				restoring = 1
			}
			ch <- prometheus.MustNewConstMetric(descStoreBytes, prometheus.GaugeValue, float64(s.SizeBytes), name, p)
			ch <- prometheus.MustNewConstMetric(descRestoring, prometheus.GaugeValue, restoring, name, p)
			ch <- prometheus.MustNewConstMetric(descRestored, prometheus.GaugeValue, float64(s.RestoredRecords), name, p)
			if s.RestoreKind != "" {
				ch <- prometheus.MustNewConstMetric(descRestoreKind, prometheus.GaugeValue, 1, name, p, s.RestoreKind)
			}
		}
	}
}

package service

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descWatermark = prometheus.NewDesc("kafkastreams_watermark_millis",
		"Emitted watermark of a stage, Beam event time in milliseconds since the Unix epoch.",
		[]string{"stage"}, nil)
	descLag = prometheus.NewDesc("kafkastreams_watermark_lag_seconds",
		"Wall-clock time minus the stage's watermark, in seconds; no sample while the watermark is at an end of Beam's time range (held at the start of time, or done at the end of time), where a lag has no value.",
		[]string{"stage"}, nil)
	descHeld = prometheus.NewDesc("kafkastreams_watermark_held",
		"1 while the stage's watermark is held because a source partition has not reported, else 0.",
		[]string{"stage"}, nil)
	descMissing = prometheus.NewDesc("kafkastreams_watermark_missing_partitions",
		"Source partitions of the stage that have not reported.",
		[]string{"stage"}, nil)
	descRejected = prometheus.NewDesc("kafkastreams_watermark_rejected_reports_total",
		"Reports of the stage the WatermarkManager refused (partition out of range, bad total, watermark out of range).",
		[]string{"stage"}, nil)
)

// Collector exports a Tracker's stages as Prometheus metrics, computed at
// scrape time (the lag uses the Tracker's clock).
type Collector struct{ t *Tracker }

// NewCollector returns a Collector over t.
func NewCollector(t *Tracker) *Collector { return &Collector{t: t} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWatermark, descLag, descHeld, descMissing, descRejected} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := c.t.Now()
	for _, v := range c.t.Stages() {
		s := v.Snapshot
		held := 0.0
		if s.Held {
			held = 1
		}
		ch <- prometheus.MustNewConstMetric(descWatermark, prometheus.GaugeValue, float64(s.Watermark), v.Stage)
		if s.Watermark > mtime.MinTimestamp && s.Watermark < mtime.MaxTimestamp {
			// At the ends (a held stage, a done one) the lag would read
			// ±9.2e12 s, breaking dashboards and alerts: no sample.
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(now.UnixMilli()-int64(s.Watermark))/1000, v.Stage)
		}
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, held, v.Stage)
		ch <- prometheus.MustNewConstMetric(descMissing, prometheus.GaugeValue, float64(len(s.Missing)), v.Stage)
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(v.Rejected), v.Stage)
	}
}

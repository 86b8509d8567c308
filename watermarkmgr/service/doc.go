// Package service is the WatermarkManager service: it consumes an application's
// report topic (read_committed), keeps one watermarkmgr.Manager per stage, and
// serves what they know over HTTP (GET /watermarks, GET /healthz, GET /metrics
// for Prometheus) and gRPC (kafkastreams.v1.WatermarkService). cmd/watermarkmgr
// runs it as a process; every runner instance embeds it to know when a bounded
// job is done.
//
// It also serves the live page at / (page/, embedded; pagehttp.go), the
// page's state (GET /state, server-sent events at GET /events) and why each
// stage's watermark is where it is (GET /watermarks/explain, through the
// pure watermarkmgr/explain). What the report topic does not say comes from
// Info (Server.SetInfo): the stage graph (StageInfo: a narrow copy of the
// plan's stages that the runner and cmd/watermarkmgr fill from the plan,
// runner/plantopic.StageInfos) and the serving instance's own tasks.
//
// Its HTTP server (httpserver.go, Config.HTTPAddr) has read, write and idle
// timeouts, refuses a request naming another host when it listens on a
// loopback address (hostGuard: DNS rebinding), serves at most
// MaxEventStreams GET /events streams, and Stop ends them first. What it
// says (log lines, Start's error, GET /healthz) goes through
// stage/kafkaclient's Redact: no secret client property is shown.
//
// It may import watermarkmgr and watermarkmgr/explain (the pure cores),
// proto/kafkastreams/v1, stage/kafkaclient (the leaf Kafka package: topic
// names, reader configurations), confluent-kafka-go, gRPC, the
// Prometheus client and Beam's mtime and Fn API protos (a bundle's
// metrics: appcounts.go); nothing else of stage or runner (stage/archtest
// checks it). Nothing in watermarkmgr imports it.
//
// Goroutines and locks: Tracker is safe for concurrent use; its state is
// guarded by Tracker.mu, taken for the whole of a batch so a reader never sees
// half a batch. Consumer.Run owns the Kafka consumer and is the only writer;
// HTTP and gRPC handlers only read snapshots. Watchers wait on a channel that
// is closed and replaced on every change (no lock is held while sending).
package service

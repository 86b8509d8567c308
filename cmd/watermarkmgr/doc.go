// Command watermarkmgr runs the WatermarkManager service for one kafkastreams
// application: it reads the application's report topic (read_committed) and
// serves every stage's watermark.
//
//	watermarkmgr --bootstrap_servers=127.0.0.1:9092 --application_id=wordcount
//
// HTTP (default 127.0.0.1:8089): GET /watermarks[?stage=NAME], GET /healthz,
// GET /metrics. gRPC (default 127.0.0.1:8090): kafkastreams.v1.WatermarkService.
package main

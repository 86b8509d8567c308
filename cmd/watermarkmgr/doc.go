// Command watermarkmgr runs the WatermarkManager service for one kafkastreams
// application: it reads the application's report topic (read_committed) and
// serves every stage's watermark.
//
//	watermarkmgr --bootstrap_servers=127.0.0.1:9092 --application_id=wordcount
//
// HTTP (default 127.0.0.1:8089): GET /watermarks[?stage=NAME], GET
// /watermarks/explain (why each stage's watermark is where it is; stuck after
// --watermark_stuck_threshold, default 1m), GET /healthz, GET /metrics, and
// the live page at / (the stage graph from the application's plan topic,
// read once it exists; each stage's counts, summed over every instance's
// committed transactions, from its metrics topic <application_id>-metrics). gRPC (default 127.0.0.1:8090):
// kafkastreams.v1.WatermarkService.
package main

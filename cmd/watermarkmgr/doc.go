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
//
// Bound to a loopback address (the default), the HTTP server answers only
// requests addressed to localhost, a loopback address or the host of
// --http_addr, and refuses others with 403 (a web page cannot read it
// through DNS rebinding); bound to another address or the wildcard, any.
// It serves at most 8 live pages at once (service.MaxEventStreams).
//
// The --kafka_property settings are printed at start-up with the value of
// each secret one (stage/kafkaclient.SecretProperty: passwords,
// passphrases, client secrets, private keys, sasl.oauthbearer.config) as
// "***", and every log line goes through kafkaclient.RedactHandler.
package main

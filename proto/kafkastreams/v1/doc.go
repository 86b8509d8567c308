// Package kafkastreamsv1 is the generated Go for proto/kafkastreams/v1/*.proto:
// WatermarkReport, Envelope and the WatermarkService gRPC API. Do not edit the
// *.pb.go files; change the .proto and run `make proto`.
//
// report.go is written by hand: WatermarkReport.Core, the one translation of
// a report into the WatermarkManager core's watermarkmgr.Report. This
// package imports watermarkmgr, never the other way round.
package kafkastreamsv1

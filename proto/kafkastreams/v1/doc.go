// Package kafkastreamsv1 is the generated Go for proto/kafkastreams/v1/*.proto:
// WatermarkReport, Envelope and the WatermarkService gRPC API. Do not edit the
// *.pb.go files; change the .proto and run `make proto`.
package kafkastreamsv1

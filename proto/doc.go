// Package proto holds the .proto files of what kafkastreams puts on the wire,
// with their generated Go committed beside them, one Go package per proto
// package (kafkastreams/v1: the watermark report, the envelope that tells an
// element record from a report on a data topic, and the WatermarkManager gRPC
// API). `make proto` (proto/gen.sh) regenerates them with protoc from Debian's
// protobuf-compiler and the protoc-gen-go and protoc-gen-go-grpc versions pinned
// as tool dependencies in go.mod; CI fails if the committed output is stale.
//
// Generated packages import only protobuf and gRPC.
package proto

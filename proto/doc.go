// Package proto holds the .proto files of what kafkastreams puts on the wire and
// their generated Go: the watermark report, the envelope that tells an element
// record from a report on a data topic, and the WatermarkManager gRPC API.
// Generated code is committed; `make proto` regenerates it.
//
// It imports only protobuf and gRPC.
package proto

// Package kraftconfig writes the configuration of a one-node Apache Kafka 4.x
// KRaft cluster (one process that is both broker and controller) and builds
// the java command lines that format its storage and start it.
//
// It is shared by the local-process mode of package kafkaenv and by the
// entrypoint of the FROM-scratch broker image (image/entrypoint), so both
// start exactly the same broker. It imports only the standard library: the
// entrypoint is a static CGO_ENABLED=0 binary.
//
// Invariants of the generated server.properties:
//   - every listener binds 127.0.0.1 (or Config.Host): never a wildcard address;
//   - replication factor 1 and min ISR 1 everywhere, so a single node can run
//     transactions and consumer groups;
//   - group.initial.rebalance.delay.ms=0, so tests do not wait 3 s per group.
package kraftconfig

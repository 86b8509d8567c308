// Package kafkaenv provides a real Apache Kafka 4.x broker (KRaft, one
// combined broker+controller node) to the integration tests and to
// cmd/localkafka (`make run`), and small client helpers for tests.
//
// Where the broker comes from (Start, in this order unless Options.Mode or
// the environment variable KAFKASTREAMS_KAFKA_MODE forces one):
//
//  1. external: KAFKA_BOOTSTRAP_SERVERS is set; that cluster is used and
//     nothing is started.
//  2. container: a Docker daemon answers; the project's own image
//     kafkastreams/kafka:<version> (built by `make kafka-image`, never pulled)
//     is started through testcontainers-go with host networking. Ryuk is
//     disabled (its image cannot be pulled here); instead Start removes
//     containers left behind by dead test processes.
//  3. process: `java -cp '<jars>/*' kafka.Kafka server.properties` as a child
//     process, after the storage format step. The jars come from Maven
//     Central through pom.xml (`make kafka-jars`; Start fetches them if
//     missing). Start logs why it fell back.
//
// A broker Start launched is reported ready once it is warm: both internal
// topics (__consumer_offsets, __transaction_state) exist and every
// partition's coordinator answers, as on a user's long-lived broker (a fresh
// one creates and loads them on first use, which a runner's start-up paid:
// 1-4 s). StartCluster's nodes and an external cluster are taken as they
// are.
//
// Options.SCRAM starts a local process broker that enforces ACLs: a
// SASL_PLAINTEXT listener with SCRAM-SHA-256 logins (credentials made by
// the storage format step, --add-scram), the StandardAuthorizer and no
// access without an ACL, beside the PLAINTEXT listener of the operator
// (User:ANONYMOUS, a super user). The ACL test of the README's table runs
// on it.
//
// Every listener binds 127.0.0.1 on ports chosen free at start (or given in
// Options). The broker configuration lives in kraftconfig, shared with the
// image's entrypoint.
//
// Imports: the standard library, confluent-kafka-go (cgo), testcontainers-go
// and the Docker client it brings, and stage/kafkaclient (where a read ends). Nothing of the runner imports this package.
package kafkaenv

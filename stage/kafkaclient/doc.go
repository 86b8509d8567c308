// Package kafkaclient is the one home of what every part of the runner needs
// of a Kafka client: the librdkafka configurations (config.go), the names of
// an application's internal topics and transactional ids (topics.go), reading
// a partition to its log end offset and asking for log ends (logend.go),
// and the producer helpers every producer of the runner shares
// (producer.go); and, in its subpackage javapartition, the Java client's
// partitioner.
//
// # What lives here
//
//   - Base and the configurations built on it (config.go): a client's
//     properties (the user's --kafka_property settings) with its
//     bootstrap.servers; the transactional producer of a stage
//     (TransactionalProducerConfig), the lean and the idempotent producers
//     (LeanProducerConfig, IdempotentProducerConfig), a stage's group
//     consumer (GroupConsumerConfig) and the never-joined read_committed
//     reader that assigns itself partitions and commits nothing
//     (AssignedReaderConfig). Each function's doc comment lists the keys it
//     sets; the caller's own settings come first and the function's win,
//     except where the doc comment says otherwise.
//   - NewConsumer (consumer.go): every consumer of the module is made
//     there, with ConsumerDefaults (fetch.queue.backoff.ms
//     FetchQueueBackoff unless the user sets one);
//     TestConsumersAreMadeHere finds any other kafka.NewConsumer call.
//   - Topic names (topics.go): PlanTopic, ReportTopic, MetricsTopic,
//     ControlTopic, ChangelogTopic and TransactionalID. The data topics
//     between stages are named by the plan (runner/plan), a pure package
//     that imports no Kafka client.
//   - Log ends (logend.go): LogEnds, ReadToEnd, ReachedEnd, EndReaderConfig,
//     NewEndReader and ReadLast (what was stage/logend; see "Reading to the end"
//     below), and HighAndStable, the high watermark and last stable offset
//     a Kafka source's idleness check asks for.
//   - javapartition.ForKey (javapartition/): the partition Apache Kafka's
//     Java client gives a key (murmur2), for topics Java clients share. A
//     package of its own that imports no Kafka client, for the pure commit
//     step (stage/step/output.go) that partitions a sink's records.
//   - LeanProducerChannels and InitTransactions (producer.go).
//   - WaitServed (served.go): after creating topics, wait until every new
//     partition's leader serves it, before the first produce (records are
//     lost without an error otherwise: KAFKA-15591).
//   - Redaction (redact.go): SecretProperty (which librdkafka properties
//     hold secrets) and Redact, the one function every error, log line and
//     printed property map that may hold a client's configuration goes
//     through (RedactError, RedactHandler for a slog.Logger,
//     FormatProperties for a --kafka_property flag), in the runner and in
//     cmd/watermarkmgr alike.
//
// # Reading to the end
//
// A reader that reads a partition from its beginning must know when it has
// read everything written before it started, read_committed included. The
// obvious end, the partition EOF event of a read_committed consumer, is not
// it: librdkafka raises that EOF at the last stable offset (LSO), and a
// transaction whose EndTxn(commit) has already returned to its producer is
// not stable until the transaction coordinator has written its commit marker
// to the partition, a moment later. A reader that stopped at that first EOF
// would miss a committed transaction: a restored state store one commit
// behind the offsets committed with it, a plan read as absent, a test that
// sees 6 of 10 committed records (CI, 2026-11-30).
//
// The end used here is the log end offset (the high watermark, asked with
// isolation level read_uncommitted) when the reader starts. A read_committed
// reader has read every committed record below it once its partition EOF
// event is at or past it; that needs every transaction with records below it
// to be complete (committed or aborted), so a transaction left open by a
// killed producer holds the reader until the broker aborts it
// (transaction.timeout.ms), as it holds every read_committed consumer.
//
// # What it may import
//
// The standard library, confluent-kafka-go and this module's proto
// packages; nothing of stage, runner or watermarkmgr (stage/archtest
// checks it), so that every layer may use it: the stage
// loop, the state store, the side inputs, the WatermarkManager service and
// runner/kafkaio, the API a user's binary links.
package kafkaclient

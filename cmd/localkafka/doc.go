// Command localkafka starts a real Apache Kafka broker on 127.0.0.1 for local
// runs (`make run`) and manual testing, prints its address, and stops it on
// SIGINT or SIGTERM.
//
// It uses integration/kafkaenv: the project's image through testcontainers-go
// when a Docker daemon answers, else a local java process (the jars come
// from Maven Central). KAFKA_BOOTSTRAP_SERVERS, if set, is used instead and
// nothing is started.
//
// Output: one line on stdout, `KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:NNNN`, so
// `eval "$(localkafka -once)"` works; progress goes to stderr. The line comes
// once a broker it started is warm: its internal topics __consumer_offsets
// and __transaction_state exist and are loaded (kafkaenv.Start), so a job
// started on it does not wait for their creation.
//
// Flags:
//
//	-mode auto|container|process|external   where the broker runs [auto]
//	-broker-port N       client listener port, 0 for a free one [0]
//	-controller-port N   controller listener port, 0 for a free one [0]
//	-once                stop right after printing (a smoke test) [false]
//	-broker-log          copy the broker's own log to stderr [false]
package main

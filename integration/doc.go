// Package integration holds the scenario tests that run the runner against a
// real Apache Kafka broker (steady state, scale-out, clean scale-in, SIGKILL,
// partition reassignment). Nothing outside tests imports it; the broker
// provisioning it shares with cmd lives in integration/kafkaenv.
package integration

// Command entrypoint is PID 1 of the kafkastreams/kafka image (FROM scratch:
// no shell). It writes server.properties and log4j2.properties with
// kraftconfig, formats the KRaft log directory with kafka.tools.StorageTool,
// then replaces itself (execve) with `java ... kafka.Kafka server.properties`,
// so the JVM receives docker stop's SIGTERM directly.
//
// Build it static: CGO_ENABLED=0 go build. Flags (defaults in brackets):
//
//	-broker-port N       client listener port on -host [9092]
//	-controller-port N   KRaft controller listener port on -host [9093]
//	-host ADDR           address both listeners bind [127.0.0.1]
//	-log-dir DIR         log.dirs [/tmp/kafka-logs]
//	-config-dir DIR      where the properties files go [/tmp/kafka-config]
//	-cluster-id ID       22-char KRaft cluster id [random]
//	-java PATH           java binary [/opt/java/bin/java]
//	-libs DIR            Kafka jars [/opt/kafka/libs]
//	-heap-mb N           -Xmx in MiB [512]
//	-set key=value       extra server.properties entry, repeatable
package main

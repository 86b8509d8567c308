#!/bin/sh
# Regenerates the javaVectors table of stage/kafkaclient/javapartition/javapartition_test.go from the
# real Java client. Needs a JDK (javac, java) and the Kafka jars that
# `make kafka-jars` puts in .cache/kafka/<version>/libs/.
#
#   stage/kafkaclient/javapartition/testdata/gen.sh [kafka-version]  > /tmp/vectors.go.txt
#
# then replace the rows of javaVectors with the output.
set -eu
version=${1:-4.1.1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
jar="$root/.cache/kafka/$version/libs/kafka-clients-$version.jar"
test -f "$jar" || { echo "missing $jar: run make kafka-jars" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
javac -encoding UTF-8 -d "$out" -cp "$jar" "$here/JavaPartitionVectors.java"
# slf4j is optional for AppInfoParser; add the libs directory for it anyway.
java -Dfile.encoding=UTF-8 -cp "$out:$root/.cache/kafka/$version/libs/*" JavaPartitionVectors

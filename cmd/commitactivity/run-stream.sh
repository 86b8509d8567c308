#!/usr/bin/env bash
# `make run-stream`: the streaming variant of the main job, start to finish,
# on this machine.
#
#  1. starts a single-node Kafka broker as `make run` does (broker.sh: the
#     project's image when a Docker daemon answers, else a local java
#     process; the cluster in $KAFKA_BOOTSTRAP_SERVERS instead, if set);
#  2. loads git-commits.csv into a new topic of 4 partitions, in the file's
#     (arrival) order, keyed by area, each record's CreateTime its event_ms
#     (bin/commitactivity --load);
#  3. runs the streaming job on it (bin/commitactivity --stream: a bounded
#     kafkaio.Read with a 30-day out-of-orderness watermark, the same windows
#     with 365 days of allowed lateness and accumulating panes, kafkaio.Write
#     of every pane's rows to an output topic), which prints the final table,
#     the on-time, late and dropped rows and the check, and fails if the
#     check does;
#  4. prints how long the job took, and stops the broker it started.
#
# Environment: LOG_DIR for every process's full log [bin/run-logs];
# WATERMARKS_PORT, the job's --watermarks_addr port (GET /watermarks, the
# live page at /) [0: a free one, logged]. Run from
# the repository's root, after building bin/localkafka and bin/commitactivity
# (the Makefile does both).
set -euo pipefail

LOG_DIR=${LOG_DIR:-bin/run-logs}
mkdir -p "$LOG_DIR"
rm -f "$LOG_DIR"/*.log
source "$(dirname "$0")/broker.sh"

# 1. The broker.
start_broker

# 2. The input topic.
app="commitstream-$(date +%Y%m%d-%H%M%S)"
in="$app-commits"
out="$app-rows"
say "loading cmd/commitactivity/data/git-commits.csv into topic $in"
bin/commitactivity --load --bootstrap_servers="$bootstrap" --input_topic="$in" \
	2> "$LOG_DIR/load.log" | sed 's/^/   /' || { echo "run: the load failed; its log: $LOG_DIR/load.log" >&2; exit 1; }

# 3. The job.
say "running the streaming job on --runner=kafkastreams: --application_id=$app, $in -> $out"
t2=$(now_ms)
# Its log (stderr) filtered as it comes, then its report (stdout).
set +e
bin/commitactivity --stream --runner=kafkastreams --bootstrap_servers="$bootstrap" --application_id="$app" \
	--input_topic="$in" --output_topic="$out" --watermarks_addr="127.0.0.1:${WATERMARKS_PORT:-0}" \
	2>&1 >"$LOG_DIR/stream.out" | tee "$LOG_DIR/stream.log" | filter ""
status=${PIPESTATUS[0]}
set -e
t3=$(now_ms)
sed 's/^/   /' "$LOG_DIR/stream.out"
echo "   the job took $(secs $((t3 - t2))) (wall time of 1 instance, from its start to its exit); the broker started in $(secs $((t1 - t0)))"
if ((status != 0)); then
	echo "run: the streaming job failed; its log: $LOG_DIR/stream.log" >&2
	exit "$status"
fi

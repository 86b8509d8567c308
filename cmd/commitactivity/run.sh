#!/usr/bin/env bash
# `make run`: the main job on real input, start to finish, on this machine.
#
#  1. starts a single-node Kafka broker with bin/localkafka (the project's
#     image when a Docker daemon answers, else a local java process; the
#     cluster in $KAFKA_BOOTSTRAP_SERVERS instead, if set: nothing is started);
#  2. runs bin/commitactivity --runner=kafkastreams as $INSTANCES OS processes
#     with one --application_id: they share the work through Kafka;
#  3. prints the table once, read back from the job's output topic (and
#     checked against the CSV file), and how long the job took;
#  4. stops the broker it started (also on Ctrl-C or a failure).
#
# Environment: INSTANCES [1]; OUTPUT, the CSV file [bin/commitactivity.csv];
# WATERMARKS_PORT, the first instance's GET /watermarks port, the next ones
# count up [0: a free port each, logged]; LOG_DIR for every process's full
# log [bin/run-logs]. Run from the repository's root, after building
# bin/localkafka and bin/commitactivity (the Makefile does both).
set -euo pipefail

INSTANCES=${INSTANCES:-1}
OUTPUT=${OUTPUT:-bin/commitactivity.csv}
WATERMARKS_PORT=${WATERMARKS_PORT:-0}
LOG_DIR=${LOG_DIR:-bin/run-logs}
[[ $INSTANCES =~ ^[1-9][0-9]*$ ]] || { echo "run: INSTANCES must be a positive number, not '$INSTANCES'" >&2; exit 2; }

mkdir -p "$LOG_DIR"
rm -f "$LOG_DIR"/*.log "$OUTPUT"
source "$(dirname "$0")/broker.sh"

# 1. The broker.
start_broker

# 2. The job.
app="commitactivity-$(date +%Y%m%d-%H%M%S)"
say "running the job on --runner=kafkastreams: $INSTANCES instance(s) of --application_id=$app"
cat <<EOF
   Each instance logs its progress every 10 s: the stages done, each stage's
   output watermark ("done (end of time)" when finished) and the elements it
   took in and gave out. While it runs, watch every stage's watermark with
   the curl each instance logs, e.g.
       curl -s http://127.0.0.1:PORT/watermarks
   (--watermarks_addr sets the address; WATERMARKS_PORT=8080 make run).
   Full logs: $LOG_DIR/instance-N.log
EOF
t2=$(now_ms)
for i in $(seq 1 "$INSTANCES"); do
	wm_addr="127.0.0.1:0"
	if [[ $WATERMARKS_PORT != 0 ]]; then wm_addr="127.0.0.1:$((WATERMARKS_PORT + i - 1))"; fi
	prefix=""
	if ((INSTANCES > 1)); then prefix="[$i] "; fi
	bin/commitactivity --runner=kafkastreams --bootstrap_servers="$bootstrap" --application_id="$app" \
		--output="$OUTPUT" --table=false --watermarks_addr="$wm_addr" \
		> >(tee "$LOG_DIR/instance-$i.log" | filter "$prefix") 2>&1 &
	instance_pids+=($!)
done
failed=0
for i in "${!instance_pids[@]}"; do
	if ! wait "${instance_pids[$i]}"; then
		echo "run: instance $((i + 1)) failed; its log: $LOG_DIR/instance-$((i + 1)).log" >&2
		failed=1
	fi
done
instance_pids=()
t3=$(now_ms)
((failed == 0)) || exit 1

# 3. The table, once, from the output topic (checked against the CSV).
say "output: the job's output topic, read back read_committed, and $OUTPUT"
bin/commitactivity --show --bootstrap_servers="$bootstrap" --application_id="$app" --output="$OUTPUT" 2>&1 |
	sed -E 's/^time=[^ ]+ level=INFO //; s/^msg="([^"]*)"/\1/; s/^/   /'
echo "   the job took $(secs $((t3 - t2))) (wall time of $INSTANCES instance(s), from their start to the last exit); the broker started in $(secs $((t1 - t0)))"

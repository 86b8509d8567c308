# Sourced by run.sh (`make run`) and run-stream.sh (`make run-stream`): the
# local broker they start and stop, and the helpers they share. Expects
# LOG_DIR to be set and bin/localkafka to be built.
#
# start_broker starts bin/localkafka (the project's image when a Docker
# daemon answers, else a local java process; the cluster in
# $KAFKA_BOOTSTRAP_SERVERS instead, if set: nothing is started), waits until
# it prints KAFKA_BOOTSTRAP_SERVERS=…, and sets bootstrap, and t0 and t1
# (ms) around the start. The EXIT trap stops the processes in instance_pids
# and the broker, also on Ctrl-C or a failure.

say() { printf '\n==> %s\n' "$*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { awk -v ms="$1" 'BEGIN { printf "%.1fs", ms / 1000 }'; }

kafka_pid=""
instance_pids=()
cleanup() {
	local rc=$?
	for pid in "${instance_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	if [[ -n $kafka_pid ]] && kill -0 "$kafka_pid" 2>/dev/null; then
		say "stopping the broker (pid $kafka_pid)"
		kill -TERM "$kafka_pid" 2>/dev/null || true
		wait "$kafka_pid" 2>/dev/null || true
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# localkafka prints KAFKA_BOOTSTRAP_SERVERS=… on stdout when it is ready and
# keeps running until SIGTERM.
start_broker() {
	say "starting a local Kafka broker (bin/localkafka; its log: $LOG_DIR/localkafka.log)"
	t0=$(now_ms)
	# The file exists before the loop reads it: the background job's
	# redirection may not have created it yet (sed then failed, and set -e
	# ended the run before the broker was up).
	: >"$LOG_DIR/localkafka.out"
	bin/localkafka 2> >(tee "$LOG_DIR/localkafka.log" | sed -u 's/^/   /' >&2) > "$LOG_DIR/localkafka.out" &
	kafka_pid=$!
	bootstrap=""
	for _ in $(seq 1 600); do # up to 5 minutes (the first start may fetch the Kafka jars)
		bootstrap=$(sed -n 's/^KAFKA_BOOTSTRAP_SERVERS=//p' "$LOG_DIR/localkafka.out")
		[[ -z $bootstrap ]] && kill -0 "$kafka_pid" 2>/dev/null || break
		sleep 0.5
	done
	[[ -n $bootstrap ]] || { echo "run: the broker did not come up; see $LOG_DIR/localkafka.log" >&2; exit 1; }
	t1=$(now_ms)
	echo "   broker ready at $bootstrap in $(secs $((t1 - t0)))"
}

# What a newcomer sees of a job's log: the watermark URL, progress, the
# job's own lines, warnings and errors; without the time and level. $1
# prefixes every line.
filter() {
	grep --line-buffered -E 'watch the watermarks|kafkastreams: progress|commitactivity: |level=(WARN|ERROR)' |
		sed -u -E 's/^time=[^ ]+ level=INFO //; s/ runner=kafkastreams//; s/^msg="([^"]*)"/\1/; s/^/   '"$1"'/'
}

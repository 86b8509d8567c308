// Command commitactivity is the project's main example job: over
// git-commits.csv (every non-merge commit of git/git, out of order in event
// time by days to years; see data/README.md) it computes, per fixed 30-day
// window of event time, every area's commits, inserted and deleted lines and
// the top 5 areas by commits, and per area its sessions of activity with a
// 7-day gap. The pipeline is in package activity.
//
// Run it on the kafkastreams runner (the default here) against a broker:
//
//	go run ./cmd/commitactivity --bootstrap_servers=127.0.0.1:9092 --application_id=commits
//
// or let `make run` start a local broker, run it, print the table and stop
// the broker. Start the same command more than once with the same
// --application_id and the copies share the work.
//
// Output: a CSV file (--output, written by textio.Write; rows in no
// particular order, columns as in activity.CSVHeader), the job's output
// topic on Kafka (see activity.OutputTopic: every row exactly once to a
// read_committed consumer), and a short table on stdout (--table). The log
// ends with the job's counters and the process's peak RSS ("peak RSS of
// this process: N KiB (VmHWM)", which integration's BenchmarkScale reads).
//
// Flags besides the runner's (--bootstrap_servers, --application_id,
// --watermarks_addr, …; see runner/flags.go):
//
//	--input PATH     the commits file [cmd/commitactivity/data/git-commits.csv]
//	--output PATH    the CSV file to write [commitactivity.csv]
//	--table          print the table when the job is done [true]
//	--show           run nothing: print the table from the output topic of
//	                 --application_id (and check it against --output if that
//	                 file exists) [false]
//	--runner NAME    kafkastreams or prism [kafkastreams]
//
// The streaming variant (`make run-stream`, cmd/commitactivity/run-stream.sh)
// takes the rows from a Kafka topic instead:
//
//	--load           run nothing: write --input to the new topic
//	                 --input_topic, in file (arrival) order, keyed by area,
//	                 each record's CreateTime its event_ms (activity.Load)
//	--partitions N   the partitions of that topic [4]
//	--stream         run the streaming job (activity.BuildStream) over
//	                 --input_topic, writing every pane's rows to the new
//	                 topic --output_topic; then print the final table, the
//	                 on-time, late and dropped rows and the check (final
//	                 panes + dropped rows = the input topic's records),
//	                 and exit 1 if the check fails
package main

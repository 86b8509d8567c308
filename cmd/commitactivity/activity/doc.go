// Package activity is the commitactivity job: per 30-day window of event
// time, every area's commits, inserted and deleted lines and the top 5 areas
// by commits; per area, its sessions of activity with a 7-day gap; over
// git-commits.csv (every non-merge commit of git/git; see ../data/README.md).
//
// Build adds the job to a pipeline (textio in and out): Parse, then Windows,
// the core both variants share; Reference computes the same rows directly
// in Go (the test oracle); Summarize and PrintTable turn the output rows
// into the short table cmd/commitactivity prints; ReadTopic reads the rows
// back from the job's output topic on the kafkastreams runner.
//
// The streaming variant (`make run-stream`): Load writes the file to a
// topic in arrival order at event-time timestamps; BuildStream reads it
// with kafkaio.Read, runs Parse and Windows with allowed lateness and
// accumulating panes (StreamWindowing), and writes every pane's rows with
// kafkaio.Write; ReadPanes turns those rows into the final rows and the
// on-time and late counts, DroppedRows finds the rows the runner dropped.
//
// It imports the Beam Go SDK, runner/kafkaio, the kafkastreams runner's
// plan and record format (proto/) only to find and read output topics, and
// integration/kafkaenv's clients, and stage/kafkaclient/javapartition to
// partition its input records as a Java producer would.
package activity

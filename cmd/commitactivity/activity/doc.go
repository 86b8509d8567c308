// Package activity is the commitactivity job: per 30-day window of event
// time, every area's commits, inserted and deleted lines and the top 5 areas
// by commits; per area, its sessions of activity with a 7-day gap; over
// git-commits.csv (every non-merge commit of git/git; see ../data/README.md).
//
// Build adds the job to a pipeline; Reference computes the same rows
// directly in Go (the test oracle); Summarize and PrintTable turn the output
// rows into the short table cmd/commitactivity prints; ReadTopic reads the
// rows back from the job's output topic on the kafkastreams runner.
//
// It imports the Beam Go SDK, the kafkastreams runner only for ReadTopic's
// record format (proto/) and integration/kafkaenv's consumer.
package activity

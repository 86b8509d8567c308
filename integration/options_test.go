package integration

import (
	"context"

	"github.com/kafkastreams/kafkastreams/runner"
)

// jobOptions is what a test runs a job with: the runner's DefaultOptions
// for application app on the cluster at bs, then each of set applied. A
// test hands it to the runner with runner.WithOptions (withJob), never
// through the runner's flags, which only a command line sets (flags_test.go).
func jobOptions(bs, app string, set ...func(*runner.Options)) runner.Options {
	o := runner.DefaultOptions()
	o.BootstrapServers, o.ApplicationID = bs, app
	for _, f := range set {
		f(&o)
	}
	return o
}

// withJob returns ctx carrying jobOptions(bs, app, set...): beam.Run(ctx,
// runner.Name, p) under it runs p with them.
func withJob(ctx context.Context, bs, app string, set ...func(*runner.Options)) context.Context {
	return runner.WithOptions(ctx, jobOptions(bs, app, set...))
}

package runner

import (
	"context"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/kafkastreams/kafkastreams/runner/plan"
	"github.com/kafkastreams/kafkastreams/watermarkmgr/service"
)

type upstreamsFirstKey struct{}

// WithUpstreamsFirst returns a copy of ctx under which Execute starts each
// stage's loop only once every upstream stage of it (plan.Stage.Upstreams)
// has reported the end of time (mtime.MaxTimestamp, not held): the stage
// then finds its whole input in its topic and reads it in as few batches as
// --max_bundle_size allows. For bounded pipelines only (an unbounded
// upstream never ends, and its downstream stages never start). A test and
// debugging aid: a pipeline's output must not depend on it, and the tests
// of batching-independence run pipelines both with it and with
// --max_bundle_size=1.
func WithUpstreamsFirst(ctx context.Context) context.Context {
	return context.WithValue(ctx, upstreamsFirstKey{}, true)
}

func upstreamsFirst(ctx context.Context) bool {
	v, _ := ctx.Value(upstreamsFirstKey{}).(bool)
	return v
}

// waitUpstreamsDone returns once every upstream stage of s has reported the
// end of time in t, or ctx's error.
func waitUpstreamsDone(ctx context.Context, t *service.Tracker, s *plan.Stage) error {
	for {
		changed := t.Changed()
		done := true
		for _, u := range s.Upstreams {
			v, err := t.Stage(u)
			if err != nil || v.Snapshot.Held || v.Snapshot.Watermark < mtime.MaxTimestamp {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type servingKey struct{}

// WithServing returns a context under which Execute calls serving, once,
// with the address (host:port) this instance's GET /watermarks, /healthz
// and /metrics listen on, as soon as they do. With the default
// --watermarks_addr=127.0.0.1:0 the port is a free one the kernel picks: a
// test or an embedding program learns it here, instead of choosing a free
// port itself and racing other listeners for it.
func WithServing(ctx context.Context, serving func(addr string)) context.Context {
	return context.WithValue(ctx, servingKey{}, serving)
}

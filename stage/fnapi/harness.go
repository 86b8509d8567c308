package fnapi

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/harness"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/hooks"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/grpcx"
)

// Harness is the Go SDK harness running in this process against a Server.
type Harness struct {
	cancel  context.CancelFunc
	stopped atomic.Bool
	done    chan struct{}
	err     error // written once before done is closed
}

// Done is closed when the harness has exited.
func (h *Harness) Done() <-chan struct{} { return h.done }

// Err is why the harness exited: nil when it was asked to (Stop, Close, or
// the context given to StartHarness ended); otherwise the harness's own
// error, or, when it ended on a control stream this Server closed unasked,
// the Server's reason (wrapping ErrHarnessGone). Only meaningful once Done
// is closed.
func (h *Harness) Err() error {
	select {
	case <-h.done:
		return h.err
	default:
		return nil
	}
}

// Stop cancels the harness and waits for it to exit. It returns the harness's
// error, or nil if it exited because of Stop. Idempotent.
func (h *Harness) Stop() error {
	h.stopped.Store(true)
	h.cancel()
	<-h.done
	return h.err
}

var errHarnessStarted = errors.New("fnapi: a harness was already started on this server")

// StartHarness runs the Go SDK harness (harness.MainWithOptions) in a
// goroutine of this process, against this Server's endpoints, as worker
// WorkerID(). It returns once the harness's control stream is connected, or
// the harness's error if it exits first, or ctx's error.
//
// The harness runs until ctx is cancelled, Stop is called or the Server is
// closed. At most one harness per Server.
//
// In process, the harness resolves DoFns and types through the registrations
// made in this binary (beam.RegisterType, register.DoFn*, beam.RegisterFunction,
// usually at init) and reads the process-global beam.PipelineOptions: call
// beam.Init() first, as a Beam main does. StartHarness serializes the enabled
// hooks into beam.PipelineOptions (hooks.SerializeHooksToOptions), as a
// submitting runner does, so the harness runs them; one of them, the default
// remote logging hook, replaces the Beam log package's process-global logger
// with one that ships entries to the Logging service, which forwards them to
// Options.Logger. That logger is process-global: run one harness per
// process. A second harness takes the Beam log output from the first, and
// once it stops its entries are dropped (to stderr when its buffer is full).
// Disable harness.DefaultRemoteLoggingHook (package hooks) before starting a
// harness that must not take it.
func (s *Server) StartHarness(ctx context.Context) (*Harness, error) {
	s.mu.Lock()
	started := s.mu.harnessStarted
	s.mu.harnessStarted = true
	s.mu.Unlock()
	if started {
		return nil, errHarnessStarted
	}
	// A submitting runner serializes the enabled hooks into the pipeline
	// options and the harness activates what it finds there. Without this
	// the harness runs no init hooks, the default remote logging hook
	// included, and its logs would never reach the Logging service.
	hooks.SerializeHooksToOptions()
	hctx, cancel := context.WithCancel(grpcx.WriteWorkerID(ctx, s.workerID))
	h := &Harness{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.mu.harness = h
	s.mu.Unlock()
	go func() {
		defer close(h.done)
		// No runner capabilities: without short ids the harness returns full
		// MonitoringInfos in the ProcessBundleResponse.
		err := harness.MainWithOptions(hctx, s.endpoint, s.endpoint, harness.Options{})
		asked := h.stopped.Load() || hctx.Err() != nil
		switch {
		case asked:
			err = nil // we asked it to stop
		case err == nil:
			// A clean end nobody asked for: the Server ended the control
			// stream (its context ended under it). Say why, or a runner
			// sees only "exited".
			err = errors.New("the control stream ended")
			select {
			case <-s.gone:
				err = s.goneError()
			default:
			}
		}
		if err != nil {
			err = fmt.Errorf("fnapi: harness exited: %w", err)
			s.log.Error("fnapi: harness exited", "error", err)
		}
		h.err = err
		if err == nil {
			s.markGone(errors.New("harness exited"))
		} else {
			s.markGone(err)
		}
	}()
	select {
	case <-s.connected:
		return h, nil
	case <-h.done:
		if h.err != nil {
			return nil, h.err
		}
		return nil, fmt.Errorf("fnapi: harness exited before connecting: %w", ctx.Err())
	case <-ctx.Done():
		cancel()
		<-h.done
		return nil, fmt.Errorf("fnapi: waiting for the harness to connect: %w", context.Cause(ctx))
	}
}

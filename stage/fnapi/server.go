package fnapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/grpcx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Sentinel errors. None of them is retryable on the same Server.
var (
	// ErrHarnessGone means the harness's control stream ended (the harness
	// exited, crashed or was stopped) or the Server was closed. Every
	// instruction in flight fails with it, and so does every later call.
	ErrHarnessGone = errors.New("fnapi: harness gone")
	// ErrUnknownDescriptor means a ProcessBundle named a descriptor id that
	// was not registered with RegisterStage.
	ErrUnknownDescriptor = errors.New("fnapi: unknown process bundle descriptor")
	// ErrBundleFailed means the SDK harness answered a bundle with an
	// error (the InstructionResponse's error): the user's code failed, a
	// DoFn's error or panic (the Go SDK recovers a panic and reports it so),
	// or a coder's on the bundle's data; not the transport, the runner or
	// the harness gone. The stage loop counts only these as an input
	// record's failure (stage.Config.ErrorPolicy). Its text is "harness".
	ErrBundleFailed = errors.New("harness")
)

// Options configures a Server. The zero value is valid.
type Options struct {
	// WorkerID is the id the harness sends as "worker_id" gRPC metadata on
	// every stream. Default "kafkastreams-worker". Streams carrying another id
	// are refused.
	WorkerID string
	// Logger receives the harness's log entries and the server's own. Default
	// slog.Default().
	Logger *slog.Logger
	// PipelineOptions are served by the provisioning service. The in-process
	// Go harness does not ask for them (it reads the process-global
	// beam.PipelineOptions); they are for completeness. Default nil.
	PipelineOptions *structpb.Struct
}

// Server hosts the Fn API services (control, data, state, logging,
// provisioning) for one SDK harness on 127.0.0.1 with an OS-chosen port. All
// services share the one endpoint, Endpoint(). A Server serves one harness for
// its lifetime: once that harness's control stream ends, the Server answers
// ErrHarnessGone.
//
// Server methods are safe for concurrent use.
type Server struct {
	fnpb.UnimplementedBeamFnControlServer
	fnpb.UnimplementedBeamFnDataServer
	fnpb.UnimplementedBeamFnStateServer
	fnpb.UnimplementedBeamFnLoggingServer
	fnpb.UnimplementedProvisionServiceServer

	workerID string
	log      *slog.Logger
	popts    *structpb.Struct
	lis      net.Listener
	gs       *grpc.Server
	endpoint string

	// ctrlOut carries requests to the control stream's sending goroutine.
	ctrlOut chan *fnpb.InstructionRequest
	// dataOut carries input elements to the data stream's sending goroutine.
	// Unbuffered: a bundle that fails stops sending without leaving stale
	// messages behind.
	dataOut chan *fnpb.Elements

	connected     chan struct{} // closed when the harness's control stream connects
	connectedOnce sync.Once
	gone          chan struct{} // closed when the control stream ends or on Close
	goneOnce      sync.Once
	goneErr       error // written once before gone is closed
	closing       chan struct{}
	closeOnce     sync.Once

	nextInst atomic.Uint64

	// sides maps sideInputKey to the SideInput serving it
	// (RegisterSideInput); read by the State handler.
	sides sync.Map
	// userStates maps a transform id to the UserState serving it
	// (RegisterUserState); read by the State handler.
	userStates sync.Map

	mu struct {
		sync.Mutex
		ctrlTaken      bool
		harnessStarted bool
		harness        *Harness // set by StartHarness
		descs          map[string]*registered
		pending        map[string]*pending // by instruction id
	}
}

// pending is an instruction sent to the harness and not yet answered.
type pending struct {
	resp   chan *fnpb.InstructionResponse // buffered 1; the first answer wins
	bundle *bundle                        // nil for non-bundle instructions
}

// NewServer listens on 127.0.0.1:0 and starts serving. Close it when done.
func NewServer(opts Options) (*Server, error) {
	if opts.WorkerID == "" {
		opts.WorkerID = "kafkastreams-worker"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fnapi: listen: %w", err)
	}
	s := &Server{
		workerID:  opts.WorkerID,
		log:       opts.Logger.With("worker", opts.WorkerID),
		popts:     opts.PipelineOptions,
		lis:       lis,
		gs:        grpc.NewServer(grpc.MaxRecvMsgSize(math.MaxInt32)),
		endpoint:  lis.Addr().String(),
		ctrlOut:   make(chan *fnpb.InstructionRequest),
		dataOut:   make(chan *fnpb.Elements),
		connected: make(chan struct{}),
		gone:      make(chan struct{}),
		closing:   make(chan struct{}),
	}
	s.mu.descs = map[string]*registered{}
	s.mu.pending = map[string]*pending{}
	fnpb.RegisterBeamFnControlServer(s.gs, s)
	fnpb.RegisterBeamFnDataServer(s.gs, s)
	fnpb.RegisterBeamFnStateServer(s.gs, s)
	fnpb.RegisterBeamFnLoggingServer(s.gs, s)
	fnpb.RegisterProvisionServiceServer(s.gs, s)
	go s.gs.Serve(lis)
	return s, nil
}

// Endpoint is the "127.0.0.1:port" address of every Fn API service.
func (s *Server) Endpoint() string { return s.endpoint }

// WorkerID is the worker id the harness must present.
func (s *Server) WorkerID() string { return s.workerID }

// Close stops the harness started by StartHarness, if any, and waits for it
// to exit; fails instructions in flight with ErrHarnessGone; and stops the
// gRPC server. Idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		h := s.mu.harness
		s.mu.Unlock()
		if h != nil {
			h.stopped.Store(true)
			h.cancel()
		}
		close(s.closing)
		s.markGone(ErrHarnessGone)
		s.gs.Stop()
		if h != nil {
			<-h.done
		}
	})
}

// markGone records why the harness is gone, once, and fails every pending
// instruction.
func (s *Server) markGone(err error) {
	s.goneOnce.Do(func() {
		if !errors.Is(err, ErrHarnessGone) {
			err = fmt.Errorf("%w: %v", ErrHarnessGone, err)
		}
		s.goneErr = err
		close(s.gone)
		s.log.Debug("fnapi: harness gone", "error", err)
	})
}

// goneError is the reason the harness is gone. Only valid after <-s.gone.
func (s *Server) goneError() error { return s.goneErr }

// checkWorker refuses streams and calls from another worker id. A missing id
// is allowed: the id only guards against a second harness.
func (s *Server) checkWorker(ctx context.Context) error {
	id, err := grpcx.ReadWorkerID(ctx)
	if err != nil {
		return nil
	}
	if id != s.workerID {
		return status.Errorf(codes.PermissionDenied, "fnapi: worker id %q, this server serves %q", id, s.workerID)
	}
	return nil
}

// respond hands an instruction response to its waiter, if any.
func (s *Server) respond(resp *fnpb.InstructionResponse) {
	s.mu.Lock()
	p, ok := s.mu.pending[resp.GetInstructionId()]
	s.mu.Unlock()
	if !ok {
		s.log.Debug("fnapi: response for unknown instruction", "instruction", resp.GetInstructionId())
		return
	}
	select {
	case p.resp <- resp:
	default: // already answered (e.g. failed locally); first answer wins
	}
}

// Control serves the harness's control stream. This goroutine is the only
// sender on the stream; one goroutine it starts is the only receiver. A
// second control stream is refused.
func (s *Server) Control(stream fnpb.BeamFnControl_ControlServer) error {
	if err := s.checkWorker(stream.Context()); err != nil {
		return err
	}
	s.mu.Lock()
	taken := s.mu.ctrlTaken
	s.mu.ctrlTaken = true
	s.mu.Unlock()
	if taken {
		return status.Error(codes.AlreadyExists, "fnapi: this server already has a harness control stream")
	}
	select {
	case <-s.gone:
		return status.Error(codes.Unavailable, "fnapi: server closed")
	default:
	}
	s.connectedOnce.Do(func() { close(s.connected) })
	s.log.Debug("fnapi: control stream connected")

	recvDone := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			s.respond(resp)
		}
	}()
	for {
		select {
		case req := <-s.ctrlOut:
			if err := stream.Send(req); err != nil {
				s.markGone(fmt.Errorf("control send: %w", err))
				return err
			}
		case err := <-recvDone:
			if err == io.EOF {
				s.markGone(errors.New("control stream closed by the harness"))
				return nil
			}
			s.markGone(fmt.Errorf("control stream: %w", err))
			return err
		case <-stream.Context().Done():
			s.markGone(fmt.Errorf("control stream: %w", context.Cause(stream.Context())))
			return nil
		case <-s.closing:
			return nil
		}
	}
}

// send sends one instruction and waits for its response. A response with an
// error string is returned as is; the caller interprets it.
func (s *Server) send(ctx context.Context, req *fnpb.InstructionRequest, p *pending) (*fnpb.InstructionResponse, error) {
	select {
	case s.ctrlOut <- req:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-s.gone:
		return nil, s.goneError()
	}
	select {
	case resp := <-p.resp:
		return resp, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-s.gone:
		return nil, s.goneError()
	}
}

// newInstruction registers a pending instruction under a fresh id.
func (s *Server) newInstruction(b *bundle) (string, *pending) {
	id := fmt.Sprintf("inst-%06d", s.nextInst.Add(1))
	p := &pending{resp: make(chan *fnpb.InstructionResponse, 1), bundle: b}
	s.mu.Lock()
	s.mu.pending[id] = p
	s.mu.Unlock()
	return id, p
}

func (s *Server) doneInstruction(id string) {
	s.mu.Lock()
	delete(s.mu.pending, id)
	s.mu.Unlock()
}

// failInstruction answers a pending instruction locally with an error, as if
// the harness had.
func (s *Server) failInstruction(id string, err error) {
	s.respond(&fnpb.InstructionResponse{InstructionId: id, Error: err.Error()})
}

// Data serves a harness data stream. This goroutine is the only sender on it
// (it drains dataOut); one goroutine it starts is the only receiver and routes
// output elements to their bundles. If the stream breaks, every bundle in
// flight fails: its data may be lost.
func (s *Server) Data(stream fnpb.BeamFnData_DataServer) error {
	if err := s.checkWorker(stream.Context()); err != nil {
		return err
	}
	recvDone := make(chan error, 1)
	go func() {
		for {
			elms, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			for _, d := range elms.GetData() {
				s.deliverData(d)
			}
			for _, t := range elms.GetTimers() {
				s.deliverTimers(t)
			}
		}
	}()
	failAll := func(err error) {
		s.mu.Lock()
		var ids []string
		for id, p := range s.mu.pending {
			if p.bundle != nil {
				ids = append(ids, id)
			}
		}
		s.mu.Unlock()
		for _, id := range ids {
			s.failInstruction(id, err)
		}
	}
	for {
		select {
		case e := <-s.dataOut:
			if err := stream.Send(e); err != nil {
				failAll(fmt.Errorf("fnapi: data stream send: %w", err))
				return err
			}
		case err := <-recvDone:
			if err == io.EOF {
				return nil
			}
			failAll(fmt.Errorf("fnapi: data stream: %w", err))
			return err
		case <-stream.Context().Done():
			failAll(fmt.Errorf("fnapi: data stream: %w", context.Cause(stream.Context())))
			return nil
		case <-s.closing:
			return nil
		}
	}
}

// deliverData routes one output chunk to its bundle.
func (s *Server) deliverData(d *fnpb.Elements_Data) {
	s.mu.Lock()
	p, ok := s.mu.pending[d.GetInstructionId()]
	s.mu.Unlock()
	if !ok || p.bundle == nil {
		s.log.Debug("fnapi: data for unknown instruction", "instruction", d.GetInstructionId(), "transform", d.GetTransformId())
		return
	}
	if err := p.bundle.receive(d.GetTransformId(), d.GetData(), d.GetIsLast()); err != nil {
		s.failInstruction(d.GetInstructionId(), err)
	}
}

// State serves the harness's state requests on one stream, in order: user
// state (Get, Append, Clear) from the UserState registered for the
// transform with RegisterUserState (userstate.go); Gets of side inputs
// (iterable, multimap, multimap keys) from the SideInputs registered with
// RegisterSideInput, paged with continuation tokens; every other request
// gets an error response, and the harness fails the bundle with its message.
func (s *Server) State(stream fnpb.BeamFnState_StateServer) error {
	if err := s.checkWorker(stream.Context()); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		resp := s.answerUserState(req)
		if resp == nil {
			resp = s.answerState(req)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// Logging forwards harness log entries to the Server's slog.Logger with the
// instruction and transform ids.
func (s *Server) Logging(stream fnpb.BeamFnLogging_LoggingServer) error {
	if err := s.checkWorker(stream.Context()); err != nil {
		return err
	}
	for {
		list, err := stream.Recv()
		if err != nil {
			if err == io.EOF || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		for _, e := range list.GetLogEntries() {
			s.log.LogAttrs(stream.Context(), slogLevel(e.GetSeverity()), "[sdk] "+e.GetMessage(),
				slog.String("instruction", e.GetInstructionId()),
				slog.String("transform", e.GetTransformId()),
				slog.String("location", e.GetLogLocation()),
				slog.Time("sdk_time", e.GetTimestamp().AsTime()))
		}
	}
}

func slogLevel(sev fnpb.LogEntry_Severity_Enum) slog.Level {
	switch sev {
	case fnpb.LogEntry_Severity_TRACE:
		return slog.LevelDebug - 4
	case fnpb.LogEntry_Severity_DEBUG:
		return slog.LevelDebug
	case fnpb.LogEntry_Severity_NOTICE:
		return slog.LevelInfo + 2
	case fnpb.LogEntry_Severity_WARN:
		return slog.LevelWarn
	case fnpb.LogEntry_Severity_ERROR:
		return slog.LevelError
	case fnpb.LogEntry_Severity_CRITICAL:
		return slog.LevelError + 4
	default:
		return slog.LevelInfo
	}
}

// GetProvisionInfo serves the provisioning service: the endpoints and
// Options.PipelineOptions.
func (s *Server) GetProvisionInfo(ctx context.Context, _ *fnpb.GetProvisionInfoRequest) (*fnpb.GetProvisionInfoResponse, error) {
	if err := s.checkWorker(ctx); err != nil {
		return nil, err
	}
	ep := &pipepb.ApiServiceDescriptor{Url: s.endpoint}
	return &fnpb.GetProvisionInfoResponse{Info: &fnpb.ProvisionInfo{
		PipelineOptions: s.popts,
		LoggingEndpoint: ep,
		ControlEndpoint: ep,
		RetrievalToken:  "__no_artifacts_staged__",
		Metadata:        map[string]string{"runner": "kafkastreams"},
	}}, nil
}

// GetProcessBundleDescriptor serves descriptors registered with RegisterStage
// (the Go harness receives them in the RegisterRequest and rarely asks).
func (s *Server) GetProcessBundleDescriptor(ctx context.Context, req *fnpb.GetProcessBundleDescriptorRequest) (*fnpb.ProcessBundleDescriptor, error) {
	if err := s.checkWorker(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	r, ok := s.mu.descs[req.GetProcessBundleDescriptorId()]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "fnapi: descriptor %q not registered", req.GetProcessBundleDescriptorId())
	}
	return r.desc, nil
}

package fnapi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

// maxChunkBytes is the target size of one Elements message of input, in
// bytes. An element larger than this goes alone in its message.
const maxChunkBytes = 1 << 20

// registered is a descriptor known to the harness.
type registered struct {
	desc    *fnpb.ProcessBundleDescriptor
	sources []string          // data source transform ids, sorted
	sinks   map[string]skipFn // data sink transform id -> splitter of its wire coder
	// timers are the timer families of the descriptor's ParDos, sorted:
	// every bundle sends and awaits an is_last for each.
	timers []TimerFamily
}

// parseDescriptor finds the data sources and sinks of desc and checks that
// they point at this server and that every sink's wire coder can be split.
func (s *Server) parseDescriptor(desc *fnpb.ProcessBundleDescriptor) (*registered, error) {
	r := &registered{desc: desc, sinks: map[string]skipFn{}}
	for tid, t := range desc.GetTransforms() {
		urn := t.GetSpec().GetUrn()
		if urn != URNDataSource && urn != URNDataSink {
			continue
		}
		port := &fnpb.RemoteGrpcPort{}
		if err := proto.Unmarshal(t.GetSpec().GetPayload(), port); err != nil {
			return nil, fmt.Errorf("transform %q: bad RemoteGrpcPort: %v", tid, err)
		}
		if u := port.GetApiServiceDescriptor().GetUrl(); u != s.endpoint {
			return nil, fmt.Errorf("transform %q: port url %q is not this server's endpoint %q", tid, u, s.endpoint)
		}
		if urn == URNDataSource {
			r.sources = append(r.sources, tid)
			continue
		}
		skip, err := newSkipper(port.GetCoderId(), desc.GetCoders(), 0)
		if err != nil {
			return nil, fmt.Errorf("sink %q: %w", tid, err)
		}
		r.sinks[tid] = skip
	}
	if len(r.sources) == 0 {
		return nil, fmt.Errorf("no %s transform", URNDataSource)
	}
	var err error
	if r.timers, err = timerFamilies(desc); err != nil {
		return nil, err
	}
	sort.Strings(r.sources)
	return r, nil
}

// RegisterStage sends desc to the harness in a RegisterRequest and waits for
// the answer. Its data sources and sinks must use Endpoint() (BuildStage does
// this) and each sink's coder must be splittable into elements by the runner.
// A descriptor id can be registered once. Errors: a malformed or duplicate
// descriptor, the harness's error, ctx's error, ErrHarnessGone.
func (s *Server) RegisterStage(ctx context.Context, desc *fnpb.ProcessBundleDescriptor) error {
	id := desc.GetId()
	if id == "" {
		return fmt.Errorf("fnapi: register: descriptor without an id")
	}
	r, err := s.parseDescriptor(desc)
	if err != nil {
		return fmt.Errorf("fnapi: register %q: %w", id, err)
	}
	s.mu.Lock()
	if _, dup := s.mu.descs[id]; dup {
		s.mu.Unlock()
		return fmt.Errorf("fnapi: register %q: descriptor id already registered", id)
	}
	// Reserved before sending so that a concurrent duplicate fails, and so
	// that GetProcessBundleDescriptor can serve it.
	s.mu.descs[id] = r
	s.mu.Unlock()

	inst, p := s.newInstruction(nil)
	defer s.doneInstruction(inst)
	resp, err := s.send(ctx, &fnpb.InstructionRequest{
		InstructionId: inst,
		Request: &fnpb.InstructionRequest_Register{Register: &fnpb.RegisterRequest{
			ProcessBundleDescriptor: []*fnpb.ProcessBundleDescriptor{desc},
		}},
	}, p)
	if err == nil && resp.GetError() != "" {
		err = fmt.Errorf("harness: %s", resp.GetError())
	}
	if err != nil {
		s.mu.Lock()
		delete(s.mu.descs, id)
		s.mu.Unlock()
		return fmt.Errorf("fnapi: register %q: %w", id, err)
	}
	return nil
}

// Result is what one bundle produced.
type Result struct {
	// Outputs maps each data sink transform id of the descriptor to the
	// elements it received, in order, each encoded with the sink's wire
	// coder. Every sink has an entry, possibly empty. With
	// BundleOptions.OnOutput, every entry is empty: the elements went
	// there.
	Outputs map[string][][]byte
	// MonitoringInfos are the bundle's metrics as the harness reported them
	// (full infos: this runner does not offer short ids), including user
	// metrics (beam:metric:user:*) and element counts.
	MonitoringInfos []*pipepb.MonitoringInfo
	// Residuals is the work the bundle handed back unfinished, in the
	// harness's order: empty unless a splittable DoFn checkpointed (returned
	// a resuming sdf.ProcessContinuation). The bundle's Outputs are complete
	// for the work done; the caller must process every Residual later (or
	// fail), never drop it. See Residual.
	Residuals []Residual
	// Finalize, if not empty, is the bundle's instruction id: a DoFn asked
	// for a callback once the bundle's output is durable
	// (beam.BundleFinalization; the response's requires_finalization).
	// The caller passes it to Server.FinalizeBundle after the transaction
	// carrying the bundle committed, and never for an aborted bundle.
	Finalize string
	// Timers are the timers the bundle set or cleared, by family, in the
	// order the harness sent them (the last one of a (key, window, tag)
	// wins). Empty for a descriptor without timer families.
	Timers map[TimerFamilyID][]Timer
}

// Residual is one residual root of a bundle (a DelayedBundleApplication): the
// rest of a splittable DoFn's restriction that the DoFn asked to resume later.
//
// The Go harness checkpoints only a process-sized-elements-and-restrictions
// step that a data source feeds directly, and encodes the residual with that
// source's coder, so Element is in the wire coder of that source: sending it
// to the same source of the same descriptor in a later bundle resumes the
// work. (Only a stage headed by a process step returns residuals: the
// planner's HeadSplittable; BuildStage fuses the splittable steps of
// bounded SDFs behind pair-with-restriction.)
type Residual struct {
	// TransformID is the descriptor transform to resume: the splittable
	// DoFn's process step.
	TransformID string
	// InputID is the local name of that transform's input Element is for.
	InputID string
	// Element is one encoded windowed value, KV<KV<element, restriction>,
	// size> for a process step, in the wire coder of the data source feeding
	// TransformID.
	Element []byte
	// Delay is how long the DoFn asked the runner to wait before resuming;
	// zero means at once.
	Delay time.Duration
	// OutputWatermarks maps output local names of TransformID to the
	// watermark the DoFn reported for them (event time, millisecond
	// precision): output the residual may still produce is not before it.
	// Outputs without an estimate are absent.
	OutputWatermarks map[string]mtime.Time
}

// residuals converts a ProcessBundleResponse's residual roots.
func residuals(roots []*fnpb.DelayedBundleApplication) []Residual {
	var out []Residual
	for _, r := range roots {
		app := r.GetApplication()
		res := Residual{
			TransformID: app.GetTransformId(),
			InputID:     app.GetInputId(),
			Element:     app.GetElement(),
			Delay:       r.GetRequestedTimeDelay().AsDuration(),
		}
		for local, ts := range app.GetOutputWatermarks() {
			if res.OutputWatermarks == nil {
				res.OutputWatermarks = map[string]mtime.Time{}
			}
			res.OutputWatermarks[local] = mtime.FromTime(ts.AsTime())
		}
		out = append(out, res)
	}
	return out
}

// bundle collects the outputs of one ProcessBundle instruction. receive is
// called by data stream receivers; ProcessBundle reads outputs only after
// allLast is closed, or, streaming (BundleOptions.OnOutput), takes them as
// they arrive (take).
type bundle struct {
	mu      sync.Mutex
	out     map[string][]byte        // sink transform id -> concatenated encoded elements (streaming: not yet taken)
	waiting map[string]bool          // sinks (and timer families: TimerFamilyID.waitKey) whose is_last has not arrived yet
	allLast chan struct{}            // closed when waiting becomes empty
	timers  map[TimerFamilyID][]byte // concatenated encoded timers, by family
	// ready, when streaming, is signalled (capacity 1) once a sink holds
	// streamBytes not yet taken; nil otherwise.
	ready chan struct{}
}

// taken is one sink's elements take returns, or what is wrong with them.
type taken struct {
	sink     string
	elements [][]byte
	err      error
}

// take removes the whole elements each sink has received so far, in sink
// order (sorted ids): a chunk may end inside an element, whose bytes stay
// for the next take. final (after every is_last) takes everything, and a
// sink whose bytes do not split into whole elements gives an error.
func (b *bundle) take(r *registered, final bool) []taken {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []taken
	for _, sink := range slices.Sorted(maps.Keys(r.sinks)) {
		data := b.out[sink]
		if len(data) == 0 {
			continue
		}
		if final {
			delete(b.out, sink)
			elms, err := splitElements(r.sinks[sink], data)
			out = append(out, taken{sink: sink, elements: elms, err: err})
			continue
		}
		elms, rest := splitWhole(r.sinks[sink], data)
		if len(elms) == 0 {
			continue
		}
		// The rest (an element cut by the chunk boundary) is copied: the
		// elements handed on keep data's memory.
		b.out[sink] = append(make([]byte, 0, len(rest)+streamBytes), rest...)
		out = append(out, taken{sink: sink, elements: elms})
	}
	return out
}

func newBundle(r *registered) *bundle {
	b := &bundle{out: map[string][]byte{}, waiting: map[string]bool{}, allLast: make(chan struct{})}
	for sink := range r.sinks {
		b.waiting[sink] = true
	}
	for _, f := range r.timers {
		b.waiting[f.waitKey()] = true
	}
	if len(b.waiting) == 0 {
		close(b.allLast)
	}
	return b
}

// receive appends one chunk of output for a sink.
func (b *bundle) receive(sink string, data []byte, isLast bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.waiting[sink] {
		if _, known := b.out[sink]; known || len(b.waiting) == 0 {
			return fmt.Errorf("fnapi: data for sink %q after its is_last", sink)
		}
		return fmt.Errorf("fnapi: data for unknown sink transform %q", sink)
	}
	b.out[sink] = append(b.out[sink], data...)
	if b.ready != nil && len(b.out[sink]) >= streamBytes {
		select {
		case b.ready <- struct{}{}:
		default:
		}
	}
	if isLast {
		delete(b.waiting, sink)
		if len(b.waiting) == 0 {
			close(b.allLast)
		}
	}
	return nil
}

// ProcessBundle runs one bundle of the registered descriptor descID. inputs
// maps data source transform ids to the encoded elements to send them (each
// in the source's wire coder); sources without an entry get no elements. It
// returns when the harness has answered and every data sink has sent its
// last chunk. Bundles may run concurrently; each gets its own instruction id.
//
// Errors: ErrUnknownDescriptor; an inputs key that is not a data source of the
// descriptor; the harness's error (a DoFn failed: the message names the
// descriptor, the instruction and the harness's own text, which names the
// transform); output that cannot be split into elements; ctx's error;
// ErrHarnessGone. Residual roots (splittable DoFn checkpoints) are not an
// error: they come back in Result.Residuals.
// A failed bundle leaves the Server usable. A bundle abandoned because ctx
// ended runs to completion in the harness on the input sent so far (the Fn
// API has no cancel); its outputs are discarded.
func (s *Server) ProcessBundle(ctx context.Context, descID string, inputs map[string][][]byte) (*Result, error) {
	return s.RunBundle(ctx, descID, inputs, nil)
}

// RunBundle is ProcessBundle with timers to fire: timers maps timer
// families of the descriptor to encoded timers (Timer.Encoded), sent on the
// Data API after the elements, in order. Every timer family of the
// descriptor gets an is_last whether or not it has timers, and the bundle
// waits for the harness's is_last of each (Prism does the same). A timers
// key that is not a family of the descriptor is an error.
func (s *Server) RunBundle(ctx context.Context, descID string, inputs map[string][][]byte, timers map[TimerFamilyID][][]byte) (*Result, error) {
	return s.RunBundleWith(ctx, descID, inputs, timers, BundleOptions{})
}

// BundleOptions are RunBundleWith's options.
type BundleOptions struct {
	// CheckpointAfter, if positive, is how long the bundle may run before
	// the runner asks the harness to checkpoint it (a ProcessBundleSplit
	// request at fraction 0 of the remainder, Beam's runner-initiated
	// checkpoint): a splittable DoFn's current restriction is split at its
	// next claim, the claimed part finishes the bundle and the rest comes
	// back in Result.Residuals (delay 0), with the input elements the
	// bundle had not started (a channel split), so that one bundle stays
	// within a commit interval. Only for descriptors whose data source
	// feeds a splittable DoFn's process step (plan.HeadSplittable); the
	// request is repeated every CheckpointAfter until the bundle ends.
	CheckpointAfter time.Duration
	// OnOutput, if set, takes the bundle's outputs as they arrive instead
	// of Result.Outputs: each data sink's elements in order, whole
	// elements in the sink's wire coder, in calls of about streamBytes,
	// the last ones before RunBundleWith returns. It is called from the
	// caller's goroutine, never concurrently, while the bundle runs; the
	// slices stay valid after it returns (each call gets fresh memory). So
	// a bundle whose DoFn emits millions of elements from one input (a
	// text file read in one ProcessElement) is never held whole. An error
	// fails the bundle with it (the harness finishes the bundle on the
	// input sent so far; its later outputs are dropped). A bundle that
	// fails after OnOutput took elements has still failed: the caller must
	// drop what it took (the stage loop aborts the transaction).
	OnOutput func(sink string, elements [][]byte) error
}

// streamBytes is how many bytes of one sink's output a bundle with
// BundleOptions.OnOutput gathers before it hands them on.
const streamBytes = 1 << 20

// RunBundleWith is RunBundle with options.
func (s *Server) RunBundleWith(ctx context.Context, descID string, inputs map[string][][]byte, timers map[TimerFamilyID][][]byte, opt BundleOptions) (*Result, error) {
	s.mu.Lock()
	r, ok := s.mu.descs[descID]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownDescriptor, descID)
	}
	for src := range inputs {
		if !contains(r.sources, src) {
			return nil, fmt.Errorf("fnapi: bundle of %q: input %q is not a data source of the descriptor (sources: %s)", descID, src, strings.Join(r.sources, ", "))
		}
	}
	families := map[TimerFamilyID]*TimerFamily{}
	for i := range r.timers {
		families[r.timers[i].TimerFamilyID] = &r.timers[i]
	}
	for id := range timers {
		if families[id] == nil {
			return nil, fmt.Errorf("fnapi: bundle of %q: timers of %s: %w", descID, id, errTimerFamily)
		}
	}

	b := newBundle(r)
	if opt.OnOutput != nil {
		b.ready = make(chan struct{}, 1)
	}
	inst, p := s.newInstruction(b)
	defer s.doneInstruction(inst)
	fail := func(err error) (*Result, error) {
		return nil, fmt.Errorf("fnapi: bundle %s of stage %q: %w", inst, descID, err)
	}

	select {
	case s.ctrlOut <- &fnpb.InstructionRequest{
		InstructionId: inst,
		Request: &fnpb.InstructionRequest_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleRequest{
			ProcessBundleDescriptorId: descID,
		}},
	}:
	case <-ctx.Done():
		return fail(context.Cause(ctx))
	case <-s.gone:
		return fail(s.goneError())
	}

	// Send the input while watching for an early answer: a harness that
	// failed stops reading, and we must stop writing.
	var resp *fnpb.InstructionResponse
	var msgs []*fnpb.Elements
	for _, src := range r.sources {
		msgs = append(msgs, chunk(inst, src, inputs[src])...)
	}
	for _, f := range r.timers {
		msgs = append(msgs, chunkTimers(inst, f.TimerFamilyID, timers[f.TimerFamilyID])...)
	}
	msgs = append(msgs, lastMessage(inst, r))
	// deliver hands what arrived to OnOutput (a nil channel, never ready,
	// without it).
	deliver := func(final bool) error {
		for _, o := range b.take(r, final) {
			if o.err != nil {
				return fmt.Errorf("output of sink %q: %w", o.sink, o.err)
			}
			if err := opt.OnOutput(o.sink, o.elements); err != nil {
				return err
			}
		}
		return nil
	}
	sendErr := func() error {
		for i := 0; i < len(msgs); {
			select {
			case s.dataOut <- msgs[i]:
				i++
			case <-b.ready:
				if err := deliver(false); err != nil {
					go s.abandon(inst, r)
					return err
				}
			case resp = <-p.resp:
				return nil
			case <-ctx.Done():
				go s.abandon(inst, r)
				return context.Cause(ctx)
			case <-s.gone:
				return s.goneError()
			}
		}
		return nil
	}()
	if sendErr != nil {
		return fail(sendErr)
	}
	var split splits
	if resp == nil {
		var tick <-chan time.Time
		if opt.CheckpointAfter > 0 {
			t := time.NewTicker(opt.CheckpointAfter)
			defer t.Stop()
			tick = t.C
		}
	wait:
		for {
			select {
			case resp = <-p.resp:
				break wait
			case <-b.ready:
				if err := deliver(false); err != nil {
					return fail(err)
				}
			case <-tick:
				split.wg.Add(1)
				go split.request(ctx, s, inst, r.sources, inputs)
			case <-ctx.Done():
				return fail(context.Cause(ctx))
			case <-s.gone:
				return fail(s.goneError())
			}
		}
	}
	if e := resp.GetError(); e != "" {
		return fail(fmt.Errorf("%w: %s", ErrBundleFailed, e))
	}
	pb := resp.GetProcessBundle()
	// The response and the sinks' last chunks travel on different streams.
last:
	for {
		select {
		case <-b.allLast:
			break last
		case <-b.ready:
			if err := deliver(false); err != nil {
				return fail(err)
			}
		case resp = <-p.resp: // a late local failure (e.g. bad data) wins
			return fail(fmt.Errorf("%w: %s", ErrBundleFailed, resp.GetError()))
		case <-ctx.Done():
			return fail(context.Cause(ctx))
		case <-s.gone:
			return fail(s.goneError())
		}
	}
	if opt.OnOutput != nil {
		if err := deliver(true); err != nil {
			return fail(err)
		}
	}

	res := &Result{Outputs: map[string][][]byte{}, MonitoringInfos: pb.GetMonitoringInfos(), Residuals: residuals(pb.GetResidualRoots())}
	if pb.GetRequiresFinalization() {
		res.Finalize = inst
	}
	if err := split.wait(); err != nil {
		return fail(err)
	}
	res.Residuals = append(res.Residuals, split.residuals()...)
	b.mu.Lock()
	defer b.mu.Unlock()
	for sink, skip := range r.sinks {
		elms, err := splitElements(skip, b.out[sink])
		if err != nil {
			return fail(fmt.Errorf("output of sink %q: %w", sink, err))
		}
		if elms == nil {
			elms = [][]byte{}
		}
		res.Outputs[sink] = elms
	}
	for id, data := range b.timers {
		ts, err := families[id].ParseAll(data)
		if err != nil {
			return fail(err)
		}
		if res.Timers == nil {
			res.Timers = map[TimerFamilyID][]Timer{}
		}
		res.Timers[id] = ts
	}
	return res, nil
}

// abandon ends the input of a bundle whose caller gave up while sending it:
// the Fn API cannot cancel a bundle, so without is_last the harness would wait
// for the rest of its input forever. The harness finishes the bundle on the
// input it got; its answer and outputs arrive for an instruction no longer
// pending and are dropped. Gives up when the harness or the Server is gone.
func (s *Server) abandon(inst string, r *registered) {
	select {
	case s.dataOut <- lastMessage(inst, r):
	case <-s.gone:
	}
}

// lastMessage carries the is_last of every data source and timer family of
// r, as Prism sends it after a bundle's input.
func lastMessage(inst string, r *registered) *fnpb.Elements {
	m := &fnpb.Elements{}
	for _, f := range r.timers {
		m.Timers = append(m.Timers, &fnpb.Elements_Timers{InstructionId: inst, TransformId: f.Transform, TimerFamilyId: f.Family, IsLast: true})
	}
	for _, src := range r.sources {
		m.Data = append(m.Data, &fnpb.Elements_Data{InstructionId: inst, TransformId: src, IsLast: true})
	}
	return m
}

// chunkTimers packs one family's encoded timers into Elements messages of
// about maxChunkBytes, without is_last (lastMessage carries it).
func chunkTimers(inst string, id TimerFamilyID, timers [][]byte) []*fnpb.Elements {
	var msgs []*fnpb.Elements
	for _, c := range pack(timers) {
		msgs = append(msgs, &fnpb.Elements{Timers: []*fnpb.Elements_Timers{{InstructionId: inst, TransformId: id.Transform, TimerFamilyId: id.Family, Timers: c}}})
	}
	return msgs
}

// pack concatenates encoded elements into chunks of about maxChunkBytes;
// an element larger than that goes alone in its chunk.
func pack(elms [][]byte) [][]byte {
	var out [][]byte
	var buf []byte
	for _, e := range elms {
		if len(buf) > 0 && len(buf)+len(e) > maxChunkBytes {
			out = append(out, buf)
			buf = nil
		}
		buf = append(buf, e...)
	}
	if len(buf) > 0 {
		out = append(out, buf)
	}
	return out
}

// chunk packs one source's elements into Elements messages of about
// maxChunkBytes, without is_last (lastMessage carries it).
func chunk(inst, src string, elms [][]byte) []*fnpb.Elements {
	var msgs []*fnpb.Elements
	for _, c := range pack(elms) {
		msgs = append(msgs, &fnpb.Elements{Data: []*fnpb.Elements_Data{{InstructionId: inst, TransformId: src, Data: c}}})
	}
	return msgs
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// FinalizeBundle asks the harness to run the finalization callbacks of the
// bundle whose Result.Finalize is inst (Beam's FinalizeBundleRequest), and
// waits for its answer. Call it once the bundle's output is durable (its
// transaction committed); a callback that fails, or whose expiry passed,
// comes back as an error naming the bundle (the output stays committed).
func (s *Server) FinalizeBundle(ctx context.Context, inst string) error {
	id, p := s.newInstruction(nil)
	defer s.doneInstruction(id)
	resp, err := s.send(ctx, &fnpb.InstructionRequest{
		InstructionId: id,
		Request:       &fnpb.InstructionRequest_FinalizeBundle{FinalizeBundle: &fnpb.FinalizeBundleRequest{InstructionId: inst}},
	}, p)
	if err != nil {
		return fmt.Errorf("fnapi: finalize bundle %s: %w", inst, err)
	}
	if e := resp.GetError(); e != "" {
		return fmt.Errorf("fnapi: finalize bundle %s: harness: %s", inst, e)
	}
	return nil
}

// splits are the runner-initiated checkpoints of one bundle
// (BundleOptions.CheckpointAfter): their residual roots, and the input
// elements a channel split left unprocessed.
type splits struct {
	wg sync.WaitGroup
	mu sync.Mutex
	// res are the split responses' residual roots and the elements at and
	// after each data source's first residual element, as residuals.
	res []Residual
	err error
}

// request sends one ProcessBundleSplit at fraction 0 of the remainder of
// every data source of the bundle inst, and keeps what it split off. The
// caller has added it to sp.wg.
func (sp *splits) request(ctx context.Context, s *Server, inst string, sources []string, inputs map[string][][]byte) {
	defer sp.wg.Done()
	desired := map[string]*fnpb.ProcessBundleSplitRequest_DesiredSplit{}
	for _, src := range sources {
		desired[src] = &fnpb.ProcessBundleSplitRequest_DesiredSplit{FractionOfRemainder: 0, EstimatedInputElements: int64(len(inputs[src]))}
	}
	id, p := s.newInstruction(nil)
	defer s.doneInstruction(id)
	resp, err := s.send(ctx, &fnpb.InstructionRequest{
		InstructionId: id,
		Request: &fnpb.InstructionRequest_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitRequest{
			InstructionId: inst, DesiredSplits: desired,
		}},
	}, p)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if err != nil {
		sp.err = fmt.Errorf("checkpoint request: %w", err)
		return
	}
	if e := resp.GetError(); e != "" {
		return // the bundle had ended, or the harness could not split now: no split
	}
	ps := resp.GetProcessBundleSplit()
	sp.res = append(sp.res, residuals(ps.GetResidualRoots())...)
	for _, cs := range ps.GetChannelSplits() {
		in := inputs[cs.GetTransformId()]
		for i := cs.GetFirstResidualElement(); i >= 0 && int(i) < len(in); i++ {
			sp.res = append(sp.res, Residual{TransformID: cs.GetTransformId(), Element: in[i]})
		}
	}
}

// wait waits for the split requests in flight.
func (sp *splits) wait() error {
	sp.wg.Wait()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.err
}

func (sp *splits) residuals() []Residual {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.res
}

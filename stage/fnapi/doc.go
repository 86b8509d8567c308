// Package fnapi is the runner side of the Beam Fn API for one Go SDK harness
// running in this process: it hosts the control, data, state, logging and
// provisioning services on loopback, starts the harness against them, registers
// fused stages as ProcessBundleDescriptors and runs bundles of them.
//
// What lives here:
//
//   - Server (server.go): the gRPC services on 127.0.0.1:<OS port>, one
//     endpoint for all of them, serving exactly one harness (worker id).
//   - Server.StartHarness (harness.go): harness.MainWithOptions in a goroutine.
//   - Server.RegisterStage, Server.ProcessBundle, RunBundle and
//     RunBundleWith (bundle.go): one instruction per call; bundles may run
//     concurrently. A bundle's outputs come back in Result.Outputs or, with
//     BundleOptions.OnOutput, as they arrive. Residual roots (a splittable
//     DoFn's checkpoints) come back in Result.Residuals;
//     BundleOptions.CheckpointAfter asks the harness to checkpoint a bundle
//     headed by a process step (a ProcessBundleSplit at fraction 0, Beam's
//     runner-initiated checkpoint); Server.FinalizeBundle runs the bundle
//     finalization callbacks of a bundle whose output is durable
//     (Result.Finalize).
//   - BuildStage (descriptor.go): a ProcessBundleDescriptor for a fused chain
//     of transforms of a pipeline proto, with a data source and data sinks.
//     Splittable DoFns are expanded into their steps in the same descriptor
//     and each restriction is processed whole (sdf.go); one the planner
//     split into its steps (plan.HeadSplittable: it may checkpoint) arrives
//     expanded, its process step fed by the data source.
//   - Side inputs (sideinput.go): the State service answers the harness's
//     iterable, multimap and multimap-keys side input Gets from the
//     SideInput registered per (transform, side input id), paged at element
//     boundaries with continuation tokens; WireElements cuts a side input's
//     wire elements into windows, element, key and value for the runner's
//     store. BuildStage gives side input PCollections wireSafe coders.
//   - User state (userstate.go): the State service answers BagUserState,
//     MultimapUserState, MultimapKeysUserState and OrderedListUserState
//     requests from the UserState registered per transform, only for
//     instructions that are running bundles (a late write of an abandoned
//     bundle is refused, never applied to the next attempt).
//   - Timers (timers.go): RunBundle sends timers to fire on the Data API
//     after the elements and an is_last for every timer family of the
//     descriptor; Result.Timers holds the timers the bundle set, parsed
//     (TimerFamily.Parse). BuildStage gives timer families the coder
//     timer(wireSafe(K), W) so timer keys are the wire's key bytes.
//   - Wire coders (coders.go, wirecoder.go, keys.go): the rule that makes
//     every PCollection's wire coder splittable by the runner (length-prefix
//     what it does not know), the splitter that cuts a sink's byte stream
//     into elements, WireCoder (a PCollection's wire coder, for a head that
//     encodes elements itself) and KVWire (a KV element's key and value
//     bytes, which the runner groups and partitions by).
//
// Imports: the Beam Go SDK (harness, model protos, grpcx), gRPC and protobuf.
// No Kafka, no other package of this module: the task loop in package stage
// drives this package, never the other way round.
//
// Goroutines and ownership:
//
//   - The control stream handler (Server.Control) is the only sender on the
//     control stream; it drains Server.ctrlOut. One goroutine it starts is the
//     only receiver and hands each InstructionResponse to the waiting caller
//     through pending.resp (buffered 1; the first answer wins, so a local
//     failure and the harness's answer cannot both block).
//   - Each data stream handler (Server.Data) is the only sender on its stream;
//     it drains Server.dataOut (unbuffered, so a bundle that stops early leaves
//     nothing queued). One goroutine it starts is the only receiver and
//     appends output chunks to their bundle.
//   - The state and logging handlers each own their stream.
//   - ProcessBundle runs in the caller's goroutine: it sends the request,
//     feeds the inputs, and waits for both the response and every sink's
//     is_last (they come on different streams, in either order).
//   - StartHarness owns one goroutine running the harness until its context
//     is cancelled, Harness.Stop, or Server.Close.
//
// Locks: Server.mu guards the descriptor and pending-instruction maps;
// bundle.mu guards one bundle's outputs; splits.mu one bundle's checkpoint
// responses. No two are held together, and no lock is held while sending
// on a channel or a stream.
//
// Process-global state: the harness reads beam.PipelineOptions and, through
// its remote logging hook, replaces the Beam log package's logger. Run one
// harness per process (see StartHarness).
//
// Errors: when the harness's control stream ends, every instruction in flight
// and every later call fails with ErrHarnessGone; a Server serves one harness
// for its life. A DoFn error fails only its bundle.
//
// Not supported yet: side input access patterns other than iterable and
// multimap, a splittable DoFn with an unbounded input or output that the
// planner has not split into its steps (checkSplittable), window coders
// other than global and interval (each refused with a clear error, never
// silently); the runner sends no progress requests and asks for no dynamic
// split of a fused splittable DoFn's restriction (each runs whole).
package fnapi

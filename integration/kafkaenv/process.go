package kafkaenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv/kraftconfig"
)

// stopGrace is how long Stop waits for a clean broker shutdown after
// SIGTERM before it kills.
const stopGrace = 15 * time.Second

// startProcess runs node n as a local java child process in a fresh temp
// dir (config, log dir, broker.log), removed by Stop.
func startProcess(ctx context.Context, o Options, n node) (*Broker, error) {
	bport, cport := n.brokerPort, n.controllerPort
	java, err := findJava(ctx, o)
	if err != nil {
		return nil, err
	}
	libs, err := ensureJars(ctx, o)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "kafkaenv-")
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: temp dir: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	cfg := kraftconfig.Config{
		NodeID:           n.id,
		BrokerPort:       bport,
		ControllerPort:   cport,
		LogDir:           filepath.Join(tmp, "data"),
		ClusterID:        n.clusterID,
		Overrides:        n.overrides,
		ScramCredentials: n.scram,
	}
	props, log4j, err := kraftconfig.WriteFiles(filepath.Join(tmp, "config"), cfg)
	if err != nil {
		return nil, err
	}
	launch := kraftconfig.Launch{Java: java, LibsDir: libs, HeapMB: o.HeapMB}
	logPath := filepath.Join(tmp, "broker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor
	var out io.Writer = logFile
	if o.BrokerOutput != nil {
		out = io.MultiWriter(logFile, o.BrokerOutput)
	}

	begin := time.Now()
	format := exec.CommandContext(ctx, java, launch.FormatArgs(cfg, props, log4j)...)
	format.Stdout, format.Stderr = out, out
	if err := format.Run(); err != nil {
		return nil, fmt.Errorf("%w: storage format (%s format) failed: %v:\n%s", ErrNotReady, kraftconfig.StorageToolMainClass, err, tailFile(logPath, 20))
	}

	ps := &procServer{java: java, args: launch.ServerArgs(props, log4j), dir: tmp, logPath: logPath, extra: o.BrokerOutput}
	if err := ps.launch(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %v", ErrNotReady, java, err)
	}

	stop := func() error {
		defer os.RemoveAll(tmp)
		return ps.terminate(stopGrace)
	}

	bootstrap := fmt.Sprintf("%s:%d", loopback, bport)
	if err := waitReady(ctx, bootstrap, o.ReadyTimeout, ps.exitedChan()); err != nil {
		tail := tailFile(logPath, 30) // before stop removes it
		stop()
		return nil, fmt.Errorf("%w: local process on %s: %v; last lines of its log:\n%s", ErrNotReady, bootstrap, err, tail)
	}
	ok = true
	b := &Broker{
		mode:           ModeProcess,
		bootstrap:      bootstrap,
		readyIn:        time.Since(begin),
		describe:       fmt.Sprintf("local process (java pid %d, jars %s, controller %s:%d, log %s)", ps.pid(), libs, loopback, cport, logPath),
		logPath:        logPath,
		controllerAddr: fmt.Sprintf("%s:%d", loopback, cport),
		pid:            ps.pid(), // the first launch's (a Restart's JVM is another)
		stop:           stop,
		kill:           ps.kill,
		terminate:      ps.terminate,
		restart: func(ctx context.Context) error {
			if err := ps.launch(); err != nil {
				return fmt.Errorf("kafkaenv: restart node %d: %w", n.id, err)
			}
			if err := waitReady(ctx, bootstrap, o.ReadyTimeout, ps.exitedChan()); err != nil {
				return fmt.Errorf("%w: node %d restarted on %s: %v; last lines of its log:\n%s", ErrNotReady, n.id, bootstrap, err, tailFile(logPath, 30))
			}
			return nil
		},
	}
	logReady(o, b)
	return b, nil
}

// procServer is a node's broker JVM, which Broker.Kill and
// Broker.Terminate end and Broker.Restart starts again on the same
// configuration and log directory (it is formatted once, before the first
// launch). Its methods are safe for concurrent use.
type procServer struct {
	java    string
	args    []string // after the java binary: kraftconfig.Launch.ServerArgs
	dir     string   // the working directory: the node's temp dir
	logPath string   // broker.log, appended to by every launch
	extra   io.Writer

	mu     sync.Mutex
	cmd    *exec.Cmd     // the last launch; nil before the first
	exited chan struct{} // closed when the last launch's process has exited
}

// launch starts the JVM; it refuses while the last launch still runs.
func (ps *procServer) launch() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.cmd != nil {
		select {
		case <-ps.exited:
		default:
			return fmt.Errorf("java pid %d still runs", ps.cmd.Process.Pid)
		}
	}
	logFile, err := os.OpenFile(ps.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	var out io.Writer = logFile
	if ps.extra != nil {
		out = io.MultiWriter(logFile, ps.extra)
	}
	server := exec.Command(ps.java, ps.args...)
	server.Stdout, server.Stderr = out, out
	server.Dir = ps.dir
	server.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If this process dies without Stop (a test timeout, a crash),
		// the kernel kills the broker instead of leaking it.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := server.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		server.Wait()
		close(exited)
	}()
	ps.cmd, ps.exited = server, exited
	return nil
}

// current returns the last launch and its exit channel (nil, nil before
// the first launch).
func (ps *procServer) current() (*exec.Cmd, chan struct{}) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.cmd, ps.exited
}

func (ps *procServer) exitedChan() <-chan struct{} {
	_, exited := ps.current()
	return exited
}

func (ps *procServer) pid() int {
	cmd, _ := ps.current()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// kill sends SIGKILL to the JVM's process group and waits for its exit.
// A JVM already gone is no error.
func (ps *procServer) kill() error {
	cmd, exited := ps.current()
	if cmd == nil {
		return nil
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	return nil
}

// terminate sends SIGTERM to the JVM's process group (Kafka's clean
// shutdown: a controlled shutdown that moves its partitions' leadership
// away first) and waits up to grace for its exit; then it kills it and
// returns ErrKilled. A JVM already gone is no error.
func (ps *procServer) terminate(grace time.Duration) error {
	cmd, exited := ps.current()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	pgid := cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(grace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%w: pid %d ignored SIGTERM for %v", ErrKilled, pgid, grace)
	}
}

package kafkaenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

	server := exec.Command(java, launch.ServerArgs(props, log4j)...)
	server.Stdout, server.Stderr = out, out
	server.Dir = tmp
	server.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If this process dies without Stop (a test timeout, a crash),
		// the kernel kills the broker instead of leaking it.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := server.Start(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %v", ErrNotReady, java, err)
	}
	exited := make(chan struct{}) // closed when the broker process has exited
	go func() {
		server.Wait()
		close(exited)
	}()

	stop := func() error {
		defer os.RemoveAll(tmp)
		pgid := server.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(stopGrace):
			syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
			return fmt.Errorf("%w: pid %d ignored SIGTERM for %v", ErrKilled, pgid, stopGrace)
		}
	}

	bootstrap := fmt.Sprintf("%s:%d", loopback, bport)
	if err := waitReady(ctx, bootstrap, o.ReadyTimeout, exited); err != nil {
		tail := tailFile(logPath, 30) // before stop removes it
		stop()
		return nil, fmt.Errorf("%w: local process on %s: %v; last lines of its log:\n%s", ErrNotReady, bootstrap, err, tail)
	}
	ok = true
	b := &Broker{
		mode:      ModeProcess,
		bootstrap: bootstrap,
		readyIn:   time.Since(begin),
		describe:  fmt.Sprintf("local process (java pid %d, jars %s, controller %s:%d, log %s)", server.Process.Pid, libs, loopback, cport, logPath),
		logPath:   logPath,
		stop:      stop,
		kill: func() error {
			syscall.Kill(-server.Process.Pid, syscall.SIGKILL)
			<-exited
			return nil
		},
	}
	logReady(o, b)
	return b, nil
}

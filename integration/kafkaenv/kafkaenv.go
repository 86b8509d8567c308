package kafkaenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv/kraftconfig"
)

// DefaultKafkaVersion is the Apache Kafka version of the jars and the image.
// It must equal <kafka.version> in pom.xml (TestPomVersionMatches checks it).
const DefaultKafkaVersion = "4.1.1"

// Environment variables read by Start.
const (
	// EnvBootstrapServers, when set, makes Start use that cluster
	// (ModeExternal) and start nothing. Same name as Kafka's
	// bootstrap.servers, upper-cased.
	EnvBootstrapServers = "KAFKA_BOOTSTRAP_SERVERS"
	// EnvMode forces a mode when Options.Mode is empty: "external",
	// "container" or "process". Empty or "auto" means the order in the
	// package doc.
	EnvMode = "KAFKASTREAMS_KAFKA_MODE"
	// EnvJarsDir overrides the directory of the Kafka jars used by
	// ModeProcess (default <repo>/.cache/kafka/<version>/libs).
	EnvJarsDir = "KAFKASTREAMS_KAFKA_JARS"
	// EnvImage overrides the image used by ModeContainer (default
	// kafkastreams/kafka:<version>).
	EnvImage = "KAFKASTREAMS_KAFKA_IMAGE"
)

// Mode says where the broker runs.
type Mode string

// The modes of Start.
const (
	// ModeAuto picks external, then container, then process (see the
	// package doc). It is the zero value.
	ModeAuto Mode = ""
	// ModeExternal uses the cluster named by KAFKA_BOOTSTRAP_SERVERS.
	ModeExternal Mode = "external"
	// ModeContainer runs the project's image through testcontainers-go.
	ModeContainer Mode = "container"
	// ModeProcess runs the broker as a local java child process.
	ModeProcess Mode = "process"
)

// Sentinel errors. Errors returned by Start wrap one of them and say what to
// do about it. None is retryable by simply calling Start again, except
// ErrNotReady on a slow machine (raise Options.ReadyTimeout).
var (
	// ErrPortInUse: a port given in Options (or, rarely, one just picked as
	// free) is already bound on 127.0.0.1. The message names the port.
	ErrPortInUse = errors.New("kafkaenv: port already in use")
	// ErrNoJava: ModeProcess found no java binary, or one older than 17.
	ErrNoJava = errors.New("kafkaenv: no usable Java runtime")
	// ErrNoJars: the Kafka jars are missing and could not be fetched from
	// Maven Central.
	ErrNoJars = errors.New("kafkaenv: no Kafka jars")
	// ErrNoDocker: ModeContainer was required but no Docker daemon answers.
	ErrNoDocker = errors.New("kafkaenv: no Docker daemon")
	// ErrNoImage: ModeContainer was required but the image is not present
	// locally (it is never pulled: `make kafka-image` builds it).
	ErrNoImage = errors.New("kafkaenv: broker image not built")
	// ErrNotReady: the broker was launched but did not answer a metadata
	// request within Options.ReadyTimeout, its internal topics did not warm
	// up (Start), or it exited. The message carries
	// the tail of the broker's log.
	ErrNotReady = errors.New("kafkaenv: broker not ready")
	// ErrBadOptions: Options are inconsistent (an unknown mode, ModeExternal
	// without KAFKA_BOOTSTRAP_SERVERS, ...).
	ErrBadOptions = errors.New("kafkaenv: bad options")
	// ErrKilled: Stop had to SIGKILL a local broker that did not exit
	// within its grace after SIGTERM (a loaded machine); it is gone all
	// the same.
	ErrKilled = errors.New("kafkaenv: broker killed after its stop grace")
)

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Mode forces where the broker runs. Default: the environment variable
	// KAFKASTREAMS_KAFKA_MODE, else ModeAuto.
	Mode Mode
	// BrokerPort is the client (PLAINTEXT) listener port on 127.0.0.1.
	// Default 0: a free port. A given port that is taken fails Start with
	// ErrPortInUse. Ignored in ModeExternal.
	BrokerPort int
	// ControllerPort is the KRaft controller listener port on 127.0.0.1.
	// Default 0: a free port. Same rules as BrokerPort.
	ControllerPort int
	// KafkaVersion selects the jars and the image tag. Default
	// DefaultKafkaVersion.
	KafkaVersion string
	// Image is the image of ModeContainer. Default: env
	// KAFKASTREAMS_KAFKA_IMAGE, else "kafkastreams/kafka:<KafkaVersion>".
	Image string
	// JarsDir is the directory of the Kafka jars for ModeProcess. Default:
	// env KAFKASTREAMS_KAFKA_JARS, else <repo>/.cache/kafka/<KafkaVersion>/libs,
	// fetched with Maven (pom.xml beside this file) when missing.
	JarsDir string
	// Java is the java binary for ModeProcess. Default: $JAVA_HOME/bin/java,
	// else java in PATH. It must be Java 17 or newer.
	Java string
	// HeapMB is the broker's maximum heap in MiB (-Xmx). Default 512.
	HeapMB int
	// ReadyTimeout bounds the time from launch to a broker that answers a
	// metadata request, and then (what is left of it, 10 s at least) the
	// warm-up of its internal topics. Default 120 s.
	ReadyTimeout time.Duration
	// DockerProbeTimeout bounds the check that a Docker daemon answers.
	// Default 5 s.
	DockerProbeTimeout time.Duration
	// Logf receives one line per step (mode chosen, fallbacks, ready time).
	// Default: the standard logger, prefixed "kafkaenv: ".
	Logf func(format string, args ...any)
	// BrokerOutput, when set, also receives the broker's own log (stdout and
	// stderr of the JVM). The log always goes to Broker.LogPath too.
	BrokerOutput io.Writer
	// SCRAM, if set, starts a broker with SCRAM-SHA-256 logins on a
	// SASL_PLAINTEXT listener and ACLs enforced (see SCRAM;
	// Broker.SASLBootstrapServers). ModeProcess only. Default nil.
	SCRAM *SCRAM
}

// withDefaults returns o with every default filled in.
func (o Options) withDefaults() Options {
	if o.Mode == ModeAuto {
		o.Mode = Mode(strings.TrimSpace(os.Getenv(EnvMode)))
		if o.Mode == "auto" {
			o.Mode = ModeAuto
		}
	}
	if o.KafkaVersion == "" {
		o.KafkaVersion = DefaultKafkaVersion
	}
	if o.Image == "" {
		o.Image = os.Getenv(EnvImage)
	}
	if o.Image == "" {
		o.Image = "kafkastreams/kafka:" + o.KafkaVersion
	}
	if o.JarsDir == "" {
		o.JarsDir = os.Getenv(EnvJarsDir)
	}
	if o.HeapMB <= 0 {
		o.HeapMB = 512
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 120 * time.Second
	}
	if o.DockerProbeTimeout <= 0 {
		o.DockerProbeTimeout = 5 * time.Second
	}
	if o.Logf == nil {
		l := log.New(os.Stderr, "kafkaenv: ", log.LstdFlags)
		o.Logf = l.Printf
	}
	return o
}

// Broker is a running (or external) Kafka cluster. Its methods are safe for
// concurrent use.
type Broker struct {
	mode      Mode
	bootstrap string
	// sasl is the SASL_PLAINTEXT listener's address (Options.SCRAM); empty
	// without one.
	sasl     string
	readyIn  time.Duration
	describe string
	logPath  string
	// pid is the broker's JVM as this machine's /proc sees it; 0 when
	// unknown (ModeExternal, or a container the daemon did not inspect).
	pid int

	// controllerAddr is the KRaft controller listener's host:port; empty
	// for ModeExternal.
	controllerAddr string

	stopOnce sync.Once
	stopErr  error
	stop     func() error // nil for ModeExternal
	kill     func() error // nil for ModeExternal
	// terminate (SIGTERM, up to a grace, then SIGKILL and ErrKilled) and
	// restart (the same node again, its log directory kept) are set for
	// ModeProcess only (see Cluster.Terminate and Cluster.Restart).
	terminate func(grace time.Duration) error
	restart   func(ctx context.Context) error
}

// PID returns the process id of the broker's JVM in this machine's /proc
// (a local process's java; a container's main process, the daemon's
// State.Pid, with the host network and PID namespace of this machine), so
// a benchmark can read the broker's CPU time from /proc/<pid>/stat; 0 when
// unknown (ModeExternal).
func (b *Broker) PID() int { return b.pid }

// SASLBootstrapServers returns the address of the SASL_PLAINTEXT listener
// of a broker started with Options.SCRAM, e.g. "127.0.0.1:40125"; empty
// for another.
func (b *Broker) SASLBootstrapServers() string { return b.sasl }

// BootstrapServers returns the client address list, e.g. "127.0.0.1:40123"
// (Kafka's bootstrap.servers).
func (b *Broker) BootstrapServers() string { return b.bootstrap }

// Mode returns where the broker runs: ModeExternal, ModeContainer or
// ModeProcess (never ModeAuto).
func (b *Broker) Mode() Mode { return b.mode }

// ReadyIn returns the time from launching the broker (storage format and
// container creation included) to its first successful metadata response,
// plus the warm-up of its internal topics (Start). For ModeExternal it is
// the time to that first response.
func (b *Broker) ReadyIn() time.Duration { return b.readyIn }

// Describe returns one line for logs saying where the broker runs, e.g.
// "container started by testcontainers-go (image kafkastreams/kafka:4.1.1,
// host network, 127.0.0.1:40123)".
func (b *Broker) Describe() string { return b.describe }

// LogPath returns the file holding the broker's own log (JVM stdout and
// stderr), or "" for ModeExternal. Stop removes it; a Start that fails keeps
// it and names it in the error (ModeContainer) or quotes its tail.
func (b *Broker) LogPath() string { return b.logPath }

// LogDirs counts the partition logs in the broker's log directories
// whose directory name starts with prefix: the logs of live partitions of
// topics so named ("<topic>-<partition>") and those of deleted ones the
// broker has not removed yet ("<topic>-<partition>.<id>-delete"; removed
// log.segment.delete.delay.ms after the delete, Kafka's 60 s by default,
// after the broker has renamed them, which comes a moment after
// DeleteTopics returns). (A delay of 1 s on the test brokers was tried and
// taken out: the CI run with it failed both multi-node tests, a partition
// left without a leader after its leader's SIGKILL and a soak's running
// totals restarted from zero; whether it was the cause is not known.) It reads the directories through the broker's
// /proc entry (its root, its command line's server.properties, the
// log.dirs there), so it needs the broker's PID: an error for
// ModeExternal or an unknown PID, or when they cannot be read.
//
// A benchmark that deletes its topics waits for none of them to be left
// before its next run: a run of 128 partitions that began while the
// previous one's partition logs were being removed ran at 0.35-0.55x the
// rate of one that began after (the broker's request threads used 3-4x
// the CPU for the same records; BenchmarkPartitions, 2026-12-05).
func (b *Broker) LogDirs(prefix string) (int, error) {
	if b.pid <= 0 {
		return 0, fmt.Errorf("kafkaenv: the broker's process is unknown (mode %s)", b.mode)
	}
	root := fmt.Sprintf("/proc/%d/root", b.pid)
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", b.pid))
	if err != nil {
		return 0, fmt.Errorf("kafkaenv: the broker's command line: %w", err)
	}
	args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
	props := args[len(args)-1]
	if !strings.HasSuffix(props, ".properties") {
		return 0, fmt.Errorf("kafkaenv: the broker's command line ends with %q, not its server.properties", props)
	}
	text, err := os.ReadFile(filepath.Join(root, props))
	if err != nil {
		return 0, fmt.Errorf("kafkaenv: the broker's server.properties: %w", err)
	}
	var dirs []string
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "log.dirs="); ok {
			dirs = strings.Split(v, ",")
		}
	}
	if len(dirs) == 0 {
		return 0, fmt.Errorf("kafkaenv: no log.dirs in the broker's %s", props)
	}
	n := 0
	for _, d := range dirs {
		entries, err := os.ReadDir(filepath.Join(root, strings.TrimSpace(d)))
		if err != nil {
			return 0, fmt.Errorf("kafkaenv: the broker's log directory: %w", err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				n++
			}
		}
	}
	return n, nil
}

// Stop stops the broker and removes what Start created (the container, or
// the process and its temp dir with the log dir). It is idempotent; for
// ModeExternal it does nothing. It waits up to 15 s for a clean shutdown,
// then kills.
func (b *Broker) Stop() error {
	b.stopOnce.Do(func() {
		if b.stop != nil {
			b.stopErr = b.stop()
		}
	})
	return b.stopErr
}

// Start provides a broker as described in the package doc and returns once it
// answers a metadata request and, for a broker it started, once it is warm:
// its internal topics __consumer_offsets and __transaction_state exist and
// every partition's coordinator answers (see warmCoordinators; a fresh
// broker creates and loads them on first use, which cost a runner started
// on it 1-4 s). An external cluster is taken as it is. ctx bounds the whole
// start; the broker outlives ctx (call Stop). Errors wrap the sentinels
// above.
func Start(ctx context.Context, opts Options) (*Broker, error) {
	o := opts.withDefaults()
	bootstrap := strings.TrimSpace(os.Getenv(EnvBootstrapServers))
	switch {
	case o.Mode == ModeExternal && bootstrap == "":
		return nil, fmt.Errorf("%w: mode %q needs %s to be set", ErrBadOptions, ModeExternal, EnvBootstrapServers)
	case o.Mode == ModeExternal, o.Mode == ModeAuto && bootstrap != "":
		return startExternal(ctx, o, bootstrap)
	}
	if o.SCRAM != nil && o.Mode != ModeProcess {
		return nil, fmt.Errorf("%w: Options.SCRAM needs mode %q, not %q", ErrBadOptions, ModeProcess, o.Mode)
	}
	launch, err := chooseLauncher(ctx, o)
	if err != nil {
		return nil, err
	}
	bport, cport, err := choosePorts(o.BrokerPort, o.ControllerPort)
	if err != nil {
		return nil, err
	}
	clusterID, err := kraftconfig.NewClusterID()
	if err != nil {
		return nil, err
	}
	n := node{id: 1, brokerPort: bport, controllerPort: cport, clusterID: clusterID}
	saslPort := 0
	if o.SCRAM != nil {
		if len(o.SCRAM.Users) == 0 {
			return nil, fmt.Errorf("%w: Options.SCRAM has no user", ErrBadOptions)
		}
		// A free port other than the two just picked (and released).
		for saslPort == 0 || saslPort == bport || saslPort == cport {
			if saslPort, _, err = choosePorts(o.SCRAM.Port, 0); err != nil {
				return nil, err
			}
			if o.SCRAM.Port != 0 {
				break
			}
		}
		n.overrides, n.scram = o.SCRAM.overrides(bport, saslPort, cport), o.SCRAM.credentials()
	}
	groups, txns, err := internalPartitions(n)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadOptions, err)
	}
	b, err := launch(ctx, o, n)
	if err != nil {
		return nil, err
	}
	if saslPort != 0 {
		b.sasl = net.JoinHostPort(loopback, strconv.Itoa(saslPort))
	}
	// The warm-up gets what the launch left of ReadyTimeout, and 10 s at
	// least.
	begin := time.Now()
	if err := warmCoordinators(ctx, b.bootstrap, groups, txns, max(o.ReadyTimeout-b.readyIn, 10*time.Second)); err != nil {
		tail := ""
		if b.logPath != "" {
			tail = "; last lines of its log:\n" + tailFile(b.logPath, 30) // before Stop removes it
		}
		b.Stop()
		return nil, fmt.Errorf("%w: %s answers but its internal topics did not warm up: %v%s", ErrNotReady, b.bootstrap, err, tail)
	}
	warm := time.Since(begin)
	b.readyIn += warm
	o.Logf("kafka warm in %.1fs more: __consumer_offsets (%d partitions) and __transaction_state (%d) created and loaded", warm.Seconds(), groups, txns)
	return b, nil
}

// launcher starts one KRaft node and returns once it answers a metadata
// request (a node of a cluster answers once its quorum has formed).
type launcher func(ctx context.Context, o Options, n node) (*Broker, error)

// chooseLauncher returns the launcher of o.Mode (ModeContainer, ModeProcess,
// or ModeAuto: a container when a Docker daemon answers and has the image,
// else a local process).
func chooseLauncher(ctx context.Context, o Options) (launcher, error) {
	switch o.Mode {
	case ModeContainer:
		if err := probeDocker(ctx, o.DockerProbeTimeout); err != nil {
			return nil, fmt.Errorf("%w: %v (mode %q was required; start dockerd, or unset %s)", ErrNoDocker, err, ModeContainer, EnvMode)
		}
		if err := imagePresent(ctx, o.Image); err != nil {
			return nil, err
		}
		return startContainer, nil
	case ModeProcess:
		return startProcess, nil
	case ModeAuto:
	default:
		return nil, fmt.Errorf("%w: unknown mode %q (want %q, %q, %q or empty)", ErrBadOptions, o.Mode, ModeExternal, ModeContainer, ModeProcess)
	}
	if err := probeDocker(ctx, o.DockerProbeTimeout); err != nil {
		o.Logf("no Docker daemon (%v): falling back to a local Kafka process", err)
		return startProcess, nil
	}
	if err := imagePresent(ctx, o.Image); err != nil {
		o.Logf("Docker daemon answers but %v: falling back to a local Kafka process", err)
		return startProcess, nil
	}
	return startContainer, nil
}

// startExternal checks that the cluster at bootstrap answers.
func startExternal(ctx context.Context, o Options, bootstrap string) (*Broker, error) {
	o.Logf("using the external cluster %s=%s; starting nothing", EnvBootstrapServers, bootstrap)
	begin := time.Now()
	if err := waitReady(ctx, bootstrap, o.ReadyTimeout, nil); err != nil {
		return nil, fmt.Errorf("%w: external cluster %s (from %s): %v", ErrNotReady, bootstrap, EnvBootstrapServers, err)
	}
	b := &Broker{
		mode:      ModeExternal,
		bootstrap: bootstrap,
		readyIn:   time.Since(begin),
		describe:  fmt.Sprintf("external cluster from %s (%s)", EnvBootstrapServers, bootstrap),
	}
	return b, nil
}

// logReady logs the start-to-ready line shared by the launching modes.
func logReady(o Options, b *Broker) {
	o.Logf("kafka ready in %.1fs (%s) at %s", b.readyIn.Seconds(), b.mode, b.bootstrap)
}

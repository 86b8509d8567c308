package kafkaenv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Labels put on the broker containers. labelOwnerPID lets a later Start
// remove the containers of a test process that died without Stop (our
// replacement for Ryuk, whose image cannot be pulled here).
const (
	labelBroker   = "io.kafkastreams.kafkaenv"
	labelOwnerPID = "io.kafkastreams.kafkaenv.owner-pid"
)

// defaultDockerSocket is where dockerd listens unless told otherwise.
const defaultDockerSocket = "/var/run/docker.sock"

// readyLogLine is the line Kafka prints when the node has started.
const readyLogLine = "Kafka Server started"

// disableRyuk turns off the testcontainers-go reaper before its
// configuration is first read: Ryuk runs from an image that cannot be pulled
// on this project's machines.
var disableRyuk = sync.OnceFunc(func() {
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
})

// probeDocker returns nil when a Docker daemon answers within timeout. When
// DOCKER_HOST is set, exactly that daemon is asked (testcontainers-go would
// otherwise go on to /var/run/docker.sock); else testcontainers-go's own
// discovery is used.
func probeDocker(ctx context.Context, timeout time.Duration) error {
	disableRyuk()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			return fmt.Errorf("DOCKER_HOST=%s: %w", host, err)
		}
		defer cli.Close()
		if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
			return fmt.Errorf("DOCKER_HOST=%s: %w", host, err)
		}
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		defer func() {
			// testcontainers-go panics in some discovery paths.
			if r := recover(); r != nil {
				errc <- fmt.Errorf("testcontainers-go: %v", r)
			}
		}()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err == nil {
			cli.Close()
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			if _, serr := os.Stat(defaultDockerSocket); serr != nil {
				return fmt.Errorf("DOCKER_HOST unset and no %s (testcontainers-go: %v)", defaultDockerSocket, err)
			}
			return fmt.Errorf("%s: %w", defaultDockerSocket, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no answer within %v", timeout)
	}
}

// imagePresent returns ErrNoImage unless image exists in the local daemon.
func imagePresent(ctx context.Context, image string) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, image); err != nil {
		return fmt.Errorf("%w: image %s is not in the local Docker daemon (%v); build it with `make kafka-image` (it is never pulled)", ErrNoImage, image, err)
	}
	return nil
}

// reapStale removes broker containers whose owner process is gone.
func reapStale(ctx context.Context, o Options) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", labelBroker),
	})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[labelOwnerPID])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err == nil {
			o.Logf("removed stale broker container %.12s of dead process %d", c.ID, pid)
		}
	}
}

// fileLogConsumer copies the container's log into a file.
type fileLogConsumer struct{ f *os.File }

func (l fileLogConsumer) Accept(entry testcontainers.Log) { l.f.Write(entry.Content) }

// logfAdapter makes Options.Logf a testcontainers-go logger.
type logfAdapter func(format string, args ...any)

func (l logfAdapter) Printf(format string, args ...any) { l("testcontainers: "+format, args...) }

// startContainer runs o.Image with host networking through
// testcontainers-go and waits for the broker.
func startContainer(ctx context.Context, o Options, n node) (*Broker, error) {
	disableRyuk()
	bport, cport := n.brokerPort, n.controllerPort
	reapStale(ctx, o)
	logFile, err := os.CreateTemp("", "kafkaenv-container-*.log")
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: %w", err)
	}
	logPath := logFile.Name()
	consumers := []testcontainers.LogConsumer{fileLogConsumer{logFile}}
	if o.BrokerOutput != nil {
		consumers = append(consumers, writerLogConsumer{o})
	}

	begin := time.Now()
	ctr, err := testcontainers.Run(ctx, o.Image,
		testcontainers.WithLogger(logfAdapter(o.Logf)),
		testcontainers.WithCmd(n.containerArgs(o)...),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
		}),
		testcontainers.WithLabels(map[string]string{
			labelBroker:   "1",
			labelOwnerPID: strconv.Itoa(os.Getpid()),
		}),
		testcontainers.WithLogConsumers(consumers...),
		testcontainers.WithWaitStrategy(wait.ForLog(readyLogLine).WithStartupTimeout(o.ReadyTimeout)),
	)
	terminate := func() error {
		if ctr == nil {
			return nil
		}
		return testcontainers.TerminateContainer(ctr, testcontainers.StopTimeout(stopGrace))
	}
	if err != nil {
		terminate()
		logFile.Close()
		return nil, fmt.Errorf("%w: container of %s: %v; its log: %s\n%s", ErrNotReady, o.Image, err, logPath, tailFile(logPath, 30))
	}
	bootstrap := fmt.Sprintf("%s:%d", loopback, bport)
	if err := waitReady(ctx, bootstrap, o.ReadyTimeout, nil); err != nil {
		terminate()
		logFile.Close()
		return nil, fmt.Errorf("%w: container of %s on %s: %v; its log: %s\n%s", ErrNotReady, o.Image, bootstrap, err, logPath, tailFile(logPath, 30))
	}
	b := &Broker{
		mode:      ModeContainer,
		bootstrap: bootstrap,
		readyIn:   time.Since(begin),
		describe: fmt.Sprintf("container %.12s started by testcontainers-go (image %s, host network, controller %s:%d, log %s)",
			ctr.GetContainerID(), o.Image, loopback, cport, logPath),
		logPath:        logPath,
		controllerAddr: fmt.Sprintf("%s:%d", loopback, cport),
		stop: func() error {
			err := terminate()
			logFile.Close()
			os.Remove(logPath)
			if err != nil {
				return fmt.Errorf("kafkaenv: terminate container: %w", err)
			}
			return nil
		},
		kill: func() error {
			cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
			if err != nil {
				return fmt.Errorf("kafkaenv: kill container: %w", err)
			}
			defer cli.Close()
			if _, err := cli.ContainerKill(context.Background(), ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
				return fmt.Errorf("kafkaenv: kill container %.12s: %w", ctr.GetContainerID(), err)
			}
			return nil
		},
	}
	if info, err := ctr.Inspect(ctx); err == nil && info.State != nil {
		b.pid = info.State.Pid
	}
	logReady(o, b)
	return b, nil
}

// writerLogConsumer copies the container's log to Options.BrokerOutput.
type writerLogConsumer struct{ o Options }

func (w writerLogConsumer) Accept(entry testcontainers.Log) { w.o.BrokerOutput.Write(entry.Content) }

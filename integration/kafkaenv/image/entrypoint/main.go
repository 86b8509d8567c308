package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/kafkastreams/kafkastreams/integration/kafkaenv/kraftconfig"
)

// setFlag collects repeated -set key=value flags.
type setFlag map[string]string

func (s setFlag) String() string { return fmt.Sprint(map[string]string(s)) }

func (s setFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	s[k] = val
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kafkastreams entrypoint: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		c         kraftconfig.Config
		l         kraftconfig.Launch
		configDir string
		overrides = setFlag{}
	)
	flag.IntVar(&c.BrokerPort, "broker-port", 9092, "client (PLAINTEXT) listener port")
	flag.IntVar(&c.ControllerPort, "controller-port", 9093, "KRaft controller listener port")
	flag.StringVar(&c.Host, "host", "127.0.0.1", "address both listeners bind and the broker advertises")
	flag.StringVar(&c.LogDir, "log-dir", "/tmp/kafka-logs", "Kafka log.dirs")
	flag.StringVar(&configDir, "config-dir", "/tmp/kafka-config", "directory for server.properties and log4j2.properties")
	flag.StringVar(&c.ClusterID, "cluster-id", "", "KRaft cluster id (22 chars); default random")
	flag.StringVar(&l.Java, "java", "/opt/java/bin/java", "java binary")
	flag.StringVar(&l.LibsDir, "libs", "/opt/kafka/libs", "directory of the Kafka jars")
	flag.IntVar(&l.HeapMB, "heap-mb", 512, "maximum heap in MiB")
	flag.Var(overrides, "set", "extra server.properties entry key=value (repeatable)")
	flag.Parse()
	c.Overrides = overrides

	if c.ClusterID == "" {
		id, err := kraftconfig.NewClusterID()
		if err != nil {
			return err
		}
		c.ClusterID = id
	}
	props, log4j, err := kraftconfig.WriteFiles(configDir, c)
	if err != nil {
		return err
	}
	format := exec.Command(l.Java, l.FormatArgs(c, props, log4j)...)
	format.Stdout, format.Stderr = os.Stdout, os.Stderr
	if err := format.Run(); err != nil {
		return fmt.Errorf("format %s: %w", c.LogDir, err)
	}
	fmt.Printf("kafkastreams entrypoint: formatted %s (cluster %s); starting broker on %s:%d, controller on %s:%d\n",
		c.LogDir, c.ClusterID, c.Host, c.BrokerPort, c.Host, c.ControllerPort)
	argv := append([]string{l.Java}, l.ServerArgs(props, log4j)...)
	if err := syscall.Exec(l.Java, argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", l.Java, err)
	}
	return nil
}

package kraftconfig

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ServerPropertiesFile and Log4jFile are the names of the files that
// WriteFiles creates in its directory.
const (
	ServerPropertiesFile = "server.properties"
	Log4jFile            = "log4j2.properties"
)

// Main classes of the Kafka 4.x core jar (kafka_2.13).
const (
	// ServerMainClass starts a broker/controller: the class behind
	// bin/kafka-server-start.sh.
	ServerMainClass = "kafka.Kafka"
	// StorageToolMainClass formats a log directory: the class behind
	// bin/kafka-storage.sh.
	StorageToolMainClass = "kafka.tools.StorageTool"
)

// Config describes one combined broker+controller KRaft node.
type Config struct {
	// NodeID is Kafka's node.id. Default 1.
	NodeID int
	// Host is the address both listeners bind and the broker advertises.
	// Default "127.0.0.1". Never set it to a wildcard address.
	Host string
	// BrokerPort is the TCP port of the PLAINTEXT client listener
	// (Kafka's listeners=PLAINTEXT://Host:BrokerPort). Required.
	BrokerPort int
	// ControllerPort is the TCP port of the CONTROLLER listener used by the
	// KRaft quorum (controller.quorum.voters=NodeID@Host:ControllerPort).
	// Required; must differ from BrokerPort.
	ControllerPort int
	// LogDir is Kafka's log.dirs: where partitions and the metadata log
	// live. Required; it is created by the storage format step.
	LogDir string
	// ClusterID is the KRaft cluster id given to the storage format step: a
	// base64url-encoded UUID of 22 characters (see NewClusterID). Required.
	ClusterID string
	// Overrides are extra server.properties entries; they replace the
	// defaults of the same key. Default none.
	Overrides map[string]string
	// ScramCredentials are SCRAM credentials the storage format step
	// creates (kafka-storage format --add-scram, KIP-900), each as that
	// option takes it: "SCRAM-SHA-256=[name=app,password=secret]".
	// Default none.
	ScramCredentials []string
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("kraftconfig: invalid config")

// withDefaults returns c with NodeID and Host defaulted.
func (c Config) withDefaults() Config {
	if c.NodeID == 0 {
		c.NodeID = 1
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	return c
}

// Validate reports the first invalid field of c (after defaults), wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.NodeID < 0:
		return bad("node id %d is negative", c.NodeID)
	case c.Host == "0.0.0.0" || c.Host == "::" || c.Host == "[::]":
		return bad("host %q is a wildcard address; listeners must bind one address", c.Host)
	case c.BrokerPort <= 0 || c.BrokerPort > 65535:
		return bad("broker port %d is out of range 1..65535", c.BrokerPort)
	case c.ControllerPort <= 0 || c.ControllerPort > 65535:
		return bad("controller port %d is out of range 1..65535", c.ControllerPort)
	case c.BrokerPort == c.ControllerPort:
		return bad("broker and controller ports are both %d", c.BrokerPort)
	case c.LogDir == "":
		return bad("log dir is empty")
	case len(c.ClusterID) != 22:
		return bad("cluster id %q is not a 22-character base64url UUID", c.ClusterID)
	}
	return nil
}

// Properties returns the server.properties entries of c, defaults first
// replaced by c.Overrides.
func (c Config) Properties() map[string]string {
	c = c.withDefaults()
	hp := func(port int) string { return c.Host + ":" + strconv.Itoa(port) }
	p := map[string]string{
		"process.roles":                  "broker,controller",
		"node.id":                        strconv.Itoa(c.NodeID),
		"controller.quorum.voters":       fmt.Sprintf("%d@%s", c.NodeID, hp(c.ControllerPort)),
		"listeners":                      "PLAINTEXT://" + hp(c.BrokerPort) + ",CONTROLLER://" + hp(c.ControllerPort),
		"advertised.listeners":           "PLAINTEXT://" + hp(c.BrokerPort),
		"controller.listener.names":      "CONTROLLER",
		"inter.broker.listener.name":     "PLAINTEXT",
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                       c.LogDir,

		// One node: replication factor 1 and min ISR 1 everywhere.
		"default.replication.factor":                       "1",
		"min.insync.replicas":                              "1",
		"offsets.topic.replication.factor":                 "1",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",

		// Fewer internal partitions: faster creation on first use.
		"offsets.topic.num.partitions":                               "8",
		"transaction.state.log.num.partitions":                       "8",
		"num.partitions":                                             "1",
		"group.initial.rebalance.delay.ms":                           "0",
		"auto.create.topics.enable":                                  "false",
		"log.segment.bytes":                                          strconv.Itoa(16 << 20),
		"offsets.topic.segment.bytes":                                strconv.Itoa(16 << 20),
		"transaction.state.log.segment.bytes":                        strconv.Itoa(16 << 20),
		"log.retention.check.interval.ms":                            "60000",
		"transaction.remove.expired.transaction.cleanup.interval.ms": "60000",
		"num.network.threads":                                        "2",
		"num.io.threads":                                             "4",
	}
	for k, v := range c.Overrides {
		p[k] = v
	}
	return p
}

// ServerProperties renders Properties as a server.properties file, keys
// sorted.
func (c Config) ServerProperties() string {
	p := c.Properties()
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by kafkastreams kraftconfig: one combined broker+controller KRaft node.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	return b.String()
}

// Log4j2Properties is the log4j2 configuration of the broker: everything to
// stdout, level from the system property kafkaenv.log.level (default INFO),
// the noisiest loggers at WARN.
const Log4j2Properties = `# Written by kafkastreams kraftconfig.
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ${sys:kafkaenv.log.level:-INFO}
rootLogger.appenderRef.stdout.ref = STDOUT
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
`

// WriteFiles writes server.properties and log4j2.properties for c into dir
// (created if missing) and returns their paths.
func WriteFiles(dir string, c Config) (serverProps, log4j string, err error) {
	if err := c.Validate(); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("kraftconfig: %w", err)
	}
	serverProps = filepath.Join(dir, ServerPropertiesFile)
	log4j = filepath.Join(dir, Log4jFile)
	if err := os.WriteFile(serverProps, []byte(c.ServerProperties()), 0o644); err != nil {
		return "", "", fmt.Errorf("kraftconfig: %w", err)
	}
	if err := os.WriteFile(log4j, []byte(Log4j2Properties), 0o644); err != nil {
		return "", "", fmt.Errorf("kraftconfig: %w", err)
	}
	return serverProps, log4j, nil
}

// NewClusterID returns a random KRaft cluster id: 16 random bytes,
// base64url-encoded without padding (22 characters), the format of
// `kafka-storage random-uuid`.
//
// Like Kafka's Uuid.randomUuid, it never returns an id that starts with
// '-': kafka-storage format's "-t <id>" reads such an id as an option and
// fails ("expected one argument"), which made about 1 broker start in 64
// fail.
func NewClusterID() (string, error) {
	for {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("kraftconfig: cluster id: %w", err)
		}
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id, nil
		}
	}
}

// Launch says how to run the JVM: which java binary, where the Kafka jars
// are, and the JVM options.
type Launch struct {
	// Java is the java binary (a path, or "java" to use PATH).
	Java string
	// LibsDir is the directory holding every Kafka jar; the classpath is
	// LibsDir/* (expanded by the java launcher, not by a shell).
	LibsDir string
	// HeapMB is the maximum heap in MiB (-Xmx). Default 512.
	HeapMB int
	// ExtraJVMOptions are appended after the defaults. Default none.
	ExtraJVMOptions []string
}

// jvmArgs returns the JVM options shared by both commands; level is the
// broker's root log level.
func (l Launch) jvmArgs(log4j, level string) []string {
	heap := l.HeapMB
	if heap <= 0 {
		heap = 512
	}
	args := []string{
		fmt.Sprintf("-Xmx%dm", heap),
		"-Xms128m",
		"-XX:+UseG1GC",
		"-XX:MaxGCPauseMillis=20",
		"-XX:-UsePerfData",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + log4j,
		"-Dkafkaenv.log.level=" + level,
	}
	args = append(args, l.ExtraJVMOptions...)
	return append(args, "-cp", filepath.Join(l.LibsDir, "*"))
}

// FormatArgs returns the arguments (after the java binary) that format the
// log directory of c with its cluster id and the static voter set from
// controller.quorum.voters: `kafka-storage.sh format -t ID -c FILE`.
func (l Launch) FormatArgs(c Config, serverProps, log4j string) []string {
	args := l.jvmArgs(log4j, "WARN")
	args = append(args, StorageToolMainClass, "format", "-t", c.ClusterID, "-c", serverProps)
	for _, s := range c.ScramCredentials {
		args = append(args, "--add-scram", s)
	}
	return args
}

// ServerArgs returns the arguments (after the java binary) that start the
// node: `kafka-server-start.sh FILE`.
func (l Launch) ServerArgs(serverProps, log4j string) []string {
	args := l.jvmArgs(log4j, "INFO")
	return append(args, ServerMainClass, serverProps)
}

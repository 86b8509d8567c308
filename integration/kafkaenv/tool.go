package kafkaenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Tool runs one of Kafka's command-line tools, the class mainClass of the
// jars (kafka.admin.ConfigCommand is what kafka-configs.sh runs), with
// args, on the host: the java and the jars ModeProcess would use (opts'
// Java and JarsDir and their defaults; jars missing from the default
// directory are fetched as Start does). It works whatever the broker's
// mode: a tool is a client of the broker's 127.0.0.1 listener. It returns
// the tool's combined output; a tool that fails (a non-zero exit) returns
// an error quoting it. A JVM's start costs 1-10 s on a loaded machine.
func Tool(ctx context.Context, opts Options, mainClass string, args ...string) ([]byte, error) {
	o := opts.withDefaults()
	java, err := findJava(ctx, o)
	if err != nil {
		return nil, err
	}
	libs, err := ensureJars(ctx, o)
	if err != nil {
		return nil, err
	}
	// A short-lived client: the C1 compiler alone starts fastest.
	cmd := exec.CommandContext(ctx, java, append([]string{"-XX:TieredStopAtLevel=1", "-Xmx256m", "-cp", filepath.Join(libs, "*"), mainClass}, args...)...)
	begin := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kafkaenv: %s %s failed after %v: %v: %s", mainClass, strings.Join(args, " "), time.Since(begin).Round(time.Millisecond), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// SetClientQuotas sets the quotas of the clients whose client.id is
// clientID (Kafka's client quotas, KIP-13/KIP-546: config names such as
// consumer_byte_rate, producer_byte_rate, request_percentage) on the
// cluster at bootstrap, through kafka-configs' ConfigCommand --alter
// --entity-type clients (Tool; confluent-kafka-go has no
// AlterClientQuotas). The broker applies them to every connection of that
// client id from then on.
func SetClientQuotas(ctx context.Context, bootstrap, clientID string, quotas map[string]string) error {
	var kv []string
	for k, v := range quotas {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	_, err := Tool(ctx, Options{}, "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap,
		"--alter", "--add-config", strings.Join(kv, ","), "--entity-type", "clients", "--entity-name", clientID)
	return err
}

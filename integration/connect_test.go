package integration

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/kafkastreams/kafkastreams/runner"
)

// saslProperties are a SASL PLAIN client's --kafka_property settings, with
// a password that must never be printed.
var saslProperties = []string{
	"security.protocol=SASL_PLAINTEXT",
	"sasl.mechanism=PLAIN",
	"sasl.username=u",
	"sasl.password=secret-value",
}

// kafkaProperties sets Options.KafkaProperties as --kafka_property=kv
// flags do, for jobOptions.
func kafkaProperties(kvs []string) func(*runner.Options) {
	return func(o *runner.Options) {
		for _, kv := range kvs {
			k, v, _ := strings.Cut(kv, "=")
			o.KafkaProperties[k] = v
		}
	}
}

// TestSASLAgainstPlaintextListenerFailsAtOnce: a SASL client answered by the
// broker's PLAINTEXT listener used to end after 30 s with "create topics …
// context deadline exceeded … is a broker running there?", the cause only
// in librdkafka's log lines. The job now fails within seconds with an error
// saying the SASL handshake (authentication) failed, naming the mechanism
// and the likely cause, never the password; no topic is created.
func TestSASLAgainstPlaintextListenerFailsAtOnce(t *testing.T) {
	b := needBroker(t)
	app := uniqueName(t, "app")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p, s := beam.NewPipelineWithRoot()
	_ = beam.Reshuffle(s, beam.ParDo(s, double, beam.Create(s, 1, 2, 3)))
	start := time.Now()
	_, err := beam.Run(withJob(ctx, b.BootstrapServers(), app, kafkaProperties(saslProperties)), runner.Name, p)
	took := time.Since(start)
	if err == nil {
		t.Fatal("a SASL client against a PLAINTEXT listener ran the job")
	}
	t.Logf("failed after %.2fs with:\n%v", took.Seconds(), err)
	msg := err.Error()
	for _, want := range []string{
		"kafkastreams: authentication failed at " + b.BootstrapServers(),
		"security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN", "sasl.username=u",
		"SASL PLAIN mechanism handshake failed",
		"the listener does not expect SASL",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	if strings.Contains(msg, "secret-value") {
		t.Error("the error prints the password")
	}
	if strings.Contains(msg, "is a broker running there?") {
		t.Error("the error asks whether a broker runs there: one answered")
	}
	if took >= 15*time.Second {
		t.Errorf("the failure took %s to report, want < 15s", took)
	}
	if got := topicsWithPrefix(t, b.BootstrapServers(), app); len(got) != 0 {
		t.Errorf("topics exist after the failed handshake: %v", got)
	}
}

// TestSASLFailureNeverPrintsThePassword: the same set-up mistake made on the
// command line of a real job (cmd/commitactivity with --kafka_property):
// the process exits within seconds saying authentication failed with
// mechanism PLAIN, and nothing it prints (its logs, librdkafka's log lines,
// the final error) holds the password.
func TestSASLFailureNeverPrintsThePassword(t *testing.T) {
	b := needBroker(t)
	bin := filepath.Join(t.TempDir(), "commitactivity")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/commitactivity").CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/commitactivity: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"--bootstrap_servers=" + b.BootstrapServers(), "--application_id=" + uniqueName(t, "app"),
		"--input=" + commitActivityData, "--output=" + filepath.Join(t.TempDir(), "out.csv"), "--watermarks_addr="}
	for _, kv := range saslProperties {
		args = append(args, "--kafka_property="+kv)
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	took := time.Since(start)
	output := string(out)
	t.Logf("commitactivity exited after %.2fs (%v); its output:\n%s", took.Seconds(), err, indent(output))
	if err == nil {
		t.Fatal("the job ran with a SASL client against a PLAINTEXT listener")
	}
	for _, want := range []string{"kafkastreams: authentication failed at", "sasl.mechanism=PLAIN"} {
		if !strings.Contains(output, want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	if strings.Contains(output, "secret-value") {
		t.Error("the output prints the password")
	}
	if took >= 15*time.Second {
		t.Errorf("the process took %s to fail, want < 15s", took)
	}
}

// TestUnreachableBootstrapServersSaysSo: where nothing listens, the job
// still ends asking "is a broker running there?", now with the connection
// error librdkafka reported.
func TestUnreachableBootstrapServersSaysSo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// The check waits up to 30 s for a broker that may be starting; the
	// test's context ends it sooner, which execute reports the same way.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()

	p, s := beam.NewPipelineWithRoot()
	_ = beam.Reshuffle(s, beam.ParDo(s, double, beam.Create(s, 1, 2, 3)))
	_, err = beam.Run(withJob(ctx, addr, uniqueName(t, "app")), runner.Name, p)
	if err == nil {
		t.Fatalf("the job ran with nothing listening at %s", addr)
	}
	t.Logf("failed with:\n%v", err)
	for _, want := range []string{
		"no broker at " + addr + " answered",
		"Connection refused",
		"(bootstrap servers " + addr + ", from --bootstrap_servers: is a broker running there?)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
}

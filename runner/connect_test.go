package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/runner/kafkaio"
)

// saslProps are a SASL PLAIN client's settings with a password that must
// never be printed.
var saslProps = map[string]string{
	"security.protocol": "SASL_PLAINTEXT",
	"sasl.mechanism":    "PLAIN",
	"sasl.username":     "u",
	"sasl.password":     "secret-value",
}

// TestSecurityFailure: the error events librdkafka reports for a failed SASL
// or TLS handshake (texts as librdkafka 2.11 writes them) become an error
// naming what failed and the settings, never the password; other events
// (a broker that does not answer) are not security failures.
func TestSecurityFailure(t *testing.T) {
	const bs = "127.0.0.1:9092"
	for _, tc := range []struct {
		name  string
		ke    kafka.Error
		props map[string]string
		want  []string // nil: not a security failure
	}{
		{
			"SASL client against a PLAINTEXT listener",
			kafka.NewError(kafka.ErrAuthentication, "sasl_plaintext://127.0.0.1:9092/bootstrap: SASL PLAIN mechanism handshake failed: Broker: Request not valid in current SASL state: broker's supported mechanisms:  (after 3ms in state AUTH_HANDSHAKE)", false),
			saslProps,
			[]string{"kafkastreams: authentication failed at 127.0.0.1:9092 (security.protocol=SASL_PLAINTEXT, sasl.mechanism=PLAIN, sasl.username=u, from --kafka_property): sasl_plaintext://", "SASL PLAIN mechanism handshake failed", "the listener does not expect SASL"},
		},
		{
			"wrong password, the password quoted",
			kafka.NewError(kafka.ErrAuthentication, "sasl_ssl://b:9093/1: SASL authentication error: Authentication failed: Invalid username or password secret-value (after 5ms in state AUTH_REQ)", false),
			saslProps,
			[]string{"authentication failed at", "sasl.mechanism=PLAIN", "Invalid username or password ***"},
		},
		{
			"broker code",
			kafka.NewError(kafka.ErrSaslAuthenticationFailed, "Broker: SASL Authentication failed", false),
			map[string]string{"security.protocol": "SASL_SSL"},
			[]string{"authentication failed", "security.protocol=SASL_SSL", "sasl.mechanism=GSSAPI (the default)"},
		},
		{
			"transport error about SASL",
			kafka.NewError(kafka.ErrTransport, "sasl_plaintext://b:9092/1: SASL handshake failed (start (-4)): SASL(-4): no mechanism available", false),
			saslProps,
			[]string{"authentication failed", "sasl.mechanism=PLAIN"},
		},
		{
			"TLS client against a PLAINTEXT listener",
			kafka.NewError(kafka.ErrTransport, "ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to a PLAINTEXT broker listener? (after 20ms in state SSL_HANDSHAKE)", false),
			map[string]string{"security.protocol": "SSL", "ssl.key.password": "secret-value"},
			[]string{"kafkastreams: TLS handshake failed at 127.0.0.1:9092 (security.protocol=SSL, from --kafka_property)", "connecting to a PLAINTEXT broker listener?"},
		},
		{
			"certificate refused",
			kafka.NewError(kafka.ErrSsl, "ssl://b:9093/1: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed", false),
			map[string]string{"security.protocol": "SSL"},
			[]string{"TLS handshake failed", "certificate verify failed"},
		},
		{
			"nothing listens (the broker name says sasl)",
			kafka.NewError(kafka.ErrTransport, "sasl_plaintext://SASL-HOST:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)", false),
			saslProps,
			nil,
		},
		{
			"all brokers down",
			kafka.NewError(kafka.ErrAllBrokersDown, "1/1 brokers are down", false),
			saslProps,
			nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := securityFailure(tc.ke, bs, tc.props)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("want no security failure, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want a security failure, got none")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "secret-value") {
				t.Errorf("the error prints the password:\n%v", err)
			}
		})
	}
}

// TestRedact (issue 23): the runner's --kafka_property flag's String and
// every line of the runner's logger (runnerLogger, what execute hands to
// every part of the runner) hide each secret property's value, librdkafka
// 2.11's sasl.oauthbearer.assertion.private.key.passphrase and
// …private.key.pem included, and keep the other values.
func TestRedact(t *testing.T) {
	props := properties{
		"sasl.password":                                     "pw1",
		"ssl.key.password":                                  "pw2",
		"sasl.oauthbearer.client.secret":                    "cs3",
		"sasl.oauthbearer.config":                           "principal=admin token=tk4",
		"sasl.oauthbearer.assertion.private.key.passphrase": "pp5",
		"sasl.oauthbearer.assertion.private.key.pem":        "-----BEGIN PRIVATE KEY-----pem6",
		"sasl.username":                                     "alice",
	}
	const secrets = "pw1 pw2 cs3 tk4 pp5 pem6"
	leaks := func(s string) []string {
		var out []string
		for _, v := range strings.Fields(secrets) {
			if strings.Contains(s, v) {
				out = append(out, v)
			}
		}
		return out
	}
	if s := props.String(); len(leaks(s)) > 0 || !strings.Contains(s, "sasl.username=alice") {
		t.Errorf("the flag's String shows %v or hides the user: %s", leaks(s), s)
	}

	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	text := "config " + fmt.Sprint(map[string]string(props))
	runnerLogger(props).Warn("kafkastreams: "+text, "err", errors.New(text), "config", text)
	if out := buf.String(); len(leaks(out)) > 0 || strings.Count(out, "alice") != 3 || !strings.Contains(out, "runner="+Name) {
		t.Errorf("the runner's log line shows %v, or not the user three times, or no runner:\n%s", leaks(out), out)
	}
}

// TestCheckBrokersNothingListens: where nothing listens, checkBrokers waits
// (a broker may be starting) and then says why in an error unreachable
// recognises, so execute adds "is a broker running there?".
func TestCheckBrokersNothingListens(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = checkBrokers(ctx, addr, saslProps)
	if err == nil || !unreachable(err) || !strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("want an unreachable error saying the connection was refused, got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("checkBrokers took %s after its context ended", d)
	}
	if strings.Contains(err.Error(), "secret-value") {
		t.Errorf("the error prints the password: %v", err)
	}
	t.Logf("%v", err)
}

// TestReadPropertiesRedacted (issue 23): a kafkaio.Read's own client
// properties (WithProperty: its stage consumer takes them) are in the
// checked plan's properties, so the run's logger (runnerLogger, rebuilt
// with them once the plan is checked) hides their secrets too.
func TestReadPropertiesRedacted(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	kafkaio.Read(s, "in", kafkaio.WithProperty("sasl.password", "read-secret-7"), kafkaio.WithProperty("client.rack", "r1"))
	pipe, pl := planOf(t, p)
	cp, err := checkStages(&checkEnv{comps: pipe.GetComponents(), pl: pl, o: DefaultOptions(), log: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	runnerLogger(append([]map[string]string{nil}, cp.properties...)...).Warn("kafkastreams: consumer error: password read-secret-7 refused (rack r1)")
	if out := buf.String(); strings.Contains(out, "read-secret-7") || !strings.Contains(out, "r1") {
		t.Errorf("the Read's password is shown, or its rack hidden:\n%s", out)
	}
}

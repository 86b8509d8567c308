package kafkaclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// secretKeys are librdkafka 2.11's properties whose values are secrets
// (CONFIGURATION.md), with sasl.jaas.config (Java's) and a key in another
// case. Issue 23: the last two 2.11 keys were printed in clear.
var secretKeys = []string{
	"sasl.password",
	"ssl.key.password",
	"ssl.keystore.password",
	"ssl.key.pem",
	"ssl_key",
	"sasl.oauthbearer.config",
	"sasl.oauthbearer.client.secret",
	"sasl.oauthbearer.client.credentials.client.secret",
	"sasl.jaas.config",
	"SASL.Password",
	"sasl.oauthbearer.assertion.private.key.passphrase",
	"sasl.oauthbearer.assertion.private.key.pem",
}

// publicKeys hold paths, names and certificates: printed as they are.
var publicKeys = []string{
	"sasl.username",
	"security.protocol",
	"ssl.key.location",
	"ssl.keystore.location",
	"ssl.certificate.pem",
	"ssl.ca.pem",
	"https.ca.pem",
	"sasl.kerberos.keytab",
	"sasl.oauthbearer.client.id",
	"sasl.oauthbearer.assertion.private.key.file",
	"sasl.oauthbearer.token.endpoint.url",
}

// testProps gives every secret key the value "S<i>-secret" and every public
// key "P<i>-public".
func testProps() map[string]string {
	props := map[string]string{}
	for i, k := range secretKeys {
		props[k] = fmt.Sprintf("S%02d-secret", i)
	}
	for i, k := range publicKeys {
		props[k] = fmt.Sprintf("P%02d-public", i)
	}
	return props
}

// checkText fails when text shows a secret value of testProps or lacks a
// public one.
func checkText(t *testing.T, where, text string) {
	t.Helper()
	for i, k := range secretKeys {
		if v := fmt.Sprintf("S%02d-secret", i); strings.Contains(text, v) {
			t.Errorf("%s shows the value of %s (%s):\n%s", where, k, v, text)
		}
	}
	for i, k := range publicKeys {
		if v := fmt.Sprintf("P%02d-public", i); !strings.Contains(text, v) {
			t.Errorf("%s hides the value of %s (%s), not a secret:\n%s", where, k, v, text)
		}
	}
}

// TestSecretProperty: every secret key of librdkafka 2.11 is one, no path,
// certificate or name is.
func TestSecretProperty(t *testing.T) {
	for _, k := range secretKeys {
		if !SecretProperty(k) {
			t.Errorf("SecretProperty(%q) = false, want true", k)
		}
	}
	for _, k := range publicKeys {
		if SecretProperty(k) {
			t.Errorf("SecretProperty(%q) = true, want false", k)
		}
	}
}

// allValues is every property of props as "key=value" text, the way an
// error quoting a configuration would print it.
func allValues(props map[string]string) string {
	var b strings.Builder
	for k, v := range props {
		fmt.Fprintf(&b, "%s=%s ", k, v)
	}
	return b.String()
}

// TestRedactEveryPath: the secret values are hidden, and the public ones
// kept, by Redact, RedactError, FormatProperties and a logger through
// RedactHandler (message, string, error, any-valued, grouped and WithAttrs
// attributes).
func TestRedactEveryPath(t *testing.T) {
	props := testProps()
	text := allValues(props)
	checkText(t, "Redact", Redact(text, props))
	checkText(t, "FormatProperties", FormatProperties(props))

	base := errors.New("base")
	err := RedactError(fmt.Errorf("client config %s: %w", text, base), props)
	checkText(t, "RedactError", err.Error())
	if !errors.Is(err, base) {
		t.Errorf("RedactError(err) is not errors.Is err: %v", err)
	}
	if plain := fmt.Errorf("nothing secret: %w", base); RedactError(plain, props) != plain {
		t.Error("RedactError wrapped an error that holds no secret")
	}
	if RedactError(nil, props) != nil {
		t.Error("RedactError(nil) is not nil")
	}

	var buf bytes.Buffer
	log := slog.New(RedactHandler(slog.NewJSONHandler(&buf, nil), props))
	log.With("cfg", text).WithGroup("g").Warn("message "+text,
		"s", text, "err", fmt.Errorf("wrapped: %w", errors.New(text)),
		"any", props, slog.Group("grp", "s", text))
	out := buf.String()
	if n := strings.Count(out, "P00-public"); n != 6 {
		t.Errorf("the log line holds %d of the 6 attributes with the text:\n%s", n, out)
	}
	checkText(t, "the log line", out)
}

// TestRedactLongestFirst: a secret that holds another is hidden whole.
func TestRedactLongestFirst(t *testing.T) {
	props := map[string]string{"sasl.password": "tk", "sasl.oauthbearer.config": "principal=admin token=tk-long"}
	if got, want := Redact("a principal=admin token=tk-long b tk", props), "a *** b ***"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}

// TestRedactHandlerWithoutSecrets: with no secret value, the handler is the
// one given and records pass unchanged.
func TestRedactHandlerWithoutSecrets(t *testing.T) {
	h := slog.NewTextHandler(&bytes.Buffer{}, nil)
	if got := RedactHandler(h, map[string]string{"sasl.username": "u", "sasl.password": ""}); got != h {
		t.Errorf("RedactHandler wrapped a handler with no secret to hide")
	}
	if !RedactHandler(h, testProps()).Enabled(context.Background(), slog.LevelInfo) {
		t.Error("the redacting handler is not enabled where its handler is")
	}
}

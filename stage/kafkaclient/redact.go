package kafkaclient

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
)

// Redacted is what Redact writes in place of a secret value.
const Redacted = "***"

// SecretProperty reports whether the value of the librdkafka property key
// is a secret that no log line, error or page may show. The list is
// librdkafka 2.11's CONFIGURATION.md (the version confluent-kafka-go
// v2.11.1 bundles), read property by property:
//
//   - every key holding "password", "passphrase" or "secret": sasl.password,
//     ssl.key.password, ssl.keystore.password,
//     sasl.oauthbearer.client.secret and its alias
//     sasl.oauthbearer.client.credentials.client.secret,
//     sasl.oauthbearer.assertion.private.key.passphrase;
//   - private keys given inline: ssl.key.pem, ssl_key (the key set through
//     rd_kafka_conf_set_ssl_cert) and
//     sasl.oauthbearer.assertion.private.key.pem (2.11): any key naming a
//     private key or ending in "key.pem";
//   - sasl.oauthbearer.config (the unsecured-JWT settings and the
//     extensions, whose values may be credentials);
//   - sasl.jaas.config, the Java client's property: not librdkafka's, but a
//     user coming from Java passes it with a password inside.
//
// Paths are not secret: ssl.key.location,
// sasl.oauthbearer.assertion.private.key.file, ssl.keystore.location,
// sasl.kerberos.keytab. Neither are certificates (ssl.certificate.pem,
// ssl.ca.pem, https.ca.pem), sasl.username or the OAuth client id. The
// match ignores case.
func SecretProperty(key string) bool {
	k := strings.ToLower(key)
	switch {
	case strings.Contains(k, "password"), strings.Contains(k, "passphrase"), strings.Contains(k, "secret"):
		return true
	case k == "sasl.oauthbearer.config", k == "sasl.jaas.config", k == "ssl_key":
		return true
	case strings.HasSuffix(k, "key.pem"):
		return true
	case strings.Contains(k, "private.key"):
		return !strings.HasSuffix(k, ".file") && !strings.HasSuffix(k, ".location")
	}
	return false
}

// Redact returns s with every non-empty value of a secret property
// (SecretProperty) of any of props replaced by Redacted, the longest value
// first (so a secret holding another is hidden whole). It is the one
// redaction of the module: every error, log line and printed property map
// that may hold a client's configuration goes through it (RedactError,
// RedactHandler, FormatProperties). A value is found wherever it occurs,
// inside a longer word too: a one-letter password hides that letter
// everywhere, which is noisy, never a leak.
func Redact(s string, props ...map[string]string) string {
	var secrets []string
	for _, m := range props {
		for k, v := range m {
			if v != "" && SecretProperty(k) {
				secrets = append(secrets, v)
			}
		}
	}
	if len(secrets) == 0 {
		return s
	}
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}

// redactedError is an error whose text went through Redact; errors.Is and
// errors.As still see the error it wraps.
type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// RedactError returns err itself when its text holds no secret value of
// props (Redact leaves it unchanged, nil included), else an error whose
// Error() is Redact(err.Error(), props...) and which unwraps to err.
func RedactError(err error, props ...map[string]string) error {
	if err == nil {
		return nil
	}
	if text := Redact(err.Error(), props...); text != err.Error() {
		return &redactedError{err: err, text: text}
	}
	return err
}

// FormatProperties prints a property map as "key=value" pairs sorted by
// key and joined by ",", through Redact: a secret property's value reads
// Redacted. It is what a --kafka_property flag's String returns.
func FormatProperties(props map[string]string) string {
	kv := make([]string, 0, len(props))
	for k, v := range props {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return Redact(strings.Join(kv, ","), props)
}

// RedactHandler returns a slog.Handler that passes every record to h with
// its message and the text of every attribute value (strings, errors, any
// value through fmt's %+v; groups too, and the attributes of WithAttrs) put
// through Redact(…, props...). Attributes whose text holds no secret are
// passed as they are, kinds and all. With no secret value in props it
// returns h itself. props are read when a record is handled: they must not
// change while the handler is in use.
func RedactHandler(h slog.Handler, props ...map[string]string) slog.Handler {
	if !anySecret(props) {
		return h
	}
	return &redactHandler{h: h, props: props}
}

// anySecret reports whether props hold a non-empty secret value.
func anySecret(props []map[string]string) bool {
	for _, m := range props {
		for k, v := range m {
			if v != "" && SecretProperty(k) {
				return true
			}
		}
	}
	return false
}

type redactHandler struct {
	h     slog.Handler
	props []map[string]string
}

func (r *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, Redact(rec.Message, r.props...), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r *redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = r.attr(a)
	}
	return &redactHandler{h: r.h.WithAttrs(red), props: r.props}
}

func (r *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{h: r.h.WithGroup(name), props: r.props}
}

// attr is a with its value's text through Redact, a group attribute by
// attribute.
func (r *redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = r.attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindString:
		return slog.String(a.Key, Redact(v.String(), r.props...))
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		default:
			text = fmt.Sprintf("%+v", x)
		}
		if red := Redact(text, r.props...); red != text {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

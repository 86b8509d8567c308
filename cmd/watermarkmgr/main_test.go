package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the service's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartupPrintRedacted (issue 23): the command's log lines, its
// "serving" line with the --kafka_property settings first, show no secret
// property's value (librdkafka 2.11's
// sasl.oauthbearer.assertion.private.key.passphrase and …pem included), and
// the other settings as they are; the flag's String hides them too.
func TestStartupPrintRedacted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String() // nothing listens there once closed
	l.Close()
	secrets := map[string]string{
		"sasl.password":                                     "pw-1-secret",
		"ssl.key.password":                                  "pw-2-secret",
		"sasl.oauthbearer.client.secret":                    "cs-3-secret",
		"sasl.oauthbearer.assertion.private.key.passphrase": "pp-4-secret",
		"sasl.oauthbearer.assertion.private.key.pem":        "pem-5-secret",
	}
	args := []string{"--bootstrap_servers", dead, "--report_topic", "wm-test-report", "--http_addr", "127.0.0.1:0", "--grpc_addr", "",
		"--kafka_property", "sasl.username=alice"}
	for k, v := range secrets {
		args = append(args, "--kafka_property", k+"="+v)
	}
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &logs, slog.NewTextHandler(&logs, nil)) }()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(logs.String(), "watermarkmgr: serving") {
		select {
		case code := <-done:
			t.Fatalf("run returned %d before serving:\n%s", code, logs.String())
		case <-deadline:
			t.Fatalf("no serving line after 10 s:\n%s", logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run returned %d after a stop, want 0", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return 15 s after its context ended")
	}
	out := logs.String()
	for k, v := range secrets {
		if strings.Contains(out, v) {
			t.Errorf("the log shows the value of %s:\n%s", k, out)
		}
	}
	for _, want := range []string{"sasl.username=alice", "sasl.password=***", "sasl.oauthbearer.assertion.private.key.pem=***"} {
		if !strings.Contains(out, want) {
			t.Errorf("the serving line lacks %q:\n%s", want, out)
		}
	}
	p := properties{}
	for k, v := range secrets {
		_ = p.Set(k + "=" + v)
	}
	for k, v := range secrets {
		if strings.Contains(p.String(), v) {
			t.Errorf("the flag's String shows the value of %s: %s", k, p.String())
		}
	}
}

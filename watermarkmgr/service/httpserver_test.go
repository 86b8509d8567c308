package service

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// httpOnly starts a Server that serves HTTP alone on a listener of
// 127.0.0.1 (no Kafka consumer, no gRPC), as Start sets it up; configure
// may change the http.Server before it serves. Stopped at the test's end.
func httpOnly(t *testing.T, configure func(*http.Server)) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Tracker: NewTracker(nil), httpLis: lis, cancel: func() {}}
	s.setHTTP(NewHTTPHandlerWith(s.Tracker, nil, nil, nil), "127.0.0.1:0")
	if configure != nil {
		configure(s.httpSrv)
	}
	go s.serveHTTP(slog.Default())
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// openEvents opens GET /events on s and waits for its first event. The
// response's body is closed at the test's end.
func openEvents(t *testing.T, s *Server) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /events: %s: %s", resp.Status, b)
	}
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)
	return resp, r
}

// readEvent reads one server-sent event from r, failing the test if the
// stream ends first.
func readEvent(t *testing.T, r *bufio.Reader) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the event stream ended: %v", err)
		}
		if line == "\n" {
			return
		}
	}
}

// TestStopEndsEventStreams (issue 23): Stop with a live page open (a GET
// /events stream) returns at once and the stream ends; Stop used to wait
// for its 2 s shutdown deadline, on every exit of an instance whose page
// was open.
func TestStopEndsEventStreams(t *testing.T) {
	s := httpOnly(t, nil)
	_, r := openEvents(t, s)
	start := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("Stop took %s with an event stream open, want < 500ms", took)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(r)
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Error("the event stream is still open 2 s after Stop returned")
	}
}

// TestEventStreamsCapped (issue 23): the MaxEventStreams+1th GET /events
// client gets 503 with Retry-After; once a stream ends, a new one is
// served.
func TestEventStreamsCapped(t *testing.T) {
	s := httpOnly(t, nil)
	var first *http.Response
	for i := 0; i < MaxEventStreams; i++ {
		resp, _ := openEvents(t, s)
		if i == 0 {
			first = resp
		}
	}
	resp, err := http.Get("http://" + s.HTTPAddr() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		resp.Body.Close() // a stream: not read
		t.Fatalf("GET /events with %d open: %s (Retry-After %q); want 503 with Retry-After", MaxEventStreams, resp.Status, resp.Header.Get("Retry-After"))
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("refused: %s", strings.TrimSpace(string(b)))
	first.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + s.HTTPAddr() + "/events")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /events after a stream ended: still %s 5 s later", resp.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEventStreamOutlivesWriteTimeout (issue 23): the server's
// WriteTimeout and ReadTimeout do not cut a GET /events stream: each event
// moves the write deadline, and net/http clears the read deadline once a
// bodiless request is read (its background read, which cancels the
// request's context on a read error, would otherwise time out). With both
// at 200 ms the second event (a second after the first, EventInterval)
// still arrives.
func TestEventStreamOutlivesWriteTimeout(t *testing.T) {
	s := httpOnly(t, func(h *http.Server) {
		h.WriteTimeout = 200 * time.Millisecond
		h.ReadTimeout = 200 * time.Millisecond
	})
	_, r := openEvents(t, s)
	start := time.Now()
	readEvent(t, r)
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("the second event came after %s: the test needs it after the WriteTimeout", took)
	}
}

// TestHTTPServerTimeouts (issue 23): Server's HTTP server bounds reading,
// writing and idle connections, not only the headers.
func TestHTTPServerTimeouts(t *testing.T) {
	s := httpOnly(t, nil)
	h := s.httpSrv
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": h.ReadHeaderTimeout, "ReadTimeout": h.ReadTimeout, "WriteTimeout": h.WriteTimeout, "IdleTimeout": h.IdleTimeout} {
		if d <= 0 {
			t.Errorf("%s = %s, want a bound", name, d)
		}
	}
}

// TestHostGuard (issue 23): a server listening on a loopback address
// refuses a request naming another host (DNS rebinding: a web page's own
// name resolved to 127.0.0.1) with 403 and says why; it serves localhost,
// loopback addresses and the name it was given. Bound elsewhere (the
// wildcard) it serves any host.
func TestHostGuard(t *testing.T) {
	s := httpOnly(t, nil)
	_, port, _ := net.SplitHostPort(s.HTTPAddr())
	for host, want := range map[string]int{
		"evil.example:" + port:   http.StatusForbidden,
		"evil.example":           http.StatusForbidden,
		"localhost.evil.example": http.StatusForbidden,
		"127.0.0.1:" + port:      http.StatusOK,
		"localhost:" + port:      http.StatusOK,
		"LOCALHOST.:" + port:     http.StatusOK,
		"[::1]:" + port:          http.StatusOK,
		"127.0.0.1":              http.StatusOK,
	} {
		for _, path := range []string{"/state", "/healthz"} {
			req, _ := http.NewRequest("GET", "http://"+s.HTTPAddr()+path, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET %s with Host %q: %s, want %d: %s", path, host, resp.Status, want, b)
			}
			if want == http.StatusForbidden && !strings.Contains(string(b), "DNS rebinding") {
				t.Errorf("GET %s with Host %q: the refusal does not say why: %s", path, host, b)
			}
		}
	}

	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	serve := func(h http.Handler, host string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/state", nil)
		r.Host = host
		h.ServeHTTP(w, r)
		return w.Code
	}
	named := hostGuard(ok, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8089}, "kafkastreams.local:8089")
	if got := serve(named, "kafkastreams.local:8089"); got != http.StatusOK {
		t.Errorf("Host naming the configured address: %d, want 200", got)
	}
	if got := serve(named, "other.local:8089"); got != http.StatusForbidden {
		t.Errorf("Host naming another name on loopback: %d, want 403", got)
	}
	wildcard := hostGuard(ok, &net.TCPAddr{IP: net.IPv4zero, Port: 8089}, ":8089")
	if got := serve(wildcard, "evil.example:8089"); got != http.StatusOK {
		t.Errorf("bound to the wildcard, Host evil.example: %d, want 200 (the operator chose to serve the network)", got)
	}
}

// TestEventStreamEndsWithItsContext: a stream served by the handler alone
// ends when its request's context does (what Stop cancels).
func TestEventStreamEndsWithItsContext(t *testing.T) {
	h := NewHTTPHandlerWith(NewTracker(nil), nil, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/events", nil).WithContext(ctx))
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("GET /events went on 2 s after its context ended")
	}
}

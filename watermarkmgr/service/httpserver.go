package service

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// The timeouts of Server's HTTP server (Config.HTTPAddr). Every route is a
// GET with no body whose answer is at most a few MB (/metrics, /watermarks
// of a large job), so each bound is generous for a client that reads and
// short for one that holds a connection open without reading.
const (
	// httpReadHeaderTimeout bounds reading a request's headers.
	httpReadHeaderTimeout = 10 * time.Second
	// httpReadTimeout bounds reading a whole request.
	httpReadTimeout = 30 * time.Second
	// httpWriteTimeout bounds writing a response, from the end of the
	// request's headers; GET /events moves it to EventWriteTimeout after
	// each event instead, so a stream is not cut.
	httpWriteTimeout = 30 * time.Second
	// httpIdleTimeout closes a kept-alive connection this long after its
	// last response.
	httpIdleTimeout = 2 * time.Minute
)

// newHTTPServer returns the http.Server Server runs on lis, configured
// (Config.HTTPAddr) the address it was asked to listen on: h behind
// hostGuard, the timeouts above, and a base context for every request that
// end (the returned func, also registered with RegisterOnShutdown) cancels,
// so that open GET /events streams return when the server shuts down
// instead of holding Shutdown until its deadline.
func newHTTPServer(h http.Handler, lis net.Listener, configured string) (*http.Server, context.CancelFunc) {
	base, end := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           hostGuard(h, lis.Addr(), configured),
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	srv.RegisterOnShutdown(end)
	return srv, end
}

// hostGuard returns h, refusing requests whose Host header names another
// host when the server listens on a loopback address (bound: 127.0.0.1:8089,
// [::1]:0, …): a web page the user opened elsewhere could otherwise read
// GET /state or /watermarks through DNS rebinding (a name of its own that
// resolves to 127.0.0.1 by then), the browser taking the answer for the
// page's own. It accepts a Host (its port ignored, the name's case and a
// final dot too) that is:
//
//   - "localhost";
//   - an IP address literal of the loopback ("127.0.0.1", "[::1]"), which a
//     browser sends only when its address bar names that address;
//   - the host part of configured (what Config.HTTPAddr said: a name the
//     operator chose, say one /etc/hosts maps to 127.0.0.1);
//   - absent (an HTTP/1.0 request: no browser sends one).
//
// Anything else is refused with 403 and a message naming the accepted
// hosts. A server bound to another address, the wildcard (":8089",
// "0.0.0.0:8089") included, accepts every Host: its operator chose to
// serve the network, whose clients reach it by whatever name they know it
// by, and a page's script could reach it directly as well as through
// rebinding.
func hostGuard(h http.Handler, bound net.Addr, configured string) http.Handler {
	tcp, ok := bound.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return h
	}
	names := map[string]bool{"localhost": true}
	if host, _, err := net.SplitHostPort(configured); err == nil && host != "" {
		names[hostName(host)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "" || loopbackHost(r.Host, names) {
			h.ServeHTTP(w, r)
			return
		}
		http.Error(w, fmt.Sprintf("watermarkmgr/service: refused: Host %q is not this server's: it listens on %s (loopback) and answers only requests for localhost, a loopback address or the name it was given (%q), so that no web page can read it through DNS rebinding; to serve it under other names, listen on another address",
			r.Host, bound, configured), http.StatusForbidden)
	})
}

// loopbackHost reports whether hostport (a Host header: "name:port",
// "[::1]:port", "name") names a loopback IP address or one of names.
func loopbackHost(hostport string, names map[string]bool) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = hostName(host)
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return names[host]
}

// hostName is a host as hostGuard compares it: brackets, case and a final
// dot dropped.
func hostName(host string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
}

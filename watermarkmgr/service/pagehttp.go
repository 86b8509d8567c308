package service

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"time"
)

// pageFS holds the live page: index.html, app.js and style.css, written
// for this page (no library, nothing fetched from elsewhere).
//
//go:embed page
var pageFS embed.FS

// pageState reads the tracker, the info (its local and application
// counts) and the clock into a PageState.
func pageState(t *Tracker, info func() Info) PageState {
	i := info()
	var local map[string]LocalStage
	if i.Local != nil {
		local = i.Local()
	}
	var app map[string]AppStage
	if i.App != nil {
		app = i.App()
	}
	return BuildPageState(t.Stages(), i, local, app, t.Started(), t.Now())
}

// MaxEventStreams is how many GET /events streams one handler serves at
// once. Each costs a marshalled PageState up to four times a second
// (minEventGap); the next client is refused with 503 and a Retry-After of
// eventRetryAfter until one ends.
const MaxEventStreams = 8

// eventRetryAfter is the Retry-After of a GET /events refused because
// MaxEventStreams are open, in whole seconds.
const eventRetryAfter = 5

// EventWriteTimeout bounds the writing of one GET /events state: the
// handler moves the connection's write deadline (http.Server.WriteTimeout,
// which would end the stream once it passed) to this long after each
// event, so a stream lives as long as its client reads, and a client that
// stops reading is dropped after this long.
const EventWriteTimeout = 30 * time.Second

// registerPage serves GET / (the page), its assets, GET /state and GET
// /events on mux. At most maxStreams GET /events streams run at once (a
// semaphore: 503 beyond); each ends when its request's context does, which
// Server.Stop cancels (newHTTPServer's BaseContext).
func registerPage(mux *http.ServeMux, t *Tracker, info func() Info, maxStreams int) {
	streams := make(chan struct{}, maxStreams)
	sub, _ := fs.Sub(pageFS, "page")
	files := http.FileServerFS(sub)
	mux.Handle("GET /page/", http.StripPrefix("/page/", files))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		b, err := pageFS.ReadFile("page/index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pageState(t, info))
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		fl, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", http.StatusInternalServerError)
			return
		}
		select {
		case streams <- struct{}{}:
			defer func() { <-streams }()
		default:
			w.Header().Set("Retry-After", strconv.Itoa(eventRetryAfter))
			http.Error(w, fmt.Sprintf("watermarkmgr/service: %d live pages are open on this server already (GET /events streams): close one or try again", maxStreams), http.StatusServiceUnavailable)
			return
		}
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		tick := time.NewTicker(EventInterval)
		defer tick.Stop()
		var last time.Time
		for {
			if wait := minEventGap - time.Since(last); wait > 0 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(wait):
				}
			}
			changed := t.Changed()
			b, err := json.Marshal(pageState(t, info))
			if err != nil {
				return
			}
			// Not supported (a ResponseRecorder): there is no deadline to move.
			_ = rc.SetWriteDeadline(time.Now().Add(EventWriteTimeout))
			if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
				return
			}
			fl.Flush()
			last = time.Now()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			case <-changed:
			}
		}
	})
}

// EventInterval is how often GET /events sends the page's state when
// nothing changes (the stuck timers and lags move with the clock).
const EventInterval = time.Second

// minEventGap bounds GET /events to four states a second.
const minEventGap = 250 * time.Millisecond

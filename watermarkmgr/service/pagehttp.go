package service

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
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

// registerPage serves GET / (the page), its assets, GET /state and GET
// /events on mux.
func registerPage(mux *http.ServeMux, t *Tracker, info func() Info) {
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

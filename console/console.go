// Package console serves the support console (docs/console.md): a few
// static files embedded in the binary — HTML, CSS and JavaScript, no
// build step, nothing fetched from elsewhere — and, on the same origin,
// the API they call. The console holds no power of its own: every
// request it makes is an API call with the agent's key, checked as any
// client's.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the console's pages under /console/ and hands /v1/ to
// api, the HTTP API's handler, so that the pages call the API on their
// own origin (no cross-origin requests to allow). Every path under
// /console/ that names no file is the one page, which routes itself: a
// deep link such as /console/ns/1/players/42 loads it.
func Handler(api http.Handler) http.Handler {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	static := http.StripPrefix("/console/", http.FileServerFS(files))
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusFound)
	})
	mux.HandleFunc("GET /console/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := fs.Stat(files, r.PathValue("path")); err != nil || r.PathValue("path") == "" {
			http.ServeFileFS(w, r, files, "index.html")
			return
		}
		static.ServeHTTP(w, r)
	})
	return secure(mux)
}

// secure sets the headers that keep the pages to themselves: scripts,
// styles and requests from this origin only (a trx's meta shown on a
// page can run nothing), never framed, no referrer (a deep link names a
// player), and revalidated at each load, so that a new binary's pages
// are seen at once.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "+
			"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

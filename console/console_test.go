package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandlerRoutes: a deep link is the page, a file is itself, /v1/ is
// the API's, / leads to the console, and every answer keeps the page to
// itself (its Content-Security-Policy).
func TestHandlerRoutes(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("api " + r.URL.Path)) })
	h := Handler(api)
	cases := []struct{ path, want string }{
		{"/console/", "<title>coffer console</title>"},
		{"/console/ns/1/players/42", "<title>coffer console</title>"},
		{"/console/revenue", "<title>coffer console</title>"},
		{"/console/app.js", `"use strict";`},
		{"/console/app.css", "--accent"},
		{"/v1/client", "api /v1/client"},
	}
	for _, c := range cases {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: %d %.80q, want %q", c.path, w.Code, w.Body.String(), c.want)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", c.path, csp)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusFound || w.Header().Get("Location") != "/console/" {
		t.Errorf("/: %d to %q", w.Code, w.Header().Get("Location"))
	}
}

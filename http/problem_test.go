package http

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/http/httpstatus"
)

// TestProblemForEveryCode: every code has its status, the body carries the
// code, a 503 says when to retry, and an internal error shows no detail.
func TestProblemForEveryCode(t *testing.T) {
	s := &Server{}
	for _, code := range coffer.Codes {
		w := httptest.NewRecorder()
		status := s.problem(w, nil, "rid", fmt.Errorf("wrapped: %w", coffer.Errorf(code, "secret detail")))
		var p Problem
		want, ok := httpstatus.Of(code)
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || !ok || status != want ||
			p.Code != code || p.Status != status || p.RequestID != "rid" || w.Code != status {
			t.Errorf("%s: HTTP %d %s (%v)", code, w.Code, w.Body, err)
		}
		if (code == coffer.CodeInternal) == (p.Detail == "secret detail") {
			t.Errorf("%s: detail %q", code, p.Detail)
		}
		if (status == 503) != (w.Header().Get("Retry-After") != "") {
			t.Errorf("%s: Retry-After %q", code, w.Header().Get("Retry-After"))
		}
	}
	w := httptest.NewRecorder()
	if s.problem(w, nil, "", fmt.Errorf("a bare error")) != 500 {
		t.Error("an error without a code is not internal")
	}
}

// TestPanicIsInternal: a handler that panics answers internal with the
// stack for the log, instead of taking the connection (or, off net/http's
// own recovery, the process) down.
func TestPanicIsInternal(t *testing.T) {
	_, _, err := serve(func(*http.Request, *coffer.Client) (int, any, error) { panic("boom") }, nil, nil)
	if coffer.ErrorCode(err) != coffer.CodeInternal || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "goroutine") {
		t.Fatalf("%v", err)
	}
}

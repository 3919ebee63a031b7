package http

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

// TestMethodNotAllowed: on every path of the OpenAPI document, over HTTP,
// a method the path lacks answers 405 with the path's methods in Allow
// (HEAD with GET, which net/http serves alike), as problem+json with the
// code method_not_allowed; a path the API lacks is still not_found. It
// is answered before the API key is read: the method is wrong whoever
// asks.
func TestMethodNotAllowed(t *testing.T) {
	s := &Server{Logger: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	var doc struct{ Paths map[string]map[string]any }
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[a-z_]+\}`)
	for path, ops := range doc.Paths {
		var declared []string
		for m := range ops {
			declared = append(declared, strings.ToUpper(m))
		}
		if slices.Contains(declared, http.MethodGet) {
			declared = append(declared, http.MethodHead)
		}
		url := srv.URL + param.ReplaceAllString(path, "1")
		for _, m := range methods {
			if slices.Contains(declared, m) || m == http.MethodConnect {
				continue
			}
			status, allow, body := send(t, m, url)
			coded := m == http.MethodHead || strings.Contains(body, `"code":"`+string(coffer.CodeMethodNotAllowed)+`"`) // HEAD has no body
			if status != http.StatusMethodNotAllowed || !coded {
				t.Errorf("%s %s: HTTP %d %s, want 405 method_not_allowed", m, path, status, body)
				continue
			}
			got := strings.Split(allow, ", ")
			if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(declared))) {
				t.Errorf("%s %s: Allow %q, the path serves %v", m, path, allow, declared)
			}
		}
	}
	if status, _, body := send(t, http.MethodGet, srv.URL+"/v1/nothing"); status != http.StatusNotFound || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("GET /v1/nothing: HTTP %d %s", status, body)
	}
}

func send(t *testing.T, method, url string) (status int, allow, body string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s %s: content type %q", method, url, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, resp.Header.Get("Allow"), string(raw)
}

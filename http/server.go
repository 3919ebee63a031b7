// Package http serves the coffer API as HTTP/JSON: the routes of the
// contract (api.Routes), problem+json errors, the probes and
// /openapi.json. Transport only: every call goes to a coffer.Ledger.
// Metrics and profiling are served on the operations listener, not here.
package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
	"github.com/cofferhq/coffer/metrics"
	"github.com/cofferhq/coffer/shed"
	"github.com/cofferhq/coffer/telemetry"
)

// Server is the HTTP transport. Its fields are set once, before Handler.
type Server struct {
	Ledger  coffer.Ledger
	Clients *coffer.Clients
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Tracing traces each call, its parent the caller's traceparent
	// header; nil is tracing off.
	Tracing *telemetry.Tracing
	// BodyBytesMax bounds a request body; a larger one is
	// payload_too_large.
	BodyBytesMax int64
	// BatchBodyBytesMax bounds the body of a batch instead.
	BatchBodyBytesMax int64
	// Gate bounds the calls served at once (shared with the gRPC
	// transport); a call beyond it is overloaded at once. The probes and
	// /openapi.json do not count.
	Gate *shed.Gate
	// Bytes bounds the bytes of request bodies held at once (shared with
	// the gRPC transport), counted as they arrive; a body beyond it is
	// overloaded.
	Bytes *shed.Budget
	// WriteTimeout bounds the sending of a call's answer once it is
	// ready: a client that stops reading is cut off then, instead of
	// holding its call, and the call's slot in Gate, for ever.
	WriteTimeout time.Duration
	// Status is the operators' view, for GET /v1/status.
	Status func(context.Context) coffer.Status
	// Ready tells whether the instance should get traffic (GET /readyz).
	Ready func() bool
}

// handler serves one rpc for an authenticated, authorized client. It
// returns the HTTP status and the body of a success.
type handler func(r *http.Request, c *coffer.Client) (int, any, error)

// Handler routes every path. It panics if an rpc of the contract has no
// handler here, so a new rpc cannot ship half-done.
func (s *Server) Handler() http.Handler {
	handlers := map[string]handler{
		"GetBalances": s.getBalances,
		"Change":      s.change,
		"BatchChange": s.batchChange,
		"Commit":      s.commit,
		"Rollback":    s.rollback,
		"GetTrx":      s.getTrx,
		"Exchange":    s.exchange,
		"Refund":      s.refund,
		"Finlog":      s.finlog,
		"Revenue":     s.revenue,
		"GetStatus":   s.getStatus,
		"GetOrder":    s.getOrder,
		"GetClient":   s.getClient,
	}
	mux := http.NewServeMux()
	for _, rt := range api.Routes() {
		h := handlers[rt.RPC]
		if h == nil {
			panic("http: no handler for rpc " + rt.RPC)
		}
		mux.Handle(rt.Method+" "+rt.Path, s.call(rt, h))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			writeText(w, http.StatusServiceUnavailable, "not ready\n")
			return
		}
		writeText(w, http.StatusOK, "ready\n")
	})
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(api.OpenAPI)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		id := requestID(w, r)
		if allow := allowed(mux, r); allow != nil {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.problem(w, r, id, coffer.Errorf(coffer.CodeMethodNotAllowed, "%s %s: the path serves %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		s.problem(w, r, id, coffer.Errorf(coffer.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// methods are those allowed can find on a path: HTTP's (RFC 9110 §9), and
// PATCH (RFC 5789).
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace}

// allowed lists the methods mux serves on r's path, asking mux itself for
// each (a GET route serves HEAD too), or nil when it serves none there
// and the path is not found. The catch-all, which answers this, does not
// count.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	probe := *r
	for _, m := range methods {
		probe.Method = m
		if _, pattern := mux.Handler(&probe); pattern != "/" {
			out = append(out, m)
		}
	}
	return out
}

// call wraps an rpc's handler: request id, its span, metrics, a slot in Gate,
// authentication and authorization (before any database work), the
// route's query parameters, its body's bytes in Bytes, the response and
// one log line. The slot is held until the answer is sent, so a client
// that reads slowly counts, for at most WriteTimeout.
func (s *Server) call(rt api.Route, h handler) http.Handler {
	traced := s.Tracing.HTTPRoute(rt.Method, rt.Path, rt.RPC)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := requestID(w, r)
		ctx, span := traced.Start(r.Context(), r.Header)
		done := s.Metrics.Begin(rt.RPC)
		var client *coffer.Client
		status, body := 0, any(nil)
		err := s.Gate.Enter()
		if err == nil {
			defer s.Gate.Leave()
			var q url.Values
			if client, err = s.authorize(r, rt); err == nil {
				q, err = checkQuery(r, rt.Query)
			}
			if err == nil {
				held := &heldBody{ReadCloser: r.Body, budget: s.Bytes}
				defer held.release()
				r.Body = held
				status, body, err = serve(h, r.WithContext(context.WithValue(ctx, callKey{}, &callInfo{id, q})), client)
			}
		}
		done(err)
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.WriteTimeout))
		if err != nil {
			status = s.problem(w, r, id, err)
		} else {
			writeJSON(w, status, body)
		}
		s.log(r, rt, id, client, status, err, time.Since(start))
		span.EndHTTP(status, err)
	})
}

// serve runs h. A panic becomes an internal error carrying the stack,
// logged once under the request id: one request that trips a bug gets a
// 500, and the instance goes on serving the others.
func serve(h handler, r *http.Request, c *coffer.Client) (status int, body any, err error) {
	defer func() {
		if p := recover(); p != nil {
			status, body, err = 0, nil, fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h(r, c)
}

func (s *Server) authorize(r *http.Request, rt api.Route) (*coffer.Client, error) {
	key, err := api.APIKey(r.Header.Values("Authorization"))
	if err != nil {
		return nil, err
	}
	c, err := s.Clients.Authenticate(key)
	if err != nil {
		return nil, err
	}
	if !rt.Namespaced {
		return c, c.AllowPermission(rt.Permissions...)
	}
	ns, err := pathNamespace(r)
	if err != nil {
		return c, err
	}
	return c, c.Allow(ns, rt.Permissions...)
}

func (s *Server) log(r *http.Request, rt api.Route, id string, c *coffer.Client, status int, err error, d time.Duration) {
	// Server-side failures are errors; refusals, debug like successes
	// (coffer.Code.ServerFailure).
	level := slog.LevelDebug
	if coffer.ErrorCode(err).ServerFailure() {
		level = slog.LevelError
	}
	if !s.Logger.Enabled(r.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", id), slog.String("transport", "http"), slog.String("call", rt.RPC),
		slog.String("path", r.URL.Path), slog.Int("status", status), slog.Float64("duration_ms", float64(d.Microseconds())/1000),
	}
	if c != nil {
		attrs = append(attrs, slog.String("client", c.Name))
	}
	if err != nil {
		attrs = append(attrs, slog.String("code", string(coffer.ErrorCode(err))), slog.String("error", err.Error()))
	}
	s.Logger.LogAttrs(r.Context(), level, "request", attrs...)
}

// callKey holds a handler's callInfo in its context.
type callKey struct{}

// callInfo is what call learnt of a request before its handler ran: its
// id and its query parameters, parsed and checked once.
type callInfo struct {
	id    string
	query url.Values
}

func callOf(r *http.Request) *callInfo { return r.Context().Value(callKey{}).(*callInfo) }

// requestID takes the caller's X-Request-Id if it is sane, or makes one
// (api.RequestID), and echoes it in the response.
func requestID(w http.ResponseWriter, r *http.Request) string {
	id := api.RequestID(r.Header.Get("X-Request-Id"))
	w.Header().Set("X-Request-Id", id)
	return id
}

// writeJSON writes body as JSON. It does not escape <, > and & as
// encoding/json does by default (for HTML, which this is not): a trx's meta
// is served in its canonical form (RFC 8785), exactly as stored.
func writeJSON(w http.ResponseWriter, status int, body any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	raw := []byte(`{"code":"internal"}` + "\n")
	if err := enc.Encode(body); err != nil {
		status = http.StatusInternalServerError
	} else {
		raw = buf.Bytes()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

func writeText(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

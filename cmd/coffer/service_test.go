package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/wallet"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// The keys of the test clients: dev has read, write, admin and ops on 1
// and 2 (as in coffer dev); reader only read on 1; game2 read and write on
// 1, with its own emitter; auditor read and admin on 1; monitor only ops,
// in no namespace.
const (
	devKey     = "test-dev-key"
	readerKey  = "test-reader-key"
	game2Key   = "test-game2-key"
	auditorKey = "test-auditor-key"
	monitorKey = "test-monitor-key"
)

// service is a running coffer (Main) on two shard databases, with clients
// for both transports. Its cleanup drains it and runs the audit.
type service struct {
	t    *testing.T
	main *Main
	base string
	dev  *wallet.Conn
	grpc cofferv1.WalletClient
	// conn is grpc's connection, for calls with raw messages (invokeRaw).
	conn   *grpc.ClientConn
	m      *shard.Map
	oa     routers.Router
	closed bool
	// logs is what the service logged, JSON lines.
	logs *lockedBuffer
}

// lockedBuffer is a bytes.Buffer the service's goroutines may write to
// while a test reads it.
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

var ctx = context.Background()

func keyHash(key string) string {
	h := coffer.HashKey(key)
	return hex.EncodeToString(h[:])
}

// startMain starts coffer serve's Main on cfg and m, its JSON log in the
// buffer it returns; the caller shuts it down.
func startMain(t *testing.T, cfg *Config, m *shard.Map) (*Main, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	main := &Main{Config: cfg, Map: m, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if err := main.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return main, logs
}

// startService migrates one database on each server and starts coffer on
// them; tweak may change the config first.
func startService(t *testing.T, servers []*pgserver.Server, tweak func(*Config)) *service {
	t.Helper()
	cfg := devConfig("127.0.0.1:0", "127.0.0.1:0", devKey)
	cfg.ShardCount, cfg.DistributionMode, cfg.ShardOnDB = 8, "auto", 8/len(servers)
	cfg.Listen.Ops = "127.0.0.1:0"
	cfg.Sweep.Interval = 200 * time.Millisecond
	cfg.Timeouts.Shutdown = 10 * time.Second
	cfg.Clients = append(cfg.Clients,
		ClientConfig{Name: "reader", Emitter: 2, KeySHA256: []string{keyHash(readerKey)}, Namespaces: []int32{1}, Permissions: []string{"read"}},
		ClientConfig{Name: "game2", Emitter: 3, KeySHA256: []string{keyHash(game2Key)}, Namespaces: []int32{1}, Permissions: []string{"read", "write"}},
		ClientConfig{Name: "auditor", Emitter: 4, KeySHA256: []string{keyHash(auditorKey)}, Namespaces: []int32{1}, Permissions: []string{"read", "admin"}},
		ClientConfig{Name: "monitor", Emitter: 5, KeySHA256: []string{keyHash(monitorKey)}, Permissions: []string{"ops"}})
	for _, s := range servers {
		d := pgtest.NewDBOn(t, s)
		cfg.Databases = append(cfg.Databases, shard.DatabaseConfig{Name: d.Name, Host: "127.0.0.1", Port: s.Port(),
			Type: "postgres", User: pgserver.Superuser, Password: pgserver.Password})
	}
	if tweak != nil {
		tweak(cfg)
	}
	m, err := shard.NewMap(cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := migrate.SchemaEngine(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Apply(ctx, migrate.Options{TargetVersion: -1}); err != nil {
		t.Fatal(err)
	}
	main, logs := startMain(t, cfg, m)
	conn, err := grpc.NewClient(main.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	oa, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, main: main, base: "http://" + main.HTTPAddr, dev: wallet.New("http://"+main.HTTPAddr, devKey, nil),
		grpc: cofferv1.NewWalletClient(conn), conn: conn, m: m, oa: oa, logs: logs}
	t.Cleanup(func() {
		conn.Close()
		s.stop()
		if !t.Failed() {
			s.auditClean()
		}
	})
	return s
}

func (s *service) stop() {
	if s.closed {
		return
	}
	s.closed = true
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := s.main.Shutdown(sctx); err != nil {
		s.t.Errorf("shutdown: %v", err)
	}
}

func (s *service) auditClean() {
	router, err := shard.Open(s.m, shard.DefaultPoolConfig())
	if err != nil {
		s.t.Fatal(err)
	}
	defer router.Close()
	r, err := (&audit.Checker{Router: router}).Check(ctx)
	if err != nil {
		s.t.Fatalf("audit: %v", err)
	}
	if len(r.Violations) > 0 {
		s.t.Fatalf("audit: %+v", r.Violations)
	}
}

// response is one raw HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return string(r.body) }

// call sends one raw request and checks the answer against the OpenAPI
// document: status, content type and body schema.
func (s *service) call(method, path, key, body string) response {
	s.t.Helper()
	if key != "" {
		key = "Bearer " + key
	}
	return s.callAuth(method, path, key, body)
}

// callAuth is call with the whole Authorization header (none if empty).
func (s *service) callAuth(method, path, authorization, body string) response {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, body: raw}
	s.checkSchema(req, r)
	return r
}

func (s *service) checkSchema(req *http.Request, r response) {
	s.t.Helper()
	route, params, err := s.oa.FindRoute(req)
	if err != nil {
		if r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
			s.t.Fatalf("%s %s: no route in the OpenAPI document, yet HTTP %d", req.Method, req.URL.Path, r.status)
		}
		return
	}
	reqIn := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	// A batch answered 200 may have refused changes, each with its
	// error: the document describes valid changes only.
	refusedChange := bytes.Contains(r.body, []byte(`"error":{`))
	if r.status < 400 && !refusedChange {
		// What the server accepted, the document must allow.
		if req.GetBody != nil {
			req.Body, _ = req.GetBody()
		}
		if err := openapi3filter.ValidateRequest(ctx, reqIn); err != nil {
			s.t.Fatalf("%s %s was accepted but does not match the OpenAPI document: %v", req.Method, req.URL, err)
		}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqIn,
		Status:                 r.status, Header: r.header, Body: io.NopCloser(bytes.NewReader(r.body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		s.t.Fatalf("%s %s: HTTP %d %s does not match the OpenAPI document: %v", req.Method, req.URL.Path, r.status, r.body, err)
	}
}

// opsGet reads path from the operations listener.
func (s *service) opsGet(path string) response {
	s.t.Helper()
	resp, err := http.Get("http://" + s.main.OpsAddr + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// metrics is the instance's /metrics text.
func (s *service) metrics() string {
	s.t.Helper()
	r := s.opsGet("/metrics")
	if r.status != http.StatusOK {
		s.t.Fatalf("/metrics: HTTP %d", r.status)
	}
	return string(r.body)
}

// grpcCtx carries key as the gRPC authorization.
func grpcCtx(key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

func wantStatus(t *testing.T, r response, status int, code coffer.Code) {
	t.Helper()
	if r.status != status {
		t.Fatalf("HTTP %d, want %d: %s", r.status, status, r.body)
	}
	if code != "" && !strings.Contains(string(r.body), `"code":"`+string(code)+`"`) {
		t.Fatalf("want code %s: %s", code, r.body)
	}
	if code != "" && r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("content type %q", r.header.Get("Content-Type"))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// invokeRaw calls gRPC method (its full name) with msg as its message's
// bytes, under key, and returns the answer's bytes: a message no
// generated client would send (malformed, with fields the contract does
// not have).
func (s *service) invokeRaw(key, method string, msg []byte) ([]byte, error) {
	var out []byte
	err := s.conn.Invoke(grpcCtx(key), method, msg, &out, grpc.ForceCodec(rawCodec{}))
	return out, err
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/console"
	coffergrpc "github.com/cofferhq/coffer/grpc"
	cofferhttp "github.com/cofferhq/coffer/http"
	"github.com/cofferhq/coffer/metrics"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shed"
	"github.com/cofferhq/coffer/telemetry"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
)

// probeInterval paces the checks of every shard database.
const probeInterval = 2 * time.Second

// movesInterval paces the reads of the shards' moves (one query per
// database): an instance routes a shard to its new home within about
// this long of its move, or at once when one of its writes meets the
// old copy's fence.
const movesInterval = time.Second

// Main is the service: what `coffer serve` and `coffer dev` run, and what
// the end-to-end tests boot on port 0. Set Config, Map and Logger, then
// Start; Shutdown drains it.
type Main struct {
	Config *Config
	Map    *shard.Map
	Logger *slog.Logger
	// Tracing traces the calls as the config asks (telemetry.otlp_endpoint),
	// set by Start; nil is tracing off. Shutdown shuts it down.
	Tracing *telemetry.Tracing
	// HTTPAddr, GRPCAddr, OpsAddr and ConsoleAddr are the bound
	// addresses, set by Start.
	HTTPAddr, GRPCAddr, OpsAddr, ConsoleAddr string

	router     *shard.Router
	store      *postgres.Store
	engine     *migrate.Engine
	metrics    *metrics.Metrics
	httpServer *http.Server
	opsServer  *http.Server
	// consoleServer serves the support console and, on its origin, the
	// same API handler as httpServer.
	consoleServer *http.Server
	grpcServer    *grpc.Server
	ready         atomic.Bool
	started       time.Time
	stopBG        context.CancelFunc
	bg            sync.WaitGroup
}

// Start checks the config, verifies every reachable database's schema
// (an incompatible one is an error; an unreachable one is checked again in
// the background and gets no requests until then), starts listening and
// serving, and starts the probes and the sweepers.
func (m *Main) Start(ctx context.Context) error {
	catalog, clients, err := m.Config.service()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	m.started = time.Now().UTC()
	pool := m.Config.Pool
	if m.Config.Telemetry.OTLPEndpoint != "" {
		if m.Tracing, err = telemetry.OTLP(ctx, m.Config.Telemetry.OTLPEndpoint, m.Config.Telemetry.SampleRatio, version()); err != nil {
			return fmt.Errorf("config: telemetry.otlp_endpoint: %w", err)
		}
	}
	if m.Tracing != nil {
		pool.Tracer = postgres.RoundTrips{}
		// The exporter's failures (a collector down) are OpenTelemetry's
		// to report, process-wide: into the log, not stderr's plain text.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { m.Logger.Warn("tracing", "error", err.Error()) }))
	}
	if m.router, err = shard.Open(m.Map, pool); err != nil {
		return err
	}
	if m.Config.RequireSynchronousStandby {
		m.router.RequireSynchronousStandby()
	}
	if err := m.router.Refresh(ctx); err != nil {
		m.Logger.Warn("shard moves not read", "error", err.Error())
	}
	if m.engine, err = migrate.SchemaEngine(m.Map, m.Config.Env); err != nil {
		return err
	}
	m.engine.ConnectTimeout = m.Config.Pool.ConnectTimeout
	m.metrics = metrics.New(m.router)
	for i := range m.Map.Databases() {
		m.router.SetVerified(i, false)
		if err := m.check(ctx, i); err != nil && !errors.Is(err, migrate.ErrUnreachable) {
			m.router.Close()
			return err
		}
	}
	b := m.Config.Batches
	store := postgres.New(m.router, catalog, postgres.Options{Timeout: m.Config.Timeouts.Request, LockTimeout: m.Config.Timeouts.Lock,
		ReportsMax: m.Config.Limits.ReportsInFlightMax, BatchSizeMax: b.SizeMax, Committers: b.Committers, Readers: b.Readers, QueueMax: b.QueueMax,
		Observer: m.metrics})
	m.metrics.WatchQueues(store.Queues)
	m.metrics.WatchBatchPools(store.BatchPools)
	m.store = store
	if err := m.listen(store, clients); err != nil {
		m.router.Close()
		return err
	}
	m.recordAvailability(ctx)
	bgCtx, cancel := context.WithCancel(context.Background())
	m.stopBG = cancel
	m.goBG(func() { every(bgCtx, probeInterval, func() { m.probeAll(bgCtx) }) })
	m.goBG(func() { every(bgCtx, movesInterval, func() { m.readMoves(bgCtx) }) })
	m.goBG(func() { every(bgCtx, m.Config.Sweep.Interval, func() { m.sweep(bgCtx, "holds", store.SweepHolds) }) })
	m.goBG(func() {
		every(bgCtx, m.Config.Sweep.Interval, func() { m.sweep(bgCtx, "lots", store.SweepExpiredLots) })
	})
	m.goBG(func() { every(bgCtx, m.Config.Sweep.Interval, func() { m.sweep(bgCtx, "marks", store.SweepMarks) }) })
	m.ready.Store(true)
	m.Logger.Info("serving", "http", m.HTTPAddr, "grpc", m.GRPCAddr, "ops", m.OpsAddr, "console", m.ConsoleAddr, "shards", m.Map.ShardCount(), "databases", len(m.Map.Databases()))
	return nil
}

// readMoves reads the shards' moves, logs each that changed, and counts
// each move seen cut over, with its pause, in the metrics.
func (m *Main) readMoves(ctx context.Context) {
	was := m.router.Map()
	err := m.router.Refresh(ctx)
	if err != nil {
		m.Logger.Warn("shard moves not read", "error", err.Error())
	}
	now := m.router.Map()
	m.metrics.SetMovesInProgress(len(now.InProgress()))
	if now.SameMoves(was) {
		return
	}
	before := was.Moves()
	for s, mv := range now.Moves() {
		old, seen := before[s]
		if seen && old == mv {
			continue
		}
		m.Logger.Info("shard move", "shard", s, "epoch", mv.Epoch, "source", mv.Source, "target", mv.Target, "state", string(mv.State),
			"pause_ms", mv.Pause.Milliseconds())
		if mv.Pause > 0 && (!seen || old.Epoch != mv.Epoch || old.Pause == 0) {
			m.metrics.Moved(mv.Pause)
		}
	}
}

// listen opens every configured listener, or none if one fails, and
// serves on each: the API over HTTP and gRPC, metrics and profiling on the
// operations listener. One gate bounds the API calls of both transports,
// one budget the bytes of their requests.
func (m *Main) listen(store *postgres.Store, clients *coffer.Clients) error {
	cfg := m.Config
	lns, err := listenAll(map[string]string{"listen.http": cfg.Listen.HTTP, "listen.grpc": cfg.Listen.GRPC, "listen.ops": cfg.Listen.Ops,
		"listen.console": cfg.Listen.Console})
	if err != nil {
		return err
	}
	gate := shed.NewGate("requests in flight", cfg.Limits.RequestsInFlightMax)
	budget := shed.NewBudget("request bytes", cfg.Limits.RequestBytesInFlightMax)
	m.metrics.WatchRequestBytes(budget.Held)
	h := (&cofferhttp.Server{Ledger: store, Clients: clients, Metrics: m.metrics, Logger: m.Logger, Tracing: m.Tracing,
		BodyBytesMax: cfg.Limits.BodyBytesMax, BatchBodyBytesMax: cfg.Limits.BatchBodyBytesMax, Gate: gate, Bytes: budget,
		WriteTimeout: cfg.Timeouts.Write, Status: m.status, Ready: m.ready.Load}).Handler()
	if ln := lns["listen.http"]; ln != nil {
		m.httpServer = m.httpServerOf(h)
		m.HTTPAddr = ln.Addr().String()
		go func() { _ = m.httpServer.Serve(ln) }()
	}
	if ln := lns["listen.console"]; ln != nil {
		m.consoleServer = m.httpServerOf(console.Handler(h))
		m.ConsoleAddr = ln.Addr().String()
		go func() { _ = m.consoleServer.Serve(ln) }()
	}
	if ln := lns["listen.ops"]; ln != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.metrics.Handler())
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		// No write timeout: a CPU profile or a trace answers after the
		// seconds it was asked to record.
		m.opsServer = &http.Server{Handler: mux, ReadHeaderTimeout: cfg.Timeouts.ReadHeader, IdleTimeout: cfg.Timeouts.Idle,
			MaxHeaderBytes: cfg.Limits.HeaderBytesMax}
		m.OpsAddr = ln.Addr().String()
		go func() { _ = m.opsServer.Serve(ln) }()
	}
	if ln := lns["listen.grpc"]; ln != nil {
		g := &coffergrpc.Server{Ledger: store, Clients: clients, Metrics: m.metrics, Logger: m.Logger, Tracing: m.Tracing,
			MessageBytesMax: int(cfg.Limits.BodyBytesMax), BatchMessageBytesMax: int(cfg.Limits.BatchBodyBytesMax), HeaderBytesMax: cfg.Limits.HeaderBytesMax,
			StreamsPerConnMax: cfg.Limits.GRPCStreamsMax, Gate: gate, Bytes: budget,
			HandshakeTimeout: cfg.Timeouts.ReadHeader, IdleTimeout: cfg.Timeouts.Idle, Status: m.status}
		m.grpcServer = g.NewServer()
		m.GRPCAddr = ln.Addr().String()
		go func() { _ = m.grpcServer.Serve(ln) }()
	}
	return nil
}

// httpServerOf serves h with the configured bounds. WriteTimeout bounds
// the answers of the routes without a call (probes, /openapi.json, the
// console's files); a call sets its own deadline when its answer is
// ready, however long the call took.
func (m *Main) httpServerOf(h http.Handler) *http.Server {
	cfg := m.Config
	return &http.Server{Handler: h, ReadHeaderTimeout: cfg.Timeouts.ReadHeader,
		ReadTimeout: cfg.Timeouts.Read, WriteTimeout: cfg.Timeouts.Write, IdleTimeout: cfg.Timeouts.Idle,
		MaxHeaderBytes: cfg.Limits.HeaderBytesMax, ErrorLog: slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn)}
}

// listenAll listens on each non-empty address (keyed by its config key),
// or closes them all and names the key that failed.
func listenAll(addrs map[string]string) (map[string]net.Listener, error) {
	lns := map[string]net.Listener{}
	for key, addr := range addrs {
		if addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		lns[key] = ln
	}
	return lns, nil
}

// Shutdown stops taking requests, drains those in flight until ctx ends,
// then stops the sweepers, closes the pools and sends the spans not sent
// yet (for at most spansFlushMax: spans a collector does not take are
// logged as lost, not a failed drain). HTTP and gRPC drain side
// by side: one after the other, gRPC would take new calls while HTTP
// drained, and be cut off at once if HTTP's drain used the whole time.
func (m *Main) Shutdown(ctx context.Context) error {
	m.ready.Store(false)
	var httpErr, grpcErr, consoleErr error
	var drains sync.WaitGroup
	if m.httpServer != nil {
		drains.Go(func() { httpErr = m.httpServer.Shutdown(ctx) })
	}
	if m.consoleServer != nil {
		drains.Go(func() { consoleErr = m.consoleServer.Shutdown(ctx) })
	}
	if m.grpcServer != nil {
		drains.Go(func() { grpcErr = m.drainGRPC(ctx) })
	}
	drains.Wait()
	if m.opsServer != nil {
		_ = m.opsServer.Close() // a profile in progress is not worth the wait
	}
	m.stopBG()
	m.bg.Wait()
	m.store.Close()
	m.router.Close()
	flush, cancel := context.WithTimeout(ctx, spansFlushMax)
	defer cancel()
	if err := m.Tracing.Shutdown(flush); err != nil {
		m.Logger.Warn("spans not sent at shutdown", "error", err.Error())
	}
	return errors.Join(httpErr, grpcErr, consoleErr)
}

// spansFlushMax bounds the sending of the last spans at shutdown: a
// collector that is down must not hold the drain for all of
// timeouts.shutdown.
const spansFlushMax = 2 * time.Second

// drainGRPC stops gRPC gracefully, or at once when ctx ends first.
func (m *Main) drainGRPC(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() { m.grpcServer.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		m.grpcServer.Stop()
		return fmt.Errorf("grpc: drain cut short: %w", ctx.Err())
	}
}

func (m *Main) goBG(fn func()) {
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		fn()
	}()
}

// check checks database i (shard.Router.Check), logs what changed and
// sets its metrics. It returns the schema check's error.
func (m *Main) check(ctx context.Context, i int) error {
	db := m.Map.Databases()[i]
	cctx, cancel := context.WithTimeout(ctx, time.Second+m.Config.Pool.ConnectTimeout)
	defer cancel()
	// The schema check compares the shards a database records with the
	// map's, moves included.
	m.engine.Map = m.router.Map()
	was, h, err := m.router.Check(cctx, i, func(ctx context.Context) error { return m.engine.Verify(ctx, db) })
	if err != nil && !errors.Is(err, migrate.ErrUnreachable) {
		m.Logger.Error("schema incompatible", "database", db.Name(), "error", err.Error())
	}
	// A database down at the first check is logged too (a wrong password
	// or name keeps it down): the log is where an operator finds why its
	// players get shard_unavailable. An incompatible schema was logged
	// above, and stops the start.
	downAtStart := was.CheckedAt.IsZero() && !h.Up && (err == nil || errors.Is(err, migrate.ErrUnreachable))
	if was.Up != h.Up || downAtStart {
		m.Logger.Warn("database state", "database", db.Name(), "up", h.Up, "error", h.Err)
	}
	m.metrics.SetDatabaseUp(db.Name(), h.Up)
	if m.router.Guarded(i) && h.Primary.Host != "" {
		m.metrics.SetSynchronousStandbys(db.Name(), h.Primary.SynchronousStandbys)
		m.logPrimary(db, was.Primary, h.Primary)
	}
	return err
}

// logPrimary logs a change of database db's primary, or of whether it has
// a synchronous standby in sync.
func (m *Main) logPrimary(db shard.Database, was, now shard.Primary) {
	if was.Host == now.Host && was.Synchronous() == now.Synchronous() {
		return
	}
	attrs := []any{"database", db.Name(), "primary", now.Host, "synchronous_standbys", now.SynchronousStandbys,
		"synchronous_commit", now.SynchronousCommit}
	if now.Synchronous() {
		m.Logger.Info("database primary", attrs...)
		return
	}
	m.Logger.Warn("database primary without a synchronous standby in sync: an acknowledged write could be lost at the next failover",
		append(attrs, "writes_refused", m.Config.RequireSynchronousStandby)...)
}

// every runs fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// probeAll checks every database and records how many shards are served.
func (m *Main) probeAll(ctx context.Context) {
	for i := range m.Map.Databases() {
		_ = m.check(ctx, i)
	}
	m.recordAvailability(ctx)
}

func (m *Main) recordAvailability(ctx context.Context) {
	m.metrics.SetShardsAvailable(int(m.status(ctx).ShardsAvailable))
}

// sweep runs one pass of a sweeper. Every instance runs them; the sweepers
// are safe to run concurrently. A pass that panics is a failed pass: every
// instance sweeps the same data, so a bug that one row trips would
// otherwise take every instance down, again at each restart.
func (m *Main) sweep(ctx context.Context, name string, sweep func(context.Context, int) (int, error)) {
	n, err := func() (n int, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		return sweep(ctx, m.Config.Sweep.BatchMax)
	}()
	if ctx.Err() != nil {
		return
	}
	m.metrics.Swept(name, n, err)
	if err != nil {
		m.Logger.Warn("sweeper pass failed", "sweeper", name, "swept", n, "error", err.Error())
	} else if n > 0 {
		m.Logger.Info("sweeper pass", "sweeper", name, "swept", n)
	}
}

// status is the operators' view (GET /v1/status).
func (m *Main) status(context.Context) coffer.Status {
	placed := m.router.Map()
	st := coffer.Status{Version: version(), StartedAt: m.started, ShardCount: int32(placed.ShardCount()), Databases: []coffer.DatabaseStatus{},
		Moves: shardMoves(placed)}
	for i, db := range placed.Databases() {
		h := m.router.Health(i)
		ps, bs := m.router.Database(i).Stat(), m.store.BatchPoolStat(i)
		ds := coffer.DatabaseStatus{Name: db.Name(), Shards: shardRanges(db.Shards), Up: h.Up, SchemaVerified: h.Verified, Error: h.Err,
			ConnsTotal: ps.TotalConns(), ConnsAcquired: ps.AcquiredConns(), ConnsMax: ps.MaxConns(),
			BatchConnsTotal: bs.TotalConns(), BatchConnsAcquired: bs.AcquiredConns(), BatchConnsMax: bs.MaxConns()}
		if !h.CheckedAt.IsZero() {
			t := h.CheckedAt
			ds.CheckedAt = &t
		}
		if m.router.Guarded(i) && h.Primary.Host != "" {
			n := int32(h.Primary.SynchronousStandbys)
			ds.Primary, ds.SynchronousStandbys = h.Primary.Host, &n
			ds.WritesRefused = m.router.Writable(i) != nil && m.router.Available(i) == nil
		}
		if h.Up {
			st.ShardsAvailable += int32(len(db.Shards))
		}
		st.Databases = append(st.Databases, ds)
	}
	return st
}

// shardMoves are the moves in progress, and those whose new home the
// config does not list, for the status.
func shardMoves(m *shard.Map) []coffer.ShardMove {
	out := []coffer.ShardMove{}
	for s, mv := range m.Moves() {
		if mv.State.InProgress() || m.DatabaseIndex(s) < 0 {
			out = append(out, coffer.ShardMove{Shard: int32(s), Epoch: mv.Epoch, Source: mv.Source, Target: mv.Target, State: string(mv.State)})
		}
	}
	slices.SortFunc(out, func(a, b coffer.ShardMove) int { return int(a.Shard - b.Shard) })
	return out
}

func shardRanges(ids []coffer.ShardID) []coffer.ShardRange {
	var out []coffer.ShardRange
	for _, id := range ids {
		if n := len(out); n > 0 && out[n-1].Max+1 == int32(id) {
			out[n-1].Max = int32(id)
			continue
		}
		out = append(out, coffer.ShardRange{Min: int32(id), Max: int32(id)})
	}
	return out
}

// version is the module version or VCS revision the binary was built from.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	return info.Main.Version
}

// newLogger is the JSON log on w at the configured level.
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// runServe is `coffer serve -c FILE`: the service until SIGINT or SIGTERM,
// then a graceful drain.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("c", "coffer.yaml", "config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, m, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, "coffer serve:", err)
		return 1
	}
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	svc := &Main{Config: cfg, Map: m, Logger: newLogger(stdout, cfg.Log.Level)}
	if err := svc.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "coffer serve:", err)
		return 1
	}
	<-ctx.Done()
	return shutdown(svc, stderr)
}

// gcPercent is the Go collector's target for a serving process. Its live
// heap is small (about 10 MB) and churns with every request: collecting at
// 5× the live heap instead of Go's 2× cut coffer's CPU per write by about a
// tenth in `coffer bench`, for about 20 MB more resident memory.
const gcPercent = 400

// tuneGC sets gcPercent unless the operator set GOGC.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// shutdown drains svc within the configured time.
func shutdown(svc *Main, stderr io.Writer) int {
	svc.Logger.Info("shutting down", "drain", svc.Config.Timeouts.Shutdown.String())
	ctx, cancel := context.WithTimeout(context.Background(), svc.Config.Timeouts.Shutdown)
	defer cancel()
	if err := svc.Shutdown(ctx); err != nil {
		fmt.Fprintln(stderr, "coffer:", err)
		return 1
	}
	svc.Logger.Info("stopped")
	return 0
}

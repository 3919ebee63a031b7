package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/bench"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/telemetry"
)

// benchFlags are the flags of `coffer bench`.
type benchFlags struct {
	bench.Options
	self                        bool
	target, apiKey, configPath  string
	baseline                    string
	feed                        bool
	jsonPath, reportDir         string
	decay                       int64
	keep, stockPostgres, trace  bool
	pgSet                       map[string]string
	pprof                       string
	shards, committers, readers int
	// pgCPUs and pgCPUQuota confine the --self stack's PostgreSQL
	// servers; cpus are the CPUs the bench may use (found by check).
	pgCPUs     int
	pgCPUQuota float64
	cpus       []int
	// servers are the stacks of --databases, by server count.
	servers []int
}

// tunedPostgres are the settings docs/operations.md recommends for a ledger
// server: checkpoints far apart (each one makes the next change of every
// page write the whole page to the WAL), compressed full pages, and a
// buffer cache of a quarter of this machine's memory (shared by servers
// running on it), which holds the indexes a write touches.
func tunedPostgres(servers int) map[string]string {
	return map[string]string{
		"shared_buffers":     quarterOfMemory(servers),
		"max_wal_size":       "16GB",
		"checkpoint_timeout": "30min",
		"wal_compression":    "lz4",
	}
}

// quarterOfMemory is 25 % of the machine's RAM, shared by servers, as a
// PostgreSQL size; 1GB if the kernel does not say.
func quarterOfMemory(servers int) string {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return "1GB"
	}
	return strconv.FormatUint(si.Totalram*uint64(si.Unit)/4/uint64(servers)>>20, 10) + "MB"
}

func parseBenchFlags(args []string, stderr io.Writer) (*benchFlags, error) {
	f := &benchFlags{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workload := fs.String("workload", "write", "write, spend, read, mix, hold, exchange or batch")
	fs.IntVar(&f.BatchSize, "batch-size", 100, "batch: grants per call of the batch API (1–1000)")
	fs.IntVar(&f.Clients, "clients", 32, "concurrent clients (closed loop), or the workers of an open loop")
	fs.DurationVar(&f.Duration, "duration", 30*time.Second, "length of each run (after its warmup)")
	fs.DurationVar(&f.Warmup, "warmup", 5*time.Second, "unmeasured start of each run: connections open, caches fill")
	fs.Float64Var(&f.Rate, "rate", 0, "open loop: start this many ops per second whatever the latency")
	fs.DurationVar(&f.Progress, "progress", 5*time.Second, "print a progress line this often")
	fs.IntVar(&f.Rounds, "rounds", 3, "rounds; with --baseline each is a coffer run then a baseline run")
	fs.Float64Var(&f.Scale, "scale", 1, "players: 100000 × scale")
	seed := fs.Uint64("seed", 1, "seed of the workload")
	fs.StringVar(&f.Transport, "transport", "http", "http or grpc")
	fs.BoolVar(&f.self, "self", false, "start a local stack (PostgreSQL with fsync, coffer serve) in a temp dir, remove it after")
	fs.BoolVar(&f.keep, "keep", false, "with --self: keep the temp dir")
	fs.BoolVar(&f.stockPostgres, "stock-postgres", false, "with --self: PostgreSQL's stock settings instead of the recommended ones")
	f.pgSet = map[string]string{}
	fs.Func("pg-set", "with --self: a PostgreSQL setting over the others, as name=value (repeatable), e.g. shared_buffers=6GB", func(kv string) error {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return fmt.Errorf("%q is not name=value", kv)
		}
		f.pgSet[k] = v
		return nil
	})
	fs.BoolVar(&f.Statements, "statements", false, "list what each side asks of PostgreSQL, from pg_stat_statements (--self loads it; a --target's servers must)")
	fs.IntVar(&f.shards, "shards", 16, "with --self: shard tables over its two databases (shard_count), even")
	fs.IntVar(&f.committers, "committers", DefaultConfig().Batches.Committers, "with --self: batches of writes in flight per database (batches.committers)")
	fs.IntVar(&f.readers, "readers", DefaultConfig().Batches.Readers, "with --self: batches of balance reads in flight per database (batches.readers)")
	fs.BoolVar(&f.trace, "trace", false, "with --self: coffer serve traces every call (telemetry.otlp_endpoint) to an OTLP receiver in the bench, which counts the spans")
	fs.StringVar(&f.pprof, "pprof", "", "with --self: coffer serve serves /debug/pprof/ (and /metrics) on this address, for profiling")
	fs.IntVar(&f.pgCPUs, "pg-cpus", 0, "with --self: confine every PostgreSQL server to this many CPUs (the last ones), the bench and coffer serve to the rest (cgroup v1 cpuset, as root)")
	fs.Float64Var(&f.pgCPUQuota, "pg-cpu-quota", 0, "with --self: each PostgreSQL server's CPU budget in cores, e.g. 0.2 (a CFS quota, cgroup v1, as root)")
	fs.Func("databases", "with --self: run the bench on a stack of each of these numbers of PostgreSQL servers (one database each, the shards spread over them), e.g. 1,2,4, and compare their throughput", func(list string) (err error) {
		f.servers, err = parseServers(list)
		return err
	})
	fs.Func("move", "with --self: shards to move under load, e.g. 3 or 3,11: in each of coffer's runs, once half of --duration has passed, each to the next database of the stack and back (coffer shard move's code), one after the other; the run lasts until they are done, and the report gives each move's pause and what the other shards' ops saw", func(list string) (err error) {
		f.Moves, err = parseMoves(list)
		return err
	})
	fs.StringVar(&f.target, "target", "", "a running coffer: http://host:port (http) or host:port (grpc)")
	fs.StringVar(&f.apiKey, "api-key", "", "with --target: the API key (needs write and read on namespaces 1–10)")
	fs.StringVar(&f.configPath, "c", "", "with --target: its config, for database figures and the baseline")
	fs.StringVar(&f.baseline, "baseline", "", "sql: alternate with the same operations as plain SQL (write, read, mix; batch against write); pgbench: with PostgreSQL's pgbench running them as a script (write; batch against write)")
	fs.BoolVar(&f.feed, "feed", false, "with --self: run the change feed (nats-server, coffer feed) beside coffer, against the same coffer with the feed off as the baseline, and report the feed's lag")
	fs.StringVar(&f.jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&f.reportDir, "report", "", "write report.md and PNG charts into this directory")
	fs.Int64Var(&f.Preload, "preload", 0, "grant this many times first (not measured), so that reads find balances")
	fs.Int64Var(&f.decay, "decay", 0, "run this many ops (one round) and compare the first and last tenth")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	f.Workload, f.Seed = bench.Workload(*workload), *seed
	if f.decay > 0 {
		f.Ops, f.Rounds = f.decay, 1
	}
	if err := f.check(given); err != nil {
		return nil, err
	}
	return f, nil
}

// check refuses flags that do not go together or are out of range (given
// are the flags set on the command line), before anything runs.
func (f *benchFlags) check(given map[string]bool) error {
	// The --self stack's config, with its committers: a bench of a stack
	// whose batches crowd its pool would measure the warning, not coffer.
	stack := benchConfig("")
	stack.Batches.Committers, stack.Batches.Readers = f.committers, f.readers
	switch {
	case f.self == (f.target != ""):
		return errors.New("give --self or --target")
	case f.target != "" && f.apiKey == "":
		return errors.New("--target needs --api-key")
	case f.Transport != "http" && f.Transport != "grpc":
		return errors.New("--transport must be http or grpc")
	case f.baseline != "" && f.baseline != "sql" && f.baseline != "pgbench":
		return errors.New("--baseline must be sql or pgbench")
	case f.feed && (!f.self || f.baseline != "" || len(f.servers) > 0 || f.pgSet["wal_level"] != "" && f.pgSet["wal_level"] != "logical"):
		return errFeedFlags
	case f.baseline == "pgbench" && f.Workload != bench.Write && f.Workload != bench.Batch:
		return fmt.Errorf("--baseline pgbench covers write and batch, not %s", f.Workload)
	case f.baseline == "pgbench" && (f.Rate > 0 || f.decay > 0):
		return errors.New("--baseline pgbench runs a closed loop for --duration: not with --rate or --decay")
	case f.baseline == "sql" && f.Workload != bench.Write && f.Workload != bench.Read && f.Workload != bench.Mix && f.Workload != bench.Batch:
		return fmt.Errorf("--baseline sql covers write, read, mix and batch, not %s", f.Workload)
	case f.Workload == bench.Batch && (f.decay > 0 || f.Rate > 0):
		return errors.New("--decay and --rate count calls, not grants: not with --workload batch")
	case f.baseline != "" && f.target != "" && f.configPath == "":
		return fmt.Errorf("--baseline %s with --target needs -c (the databases)", f.baseline)
	case len(f.pgSet) > 0 && !f.self:
		return errors.New("--pg-set needs --self")
	case given["shards"] && !f.self:
		return errors.New("--shards needs --self")
	case (given["committers"] || given["readers"]) && !f.self:
		return errors.New("--committers and --readers need --self")
	case f.trace && !f.self:
		return errors.New("--trace needs --self")
	case f.committers < 1 || f.readers < 1:
		return errors.New("--committers, --readers: at least 1 each")
	case f.shards > 1024:
		return errors.New("--shards: at most 1024")
	case f.Statements && f.target != "" && f.configPath == "":
		return errors.New("--statements with --target needs -c (the databases)")
	case f.Clients < 1 || f.Rounds < 1 || f.Scale <= 0 || f.Duration <= 0:
		return errors.New("--clients, --rounds, --scale and --duration must be > 0")
	}
	if _, err := shardsOnEach(f.shards, benchDatabases); err != nil && len(f.servers) == 0 {
		return fmt.Errorf("--shards: %w", err)
	}
	if err := f.checkCPUs(given); err != nil {
		return err
	}
	if err := f.checkMoves(); err != nil {
		return err
	}
	// Found out now, not after a long run.
	if f.jsonPath != "" {
		if fi, err := os.Stat(filepath.Dir(f.jsonPath)); err != nil || !fi.IsDir() {
			return fmt.Errorf("--json %s: no directory %s", f.jsonPath, filepath.Dir(f.jsonPath))
		}
	}
	_, err := bench.NewGenerator(f.Workload, f.Scale, 0, 0, "", f.BatchSize)
	return err
}

// runBench is `coffer bench`.
func runBench(args []string, stdout, stderr io.Writer) int {
	f, err := parseBenchFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "coffer bench:", err)
		}
		return 2
	}
	ctx, abandon := context.WithCancel(context.Background())
	defer abandon()
	f.Stop = stopOnInterrupt(ctx, abandon, stderr)
	rep, err := f.run(ctx, stdout)
	if ctx.Err() != nil {
		err = errors.New("abandoned at the second interrupt")
	}
	if err != nil {
		fmt.Fprintln(stderr, "coffer bench:", err)
		return 1
	}
	rep.WriteText(stdout)
	if f.jsonPath != "" {
		if err := rep.WriteJSON(f.jsonPath); err != nil {
			fmt.Fprintln(stderr, "coffer bench:", err)
			return 1
		}
	}
	if f.reportDir != "" {
		if err := rep.WriteMarkdown(f.reportDir); err != nil {
			fmt.Fprintln(stderr, "coffer bench:", err)
			return 1
		}
	}
	if n := rep.Violations(); n > 0 {
		fmt.Fprintf(stderr, "coffer bench: the audit found %d violations\n", n)
		return 1
	}
	return 0
}

// benchReport is what a bench reports: one stack's (bench.Report) or, with
// --databases, several stacks' (bench.ScaleOut).
type benchReport interface {
	WriteText(w io.Writer)
	WriteJSON(path string) error
	WriteMarkdown(dir string) error
	// Violations is what the audit found.
	Violations() int
}

// stopOnInterrupt returns a channel closed at the first interrupt (or
// SIGTERM): the runs stop, the ops in flight finish, and the report covers
// what ran. A second interrupt calls abandon: nothing more is measured or
// reported, but the local stack is still stopped and removed.
func stopOnInterrupt(ctx context.Context, abandon func(), stderr io.Writer) <-chan struct{} {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	stop := make(chan struct{})
	go func() {
		defer signal.Stop(sig)
		select {
		case <-ctx.Done():
			return
		case <-sig:
		}
		fmt.Fprintln(stderr, "coffer bench: stopping after the ops in flight; interrupt again to abandon the report")
		close(stop)
		select {
		case <-ctx.Done():
		case <-sig:
			abandon()
		}
	}()
	return stop
}

func (f *benchFlags) run(ctx context.Context, out io.Writer) (benchReport, error) {
	switch {
	case len(f.servers) > 0:
		return f.runServers(ctx, out)
	case f.self:
		return f.runSelf(ctx, out, stackLayout{servers: 1, databasesEach: benchDatabases})
	}
	env := bench.Env{}
	if f.configPath != "" {
		cfg, m, err := loadConfig(f.configPath)
		if err != nil {
			return nil, err
		}
		if env.Router, err = f.openRouter(ctx, m, cfg); err != nil {
			return nil, err
		}
		defer env.Router.Close()
		if err := f.setBaseline(ctx, &env); err != nil {
			return nil, err
		}
	}
	var err error
	if env.Coffer, err = f.cofferTarget(f.target, f.target, f.apiKey); err != nil {
		return nil, err
	}
	return bench.Bench(ctx, f.Options, env, out)
}

// openRouter opens pools for the database figures and, with --baseline
// sql, sets the baseline up.
func (f *benchFlags) openRouter(ctx context.Context, m *shard.Map, cfg *Config) (*shard.Router, error) {
	pc := cfg.Pool
	pc.ConnsMax = int32(max(f.Clients, 4))
	router, err := shard.Open(m, pc)
	if err != nil {
		return nil, err
	}
	// Where the shards are now; a database whose moves cannot be read
	// fails its figures below anyway.
	_ = router.Refresh(ctx)
	if f.self && f.Statements {
		if err := bench.CreateStatementsExtension(ctx, router); err != nil {
			router.Close()
			return nil, err
		}
	}
	if f.baseline == "sql" {
		if err := bench.NewBaseline(router).Setup(ctx); err != nil {
			router.Close()
			return nil, err
		}
	}
	return router, nil
}

// setBaseline gives env the --baseline, on env.Router's databases.
// pgbench's tables are set up here, before any counter is read.
func (f *benchFlags) setBaseline(ctx context.Context, env *bench.Env) error {
	switch f.baseline {
	case "sql":
		env.Baseline = bench.NewSQLTarget(bench.NewBaseline(env.Router))
	case "pgbench":
		bin, err := pgbenchBinary()
		if err != nil {
			return err
		}
		p, err := bench.NewPgbench(ctx, bin, env.Router, f.Scale)
		if err != nil {
			return err
		}
		env.BaselineRunner = p
	}
	return nil
}

// pgbenchBinary is PostgreSQL's pgbench, beside the server binaries the
// stacks run (found through a link to them, as Debian's are off PATH).
func pgbenchBinary() (string, error) {
	dir, err := pgserver.BinDir()
	if err != nil {
		return "", err
	}
	if postgres, err := filepath.EvalSymlinks(filepath.Join(dir, "postgres")); err == nil {
		dir = filepath.Dir(postgres)
	}
	bin := filepath.Join(dir, "pgbench")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("--baseline pgbench: no pgbench beside the PostgreSQL server binaries in %s", dir)
	}
	return bin, nil
}

func (f *benchFlags) cofferTarget(httpURL, grpcAddr, key string) (bench.Target, error) {
	if f.Transport == "grpc" {
		return bench.NewGRPCTarget(grpcAddr, key)
	}
	return bench.NewHTTPTarget(httpURL, key, f.Clients), nil
}

// runSelf runs the benchmark on a local stack of its own: PostgreSQL with
// real fsync (layout's servers and databases, 16 shards unless --shards),
// confined to CPUs and budgets if asked, and `coffer serve` as a separate
// process, so that its CPU and memory are its own.
func (f *benchFlags) runSelf(ctx context.Context, out io.Writer, layout stackLayout) (rep *bench.Report, err error) {
	dir, err := os.MkdirTemp("", "coffer-bench-")
	if err != nil {
		return nil, err
	}
	if f.keep {
		fmt.Fprintln(out, "coffer bench: stack in", dir)
	} else {
		defer pgserver.RemoveAll(dir)
	}
	cpus, err := f.confine(layout)
	if err != nil {
		return nil, err
	}
	// After the stack has stopped: its processes leave their cgroups.
	defer func() { err = errors.Join(err, cpus.remove()) }()
	key := newAPIKey()
	cfg := f.stackConfig(key)
	if f.trace {
		stop, err := receiveSpans(cfg, out)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	settings := f.stackSettings()
	fd := f.startFeed(settings, dir)
	defer fd.close()
	st, err := startLocalStack(ctx, dir, cfg, layout, settings, io.Discard)
	if err != nil {
		return nil, err
	}
	defer st.stop()
	for i, server := range st.servers {
		if err := cpus.place(i, server); err != nil {
			return nil, err
		}
	}
	if err := cpus.placeBench(); err != nil {
		return nil, err
	}
	svc, err := startServe(ctx, st.configPath)
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	env := bench.Env{CofferPID: svc.cmd.Process.Pid, PostgresPIDs: st.postgresPIDs}
	if f.pgCPUQuota > 0 {
		env.PostgresThrottling = cpus.throttling
	}
	defer func() {
		if env.Router != nil {
			env.Router.Close()
		}
	}()
	if err := f.equip(ctx, &env, st, svc, fd, key, out); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "coffer bench: %s on a local stack of %d PostgreSQL server(s) (coffer serve pid %d), %d clients, %d round(s)\n", f.Workload, layout.servers, env.CofferPID, f.Clients, f.Rounds)
	if rep, err = bench.Bench(ctx, f.Options, env, out); err != nil {
		return nil, err
	}
	if rep.Feed, err = fd.figures(ctx); err != nil {
		return nil, err
	}
	cpus.readBack(st, env.CofferPID)
	ar, err := (&audit.Checker{Router: env.Router}).Check(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	rep.Audited, rep.AuditViolations = true, len(ar.Violations)
	rep.PostgresSettings, rep.Committers, rep.Readers = settings, cfg.Batches.Committers, cfg.Batches.Readers
	rep.Confinement = &cpus.report
	return rep, nil
}

// receiveSpans starts an OTLP receiver in the bench's process (its CPU
// is not coffer's) and points cfg's coffer serve at it; stop says how
// many spans it received.
func receiveSpans(cfg *Config, out io.Writer) (stop func(), err error) {
	spans, err := telemetry.Receive(0)
	if err != nil {
		return nil, err
	}
	cfg.Telemetry.OTLPEndpoint = "http://" + spans.Addr
	return func() {
		spans.Stop()
		fmt.Fprintf(out, "coffer bench: %d spans received over OTLP\n", spans.Spans())
	}, nil
}

// equip gives env what the runs on the stack st, served by svc, use:
// the router (the caller closes it), the mover for --move, coffer's
// target, the baseline and the feed's hooks.
func (f *benchFlags) equip(ctx context.Context, env *bench.Env, st *localStack, svc *serveProcess, fd *benchFeed, key string, out io.Writer) error {
	m, err := st.shardMap()
	if err != nil {
		return err
	}
	if env.Router, err = f.openRouter(ctx, m, st.config); err != nil {
		return err
	}
	if len(f.Moves) > 0 {
		if env.Mover, err = newStackMover(env.Router, st.config, m, out); err != nil {
			return err
		}
	}
	if env.Coffer, err = f.cofferTarget("http://"+svc.httpAddr, svc.grpcAddr, key); err != nil {
		return err
	}
	if err := f.setBaseline(ctx, env); err != nil {
		return err
	}
	return fd.attach(ctx, st, env)
}

// stackConfig is the config of a --self stack's coffer serve.
func (f *benchFlags) stackConfig(key string) *Config {
	cfg := benchConfig(key)
	cfg.ShardCount = f.shards
	cfg.Batches.Committers, cfg.Batches.Readers = f.committers, f.readers
	cfg.Listen.Ops = f.pprof
	// The sweepers stay idle while the bench runs: a lot sweeper's pass
	// writes every shard's window (expiry_sweep_N), a transaction per
	// shard at each interval whatever the load, which the figures per op
	// would charge to whichever side was running, the more the fewer its
	// ops. The workloads leave nothing due to sweep.
	cfg.Sweep.Interval = benchSweepInterval
	return cfg
}

// stackSettings are the settings of a --self stack's PostgreSQL servers.
// With --databases every stack's servers get the same ones, a share of
// the memory that the largest stack's fit in.
func (f *benchFlags) stackSettings() map[string]string {
	settings := map[string]string{}
	if !f.stockPostgres {
		maps.Copy(settings, tunedPostgres(slices.Max(append([]int{1}, f.servers...))))
	}
	if f.Statements {
		settings["shared_preload_libraries"] = "pg_stat_statements"
		// The statements run inside functions too (a deployment's
		// triggers, say), not only those sent.
		settings["pg_stat_statements.track"] = "all"
	}
	maps.Copy(settings, f.pgSet)
	return settings
}

// benchDatabases is how many databases the --self stack spreads its
// shards over.
const benchDatabases = 2

// benchSweepInterval is the --self stack's sweep.interval: longer than
// any bench, so that no sweeper pass runs during one.
const benchSweepInterval = 24 * time.Hour

// benchConfig is the bench deployment: 10 namespaces, 50 currencies that
// can all be bought, each namespace exchanging c_i into c_i+1 at 1:1, and
// one client with every permission.
func benchConfig(key string) *Config {
	cfg := DefaultConfig()
	cfg.ShardCount = 16
	cfg.Listen = ListenConfig{HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0"} // no ops listener unless --pprof
	cfg.Log.Level = "info"
	cl := ClientConfig{Name: "bench", Emitter: 1, Permissions: []string{"read", "write", "admin"}}
	h := coffer.HashKey(key)
	cl.KeySHA256 = []string{hex.EncodeToString(h[:])}
	for i := 1; i <= bench.Currencies; i++ {
		cfg.Currencies = append(cfg.Currencies, CurrencyConfig{ID: int32(i), Code: bench.CurrencyCode(i), Paid: true})
	}
	for ns := int32(1); ns <= bench.Namespaces; ns++ {
		nc := NamespaceConfig{ID: ns}
		for i := 1; i <= bench.Currencies; i++ {
			nc.Exchanges = append(nc.Exchanges, ExchangeConfig{From: bench.CurrencyCode(i), To: bench.CurrencyCode(i%bench.Currencies + 1), Rate: "1:1"})
		}
		cfg.Namespaces = append(cfg.Namespaces, nc)
		cl.Namespaces = append(cl.Namespaces, ns)
	}
	cfg.Clients = []ClientConfig{cl}
	return cfg
}

// serveProcess is `coffer serve` run as a child process.
type serveProcess struct {
	cmd                *exec.Cmd
	httpAddr, grpcAddr string
	exited             chan struct{}
}

// startServe starts this binary's `serve` on config and waits for its
// "serving" log line, which names the addresses it bound.
func startServe(ctx context.Context, config string) (*serveProcess, error) {
	exe, err := ownImage()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "serve", "-c", config)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serveProcess{cmd: cmd, exited: make(chan struct{})}
	up := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var line struct{ Msg, HTTP, GRPC string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				p.httpAddr, p.grpcAddr = line.HTTP, line.GRPC
				up <- nil
			}
		}
		up <- errors.New("coffer serve exited before serving")
		close(p.exited)
	}()
	select {
	case err = <-up:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(60 * time.Second):
		err = errors.New("coffer serve not up in 60 s")
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// stop ends the process with SIGTERM (a drain), or SIGKILL after 30 s.
func (p *serveProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
	}
	_ = p.cmd.Wait()
}

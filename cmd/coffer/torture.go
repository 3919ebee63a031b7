package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/torture"
	"github.com/cofferhq/coffer/wallet"
)

// tortureRun is one `coffer torture`: three shard databases holding 16
// shards (a PostgreSQL server each, with a standby with --standbys, or a
// Patroni cluster with --patroni) behind fault proxies, two `coffer serve`
// instances, the workload and the nemesis. It implements torture.Target.
type tortureRun struct {
	duration time.Duration
	seed     uint64
	clients  int
	kinds    []string
	standbys bool
	patroni  bool
	// feed runs the change feed beside the instances, and checks the
	// stream against the ledger at the end.
	feed bool
	out  io.Writer
	// damage, if set, runs before the checks: the tests use it to prove
	// the checks fail on a damaged ledger.
	damage func(ctx context.Context, direct *shard.Map) error
	// finlogPage is the finlog page size of the checks (0: the largest);
	// the tests make it small, so that the checks read many pages.
	finlogPage int

	dir string
	tortureCluster
	direct    *shard.Map // to the servers themselves, for migrations and the audit
	served    *shard.Map // through the proxies, as coffer sees it
	cfgPath   string
	key       string
	mu        sync.Mutex
	procs     []*serveProcess
	instances *torture.Instances
	probes    []coffer.PlayerID // one player of the workload on each database
	// writeProbes has a player on each database that the workload does
	// not use, for the probe writes during failovers.
	writeProbes []coffer.PlayerID
	probeSeq    atomic.Int64
	// placer reads the shards' moves for the nemesis (ShardPlace);
	// movable are the shards it may move.
	placer  *shard.Router
	movable []int
	feedRun *tortureFeed
}

// tortureCluster is the PostgreSQL side of a run, which the nemesis breaks:
// the torture.Target methods that concern the databases. The starts
// (startServerCluster, startPatroniCluster) return it, not their own
// types: a start that fails returns no cluster, where a nil pointer of
// theirs would make a non-nil one that teardown closes.
type tortureCluster interface {
	KillServer(i int) error
	RestartServer(ctx context.Context, i int) error
	PauseServer(i int) error
	ResumeServer(i int) error
	Proxy(i int) *torture.Proxy
	Failover(ctx context.Context, i int, kind string, length time.Duration) error
	// keepSlot makes the feed's slot of every database outlive its
	// failovers.
	keepSlot(ctx context.Context, slot string) error
	// databases lists, per database, the addresses of its servers and
	// of their proxies, in the same order.
	databases() (direct, proxied [][]string)
	close()
}

// tortureCollectors are the workload's collectors, after its players
// 1 … 64.
var tortureCollectors = []coffer.PlayerID{65, 66}

// tortureHoldTTL is the hold TTL of a torture run: short, so that holds the
// workload abandons expire and are swept within the run.
const tortureHoldTTL = 3 * time.Second

// runTortureCmd is `coffer torture`.
func runTortureCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	t := &tortureRun{out: stdout}
	fs.DurationVar(&t.duration, "duration", 2*time.Minute, "how long the workload and the nemesis run")
	fs.Uint64Var(&t.seed, "seed", 1, "seed of the workload and of the fault schedule")
	fs.IntVar(&t.clients, "clients", 8, "concurrent clients")
	fs.BoolVar(&t.standbys, "standbys", false, "give every PostgreSQL server a synchronous streaming standby, and fail over to it")
	fs.BoolVar(&t.patroni, "patroni", false, "run every database as a Patroni cluster of two members (synchronous mode, etcd), and fail over with Patroni")
	fs.BoolVar(&t.feed, "feed", false, "run the change feed (nats-server and coffer feed) and check its stream against the ledger")
	faults := fs.String("faults", "", "fault kinds, comma-separated (default: all of the run's kinds): "+
		strings.Join(torture.FaultKinds, ", ")+"; with --standbys also "+strings.Join(torture.StandbyFaultKinds[len(torture.FaultKinds):], ", ")+
		"; with --patroni: "+strings.Join(torture.PatroniFaultKinds, ", ")+"; with --feed also "+strings.Join(torture.FeedFaultKinds, ", "))
	if err := fs.Parse(args); err != nil {
		return 2
	}
	kinds := torture.FaultKinds
	switch {
	case t.standbys && t.patroni:
		fmt.Fprintln(stderr, "coffer torture: --standbys and --patroni exclude each other (Patroni runs its own standbys)")
		return 2
	case t.standbys && t.feed:
		fmt.Fprintln(stderr, "coffer torture: --feed fails over with --patroni only: PostgreSQL 15 keeps no logical slot across a failover, Patroni's permanent slots do (docs/events.md)")
		return 2
	case t.standbys:
		kinds = torture.StandbyFaultKinds
	case t.patroni:
		kinds = torture.PatroniFaultKinds
	}
	if t.feed {
		kinds = append(slices.Clone(kinds), torture.FeedFaultKinds...)
	}
	if *faults == "" {
		*faults = strings.Join(kinds, ",")
	}
	for _, k := range strings.Split(*faults, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(kinds, k) {
			fmt.Fprintf(stderr, "coffer torture: fault kind %q is not one of this run's: %s\n", k, strings.Join(kinds, ", "))
			return 2
		}
		t.kinds = append(t.kinds, k)
	}
	if t.clients < 1 || t.duration < 10*time.Second {
		fmt.Fprintln(stderr, "coffer torture: --clients must be ≥ 1 and --duration ≥ 10s")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	violations, err := t.run(ctx)
	if ctx.Err() != nil {
		// The checks fail too once interrupted; their errors would read
		// like findings.
		fmt.Fprintln(stderr, "coffer torture: interrupted; nothing was checked")
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "coffer torture:", err)
		return 1
	}
	if len(violations) > 0 {
		fmt.Fprintf(stdout, "\nFAILED: %d violation(s)\n", len(violations))
		for _, v := range violations {
			fmt.Fprintln(stdout, "  "+v)
		}
		return 1
	}
	fmt.Fprintln(stdout, "\nPASSED: no currency created or lost")
	return 0
}

func (t *tortureRun) run(ctx context.Context) ([]string, error) {
	dir, err := os.MkdirTemp("", "coffer-torture-")
	if err != nil {
		return nil, err
	}
	t.dir = dir
	defer pgserver.RemoveAll(dir)
	defer t.teardown()
	if err := t.setup(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	// The clients write for the duration and, while the nemesis still
	// has faults of its plan to inject (failovers slower than planned, on
	// a busy machine), until it is done: every planned fault is injected
	// under load. Up to three times the duration: the nemesis drops what
	// is planned past that.
	last, done := start.Add(3*t.duration), make(chan struct{})
	w := &torture.Workload{Instances: t.instances, Seed: t.seed, Until: start.Add(t.duration), NemesisDone: done,
		GiveUpAt: last.Add(30 * time.Second), FinlogPage: t.finlogPage}
	for p := coffer.PlayerID(1); p <= 64; p++ {
		w.Players = append(w.Players, p)
	}
	w.Collectors = tortureCollectors
	plan := torture.Plan(t.seed, t.kinds, t.duration, len(t.probes), t.Instances())
	fmt.Fprintf(t.out, "coffer torture: %d clients for %s, seed %d, %d faults planned, from %s\n", t.clients, t.duration, t.seed, len(plan),
		time.Now().UTC().Format("15:04:05.000"))
	var injected *torture.Injected
	go func() {
		injected = torture.Run(ctx, t, plan, start, last)
		close(done)
	}()
	w.Run(ctx, t.clients)
	<-done
	// Let abandoned holds pass their TTL and the sweepers roll them back.
	time.Sleep(tortureHoldTTL + 2*time.Second)
	return t.check(ctx, w, injected)
}

// check prints the report and returns every violation.
func (t *tortureRun) check(ctx context.Context, w *torture.Workload, injected *torture.Injected) ([]string, error) {
	if t.damage != nil {
		if err := t.damage(ctx, t.direct); err != nil {
			return nil, err
		}
	}
	w.GiveUpAt = time.Now().Add(time.Minute)
	violations := w.Verify(ctx)
	// The audit reaches the databases as the instances do, and finds
	// each shard where the moves put it.
	router, err := shard.Open(t.served, shard.DefaultPoolConfig())
	if err != nil {
		return nil, err
	}
	defer router.Close()
	if err := router.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	rep, err := (&audit.Checker{Router: router, HoldGrace: 2 * time.Second}).Check(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	for _, v := range rep.Violations {
		violations = append(violations, fmt.Sprintf("audit: %+v", v))
	}
	violations = append(violations, t.checkShardMap(ctx, router)...)
	violations = append(violations, injected.Errors...)
	var feedLine string
	if t.feedRun != nil {
		// The instances stop: no sweeper writes while the relay catches up.
		t.stopInstances()
		var fv []string
		if feedLine, fv, err = t.feedRun.check(ctx, router); err != nil {
			return nil, fmt.Errorf("feed: %w", err)
		}
		violations = append(violations, fv...)
	}
	c := torture.Count(w.Records())
	fmt.Fprintf(t.out, "\nwrites %d: acknowledged %d, rejected %d, unknown %d; %d needed retries\n", c.Writes, c.Acked, c.Rejected, c.Unknown, c.Retried)
	fmt.Fprintf(t.out, "holds acknowledged: %d committed by the client, %d rolled back, %d abandoned; %d ended after a lot they took from expired\n",
		c.Holds["commit"], c.Holds["rollback"], c.Holds["abandon"], c.Outliving)
	fmt.Fprintf(t.out, "grants acknowledged with lots that expire: %d; refused: %d insufficient_funds, %d too_many_lots\n",
		c.Expiring, c.Refused[coffer.CodeInsufficientFunds], c.Refused[coffer.CodeTooManyLots])
	fmt.Fprintf(t.out, "store orders: %d purchases credited, %d refused purchase_already_credited; %d refunds acknowledged, %d refused already_refunded, %d not_found\n",
		c.Credited, c.Refused[coffer.CodePurchaseAlreadyCredited], c.Refunded, c.Refused[coffer.CodeAlreadyRefunded], c.Refused[coffer.CodeNotFound])
	fmt.Fprintf(t.out, "faults injected:\n%s", injected.Summary())
	for i, db := range t.direct.Databases() {
		fmt.Fprintf(t.out, "  database %d (shards %d–%d): %s without full service\n", i, db.Shards[0], db.Shards[len(db.Shards)-1], injected.Outage[i].Round(time.Millisecond))
	}
	fmt.Fprint(t.out, awayLine(router.Map(), t.served))
	fmt.Fprint(t.out, feedLine)
	return violations, nil
}

// setup starts the servers, proxies and instances.
func (t *tortureRun) setup(ctx context.Context) error {
	t.key = newAPIKey()
	cfg := devConfig("127.0.0.1:0", "", t.key)
	cfg.ShardCount, cfg.DistributionMode = 16, "manual"
	cfg.Holds.TTLDefault, cfg.Sweep.Interval = tortureHoldTTL, 500*time.Millisecond
	cfg.Timeouts.Request, cfg.Pool.ConnectTimeout = 2*time.Second, time.Second
	cfg.Log.Level = "info"
	cfg.Currencies[1].RefundPolicy = string(coffer.RefundClawBack) // silver; gold keeps the default, write_off
	ranges := [][2]int{{0, 5}, {6, 10}, {11, 15}}
	// Where a database has a standby, coffer refuses its writes while the
	// standby is out of sync, as production should be run.
	cfg.RequireSynchronousStandby = t.standbys || t.patroni
	var err error
	if t.feed {
		if t.feedRun, err = startTortureFeed(cfg, t.dir); err != nil {
			return err
		}
	}
	if t.patroni {
		t.tortureCluster, err = startPatroniCluster(ctx, t.dir, len(ranges), t.serverSettings())
	} else {
		t.tortureCluster, err = startServerCluster(ctx, t.dir, len(ranges), t.standbys, t.serverSettings())
	}
	if err != nil {
		return err
	}
	direct := cfg.Config
	directAddrs, proxiedAddrs := t.databases()
	for i, r := range ranges {
		db := databaseConfig(directAddrs[i], shard.Range{Min: r[0], Max: r[1]})
		direct.Databases = append(direct.Databases, db)
		cfg.Databases = append(cfg.Databases, databaseConfig(proxiedAddrs[i], shard.Range{Min: r[0], Max: r[1]}))
	}
	if t.direct, err = shard.NewMap(direct); err != nil {
		return err
	}
	if t.served, err = shard.NewMap(cfg.Config); err != nil {
		return err
	}
	if err := applySchema(ctx, t.direct, cfg.Env, io.Discard); err != nil {
		return err
	}
	t.cfgPath = filepath.Join(t.dir, "coffer.yaml")
	if err := writeConfigFile(t.cfgPath, cfg); err != nil {
		return err
	}
	if t.feedRun != nil {
		if err := t.feedRun.start(ctx, t.cfgPath, t.direct); err != nil {
			return err
		}
		if err := t.keepSlot(ctx, feed.SlotName(cfg.Feed.Slot, "coffer")); err != nil {
			return err
		}
	}
	t.probes = firstPlayers(t.direct, 1)
	t.writeProbes = firstPlayers(t.direct, 1_000_000)
	t.movable = movableShards(t.direct, tortureCollectors[len(tortureCollectors)-1], append(slices.Clone(t.probes), t.writeProbes...)...)
	if t.placer, err = shard.Open(t.served, cfg.Pool); err != nil {
		return err
	}
	var urls []string
	for i := 0; i < 2; i++ {
		p, err := startServe(ctx, t.cfgPath)
		if err != nil {
			return err
		}
		t.procs = append(t.procs, p)
		urls = append(urls, "http://"+p.httpAddr)
	}
	t.instances = torture.NewInstances(t.key, urls...)
	return nil
}

// serverSettings are the PostgreSQL settings the run's servers need over
// pgserver's: a standby's to stream from, the feed's to decode the WAL.
func (t *tortureRun) serverSettings() map[string]string {
	set := map[string]string{}
	if t.standbys {
		maps.Copy(set, pgserver.ReplicationSettings())
	}
	if t.feed {
		set["wal_level"] = "logical"
	}
	return set
}

// databaseConfig is a torture database at addrs (a primary and its standby
// when there are two: coffer writes to whichever accepts writes).
func databaseConfig(addrs []string, r shard.Range) shard.DatabaseConfig {
	db := shard.DatabaseConfig{Name: "coffer", Type: "postgres", User: pgserver.Superuser, Password: pgserver.Password,
		Shards: []shard.Range{r}}
	if len(addrs) == 1 {
		host, port, _ := net.SplitHostPort(addrs[0])
		db.Host = host
		db.Port, _ = strconv.Atoi(port)
	} else {
		db.Hosts = addrs
	}
	return db
}

// firstPlayers is, for each database of m, the first player from
// `from` on that database.
func firstPlayers(m *shard.Map, from coffer.PlayerID) []coffer.PlayerID {
	var players []coffer.PlayerID
	for i := range m.Databases() {
		for p := from; ; p++ {
			if m.DatabaseIndex(m.ShardOf(p)) == i {
				players = append(players, p)
				break
			}
		}
	}
	return players
}

func (t *tortureRun) teardown() {
	t.stopInstances()
	if t.feedRun != nil {
		t.feedRun.close()
	}
	if t.placer != nil {
		t.placer.Close()
	}
	if t.tortureCluster != nil {
		t.close()
	}
}

// stopInstances stops the coffer instances (SIGTERM, a drain).
func (t *tortureRun) stopInstances() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.procs {
		if p != nil {
			p.stop()
		}
	}
}

// Instances is part of torture.Target.
func (t *tortureRun) Instances() int { return 2 }

// ProbeWrite is part of torture.Target: a grant of 1 credit, under a new
// key, to a player the workload does not use.
func (t *tortureRun) ProbeWrite(ctx context.Context, k, i int) error {
	t.mu.Lock()
	url := "http://" + t.procs[k].httpAddr
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, _, err := wallet.New(url, t.key, nil).Change(ctx, 1, t.writeProbes[i], wallet.Change{
		IdempotencyKey: fmt.Sprintf("probe-%d", t.probeSeq.Add(1)), Reason: "probe",
		Ops: []coffer.OpRequest{{Currency: "credits", Amount: 1}}})
	return err
}

// KillInstance is part of torture.Target: kill -9, mid-traffic.
func (t *tortureRun) KillInstance(i int) error {
	t.mu.Lock()
	p := t.procs[i]
	t.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.exited
	_ = p.cmd.Wait()
	return nil
}

// RestartInstance is part of torture.Target.
func (t *tortureRun) RestartInstance(ctx context.Context, i int) error {
	p, err := startServe(ctx, t.cfgPath)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.procs[i] = p
	t.mu.Unlock()
	t.instances.Set(i, "http://"+p.httpAddr)
	return nil
}

// WaitInstance is part of torture.Target: until /readyz answers 200.
func (t *tortureRun) WaitInstance(ctx context.Context, i int) {
	t.mu.Lock()
	url := "http://" + t.procs[i].httpAddr + "/readyz"
	t.mu.Unlock()
	waitUntil(ctx, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// WaitDatabase is part of torture.Target: until both instances read a
// player of database i.
func (t *tortureRun) WaitDatabase(ctx context.Context, i int) {
	waitUntil(ctx, func() bool {
		t.mu.Lock()
		procs := slices.Clone(t.procs)
		t.mu.Unlock()
		for _, p := range procs {
			c := wallet.New("http://"+p.httpAddr, t.key, nil)
			if _, err := c.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: t.probes[i]}); err != nil {
				return false
			}
		}
		return true
	})
}

// waitUntil polls ok every 50 ms until it holds, ctx ends or a minute
// passes.
func waitUntil(ctx context.Context, ok func() bool) {
	for start := time.Now(); ctx.Err() == nil && time.Since(start) < time.Minute && !ok(); {
		time.Sleep(50 * time.Millisecond)
	}
}

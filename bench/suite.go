package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
)

// Options is a whole benchmark: rounds of coffer (and of the baseline,
// alternating A B A B …) with the same run config.
type Options struct {
	RunConfig
	Transport string
	Rounds    int
	// Preload grants this many times through coffer before the rounds,
	// so that reads find players with balances. It is not measured.
	Preload int64
	// Statements reads pg_stat_statements around each run (it must be
	// loaded in the servers): what each side asks of PostgreSQL.
	Statements bool
	// Moves are shards to move under load: in each of coffer's runs,
	// once half its duration has passed, each goes to the next database
	// of Env.Router's map and back (Env.Mover), one after the other, and
	// the run goes on until the moves are done. Report.Moves tells what
	// each cost.
	Moves []coffer.ShardID
}

// Env is what the benchmark drives and watches. Router, CofferPID and
// PostgresPIDs may be zero when unknown (a remote target): the figures
// that need them are left out.
type Env struct {
	Coffer Target
	// CofferRunner, if set, runs coffer's side instead of driving Coffer
	// alone: one that does more around its runs (waits for the feed).
	CofferRunner Runner
	// Baseline is the SQL baseline, driven op by op; BaselineRunner,
	// if set instead, a baseline that runs whole runs (pgbench).
	Baseline       Target
	BaselineRunner Runner
	Router         *shard.Router
	CofferPID      int
	PostgresPIDs   func() []int
	// PostgresThrottling, if set, reads the PostgreSQL servers' CPU
	// quota periods so far, in all, and those whose quota ran out.
	PostgresThrottling func() (periods, throttled int64, err error)
	// Mover moves the shards of Options.Moves.
	Mover Mover
}

// Runner is one side of the benchmark: it runs whole runs. Check is its
// preflight.
type Runner interface {
	Name() string
	Check(ctx context.Context) error
	Run(ctx context.Context, cfg RunConfig) (*Result, error)
}

// targetRunner drives a Target op by op (Run).
type targetRunner struct {
	name string
	t    Target
}

func (r targetRunner) Name() string                    { return r.name }
func (r targetRunner) Check(ctx context.Context) error { return preflight(ctx, r.t) }
func (r targetRunner) Run(ctx context.Context, cfg RunConfig) (*Result, error) {
	return Run(ctx, cfg, r.t)
}

// baseline is the Runner of the baseline, or nil without one.
func (e *Env) baseline() Runner {
	switch {
	case e.BaselineRunner != nil:
		return e.BaselineRunner
	case e.Baseline != nil:
		return targetRunner{"sql", e.Baseline}
	}
	return nil
}

// Round is one pair of runs.
type Round struct {
	CofferTPS   float64 `json:"coffer_tps"`
	BaselineTPS float64 `json:"baseline_tps,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"`
}

// Decay compares the first and last tenth of a long run.
type Decay struct {
	Ops      int64   `json:"ops"`
	FirstTPS float64 `json:"first_tenth_tps"`
	LastTPS  float64 `json:"last_tenth_tps"`
	Ratio    float64 `json:"ratio"`
	// TenthsTPS is the throughput of each tenth, first to last: where
	// between the two ends it changed.
	TenthsTPS []float64 `json:"tenths_tps"`
	// TenthsCofferCPU is coffer serve's CPU seconds per 1000 ops in each
	// tenth (with --self). Its work per op does not grow with the data,
	// so where it rises the host slowed down, not the write.
	TenthsCofferCPU []float64 `json:"tenths_coffer_cpu_s_per_1000,omitempty"`
}

// Side is what one side (coffer or the baseline) cost, from the database
// and process counters around its runs. The counters span the warmups too,
// so Ops counts every op answered in the runs, and the costs are per one
// of those.
type Side struct {
	Ops                  int64   `json:"ops"`
	WALBytesPerOp        float64 `json:"wal_bytes_per_op"`
	DBBytesPerOp         float64 `json:"db_bytes_per_op"`
	PostgresCPUPer1000Op float64 `json:"postgres_cpu_s_per_1000_ops"`
	// WalsenderCPUPer1000Op is the part of it PostgreSQL's walsenders
	// took: the change feed's logical decoding (--feed), apart from the
	// backends that run the writes.
	WalsenderCPUPer1000Op float64 `json:"postgres_walsender_cpu_s_per_1000_ops,omitempty"`
	CofferCPUPer1000Op    float64 `json:"coffer_cpu_s_per_1000_ops,omitempty"`
	// StealShare is the share of the machine's CPU time the hypervisor
	// gave to other guests during the side's runs: a noisy neighbour
	// shows here, and makes the side's figures worse.
	StealShare float64 `json:"steal_share"`
	// PostgresThrottledShare is, with --pg-cpu-quota, the share of the
	// servers' quota periods in which they ran that their quota ran out:
	// near 1 when the budget is what bounds the side, near 0 when
	// something else does.
	PostgresThrottledShare float64 `json:"postgres_throttled_share,omitempty"`
	// BenchCPUPer1000Op is the bench process's own CPU: the load
	// generator and the side's client (HTTP, gRPC or pgx), which share
	// the machine with the side they drive.
	BenchCPUPer1000Op float64 `json:"bench_cpu_s_per_1000_ops"`
	LotHOTShare       float64 `json:"lot_hot_update_share,omitempty"`
	// TransactionsPerOp is the transactions that wrote per op, each a
	// commit and a WAL flush: one per write for a side that commits each
	// write alone, fewer for one that commits writes in batches.
	TransactionsPerOp float64 `json:"transactions_per_op"`
	// TrxWritten is the trx rows the side's runs added: its writes, not
	// replays of another side's.
	TrxWritten int64 `json:"trx_rows_written"`
	// StatementsPerOp and ExecUsPerOp are what pg_stat_statements counted
	// (with Options.Statements): statements sent and the time executing
	// them, per op. Statements lists them, the costliest first, with those
	// run inside a function (Nested), whose time is their call's too.
	StatementsPerOp float64     `json:"statements_per_op,omitempty"`
	ExecUsPerOp     float64     `json:"statement_exec_us_per_op,omitempty"`
	Statements      []Statement `json:"statements,omitempty"`
}

// Statement is one statement's share of a side's ops.
type Statement struct {
	Query         string  `json:"query"`
	Nested        bool    `json:"nested,omitempty"`
	CallsPerOp    float64 `json:"calls_per_op"`
	ExecUsPerOp   float64 `json:"exec_us_per_op"`
	MeanExecUs    float64 `json:"mean_exec_us"`
	WALBytesPerOp float64 `json:"wal_bytes_per_op"`
}

// Report is the benchmark's result; its JSON form is what --json writes.
type Report struct {
	Workload Workload `json:"workload"`
	// BatchSize is the grants per call of the batch workload, whose ops
	// (and tps) are grants; its baseline runs write.
	BatchSize int    `json:"batch_size,omitempty"`
	Transport string `json:"transport"`
	// BaselineName is the baseline's: sql or pgbench.
	BaselineName string  `json:"baseline_name,omitempty"`
	Clients      int     `json:"clients"`
	Rate         float64 `json:"rate,omitempty"`
	Scale        float64 `json:"scale"`
	DurationS    float64 `json:"duration_s"`
	Preload      int64   `json:"preload,omitempty"`
	// PostgresSettings are the settings a --self server ran with, over
	// PostgreSQL's stock ones.
	PostgresSettings map[string]string `json:"postgres_settings,omitempty"`
	// Committers is a --self coffer serve's batches.committers: the
	// batches of writes in flight per database, which set how many writes
	// a batch gathers.
	Committers int `json:"committers,omitempty"`
	// Readers is its batches.readers: the batches of balance reads in
	// flight per database.
	Readers int `json:"readers,omitempty"`
	// Confinement is how a --self stack shared the CPUs.
	Confinement *Confinement `json:"confinement,omitempty"`
	Rounds      []Round      `json:"rounds"`
	RatioMedian float64      `json:"ratio_median,omitempty"`
	// CapacityRatio is the baseline's PostgreSQL CPU per op over coffer's:
	// how many times the baseline's ops a database server carries in
	// coffer's once its CPU is what bounds them, as it is in production,
	// where the service tier scales out on machines of its own.
	CapacityRatio float64          `json:"capacity_ratio,omitempty"`
	TPS           float64          `json:"tps"`
	Latency       Latency          `json:"latency_ms"`
	Errors        map[string]int64 `json:"errors"`
	WALBytesPerOp float64          `json:"wal_bytes_per_op"`
	RSSPeakBytes  int64            `json:"rss_peak_bytes"`
	Coffer        Side             `json:"coffer"`
	Baseline      *Side            `json:"baseline,omitempty"`
	BaselineLat   *Latency         `json:"baseline_latency_ms,omitempty"`
	Decay         *Decay           `json:"decay,omitempty"`
	Feed          *FeedFigures     `json:"feed,omitempty"`
	// Writes is how many writes coffer acknowledged; TrxWritten how many
	// trx rows its databases gained.
	Writes     int64 `json:"writes_acked"`
	TrxWritten int64 `json:"trx_rows_written"`
	// Audited tells whether the audit ran after the runs (--self), and
	// AuditViolations what it found.
	Audited         bool `json:"audited"`
	AuditViolations int  `json:"audit_violations"`
	// Interrupted tells that the runs were stopped early (an interrupt):
	// the report covers what ran until then.
	Interrupted bool `json:"interrupted,omitempty"`
	// Moves are the shard moves made during coffer's runs
	// (Options.Moves), in order.
	Moves []ShardMove `json:"moves,omitempty"`
	Runs  []*Result   `json:"runs"`
}

// counters are the readings around a run.
type counters struct {
	db                         serverStats
	pgCPU, cofferCPU, benchCPU float64
	// walsenders is each walsender's CPU seconds, by pid.
	walsenders             map[int]float64
	machine, steal         int64
	pgPeriods, pgThrottled int64
	haveDB, haveProcess    bool
}

func (e *Env) read(ctx context.Context) (counters, error) {
	var c counters
	if e.Router != nil {
		// Statistics reach pg_stat_* up to a second after a commit.
		time.Sleep(1100 * time.Millisecond)
		st, err := readServerStats(ctx, e.Router)
		if err != nil {
			return c, fmt.Errorf("database counters: %w", err)
		}
		c.db, c.haveDB = st, true
	}
	if e.PostgresPIDs != nil {
		pids := e.PostgresPIDs()
		c.pgCPU, c.haveProcess = cpuSeconds(pids), true
		c.walsenders = map[int]float64{}
		for _, pid := range walsenders(pids) {
			c.walsenders[pid] = cpuSeconds([]int{pid})
		}
	}
	if e.CofferPID != 0 {
		c.cofferCPU = cpuSeconds([]int{e.CofferPID})
	}
	if e.PostgresThrottling != nil {
		var err error
		if c.pgPeriods, c.pgThrottled, err = e.PostgresThrottling(); err != nil {
			return c, fmt.Errorf("PostgreSQL's CPU quota: %w", err)
		}
	}
	c.benchCPU = cpuSeconds([]int{os.Getpid()})
	c.machine, c.steal = machineTicks()
	return c, nil
}

// sideTotals accumulates the deltas of one side's runs.
type sideTotals struct {
	ops                      int64
	wal, size, upd, hot, trx int64
	transactions             int64
	pgCPU, cofferCPU         float64
	walsenderCPU             float64
	benchCPU                 float64
	machine, steal           int64
	pgPeriods, pgThrottled   int64
	statements               map[string]*statementStats
}

func (s *sideTotals) add(before, after counters, ops int64) {
	s.ops += ops
	s.wal += after.db.WALBytes - before.db.WALBytes
	s.size += after.db.SizeBytes - before.db.SizeBytes
	s.upd += after.db.LotUpdates - before.db.LotUpdates
	s.hot += after.db.LotHOTUpdates - before.db.LotHOTUpdates
	s.trx += after.db.Trx - before.db.Trx
	s.transactions += after.db.Transactions - before.db.Transactions
	s.pgCPU += after.pgCPU - before.pgCPU
	// A walsender that ended during the run is not counted (its CPU
	// went to the postmaster's children's); one that began, wholly.
	for pid, cpu := range after.walsenders {
		s.walsenderCPU += cpu - before.walsenders[pid]
	}
	s.cofferCPU += after.cofferCPU - before.cofferCPU
	s.benchCPU += after.benchCPU - before.benchCPU
	s.machine += after.machine - before.machine
	s.steal += after.steal - before.steal
	s.pgPeriods += after.pgPeriods - before.pgPeriods
	s.pgThrottled += after.pgThrottled - before.pgThrottled
}

func (s *sideTotals) side() Side {
	per := func(x float64) float64 { return x / float64(max(s.ops, 1)) }
	out := Side{Ops: s.ops, WALBytesPerOp: per(float64(s.wal)), DBBytesPerOp: per(float64(s.size)),
		PostgresCPUPer1000Op: 1000 * per(s.pgCPU), WalsenderCPUPer1000Op: 1000 * per(s.walsenderCPU), CofferCPUPer1000Op: 1000 * per(s.cofferCPU),
		BenchCPUPer1000Op: 1000 * per(s.benchCPU), TransactionsPerOp: per(float64(s.transactions)), TrxWritten: s.trx}
	if s.upd > 0 {
		out.LotHOTShare = float64(s.hot) / float64(s.upd)
	}
	if s.machine > 0 {
		out.StealShare = float64(s.steal) / float64(s.machine)
	}
	if s.pgPeriods > 0 {
		out.PostgresThrottledShare = float64(s.pgThrottled) / float64(s.pgPeriods)
	}
	for _, st := range s.statements {
		if !st.Nested {
			out.StatementsPerOp += per(float64(st.Calls))
			out.ExecUsPerOp += 1000 * per(st.ExecMs)
		}
		out.Statements = append(out.Statements, Statement{Query: st.Query, Nested: st.Nested, CallsPerOp: per(float64(st.Calls)),
			ExecUsPerOp: 1000 * per(st.ExecMs), MeanExecUs: 1000 * st.ExecMs / float64(max(st.Calls, 1)),
			WALBytesPerOp: per(float64(st.WALBytes))})
	}
	slices.SortFunc(out.Statements, func(a, b Statement) int { return cmp.Compare(b.ExecUsPerOp, a.ExecUsPerOp) })
	return out
}

// addStatements adds one run's pg_stat_statements to the side's.
func (s *sideTotals) addStatements(run map[string]*statementStats) {
	if s.statements == nil {
		s.statements = map[string]*statementStats{}
	}
	for _, st := range run {
		addStatement(s.statements, *st)
	}
}

// Bench runs the rounds and builds the report. Progress goes to out.
func Bench(ctx context.Context, o Options, env Env, out io.Writer) (*Report, error) {
	o.Keys = strconv.FormatUint(rand.Uint64()>>23, 36) // 41 bits, 8 characters
	rep := newReport(o)
	cofferRunner, err := env.cofferRunner(o)
	if err != nil {
		return nil, err
	}
	baseline := env.baseline()
	if err := check(ctx, cofferRunner, baseline); err != nil {
		return nil, err
	}
	if baseline != nil {
		rep.BaselineName = baseline.Name()
	}
	t := totals{hist: newHistogram(), baseHist: newHistogram()}
	if o.Preload > 0 {
		if rep.Preload, err = preload(ctx, o, env, out); err != nil {
			return nil, err
		}
	}
	cofferRuns, baseRuns := o, o
	if env.CofferPID != 0 {
		cofferRuns.CPUPIDs = []int{env.CofferPID}
	}
	if o.Workload == Batch {
		// The baseline has no batch: it writes one grant per
		// transaction, as a caller without a batch API would.
		baseRuns.Workload = Write
	}
	for i := 0; i < o.Rounds && !o.Stopped(); i++ {
		res, err := runSide(ctx, cofferRuns, env, cofferRunner, i, &t.coffer, out)
		if err != nil {
			return nil, err
		}
		t.hist.Merge(res.hist)
		rep.Runs = append(rep.Runs, res)
		rep.Writes += res.writes
		rep.Moves = append(rep.Moves, res.moves...)
		for code, n := range res.Errors {
			rep.Errors[code] += n
		}
		round := Round{CofferTPS: res.TPS}
		if baseline != nil && !o.Stopped() {
			b, err := runSide(ctx, baseRuns, env, baseline, i, &t.baseline, out)
			if err != nil {
				return nil, err
			}
			t.baseHist.Merge(b.hist)
			rep.Runs = append(rep.Runs, b)
			round.BaselineTPS, round.Ratio = b.TPS, ratio(res.TPS, b.TPS)
			t.ratios = append(t.ratios, round.Ratio)
		}
		rep.Rounds = append(rep.Rounds, round)
		rep.TPS += res.TPS
	}
	rep.Interrupted = o.Stopped()
	if len(rep.Rounds) == 0 {
		return nil, errors.New("interrupted before the first run")
	}
	rep.conclude(o, env, &t)
	return rep, nil
}

// totals are what a bench's rounds add up, per side.
type totals struct {
	coffer, baseline sideTotals
	hist, baseHist   *hdrhistogram.Histogram
	// ratios are each round's coffer/baseline throughput, when the
	// baseline ran.
	ratios []float64
}

// cofferRunner is what runs coffer's side: its target, or the env's own
// runner, moving shards meanwhile with Options.Moves.
func (e Env) cofferRunner(o Options) (Runner, error) {
	var r Runner = targetRunner{"coffer", e.Coffer}
	if e.CofferRunner != nil {
		r = e.CofferRunner
	}
	if len(o.Moves) > 0 {
		if e.Mover == nil || e.Router == nil {
			return nil, errors.New("shard moves need a Mover and a Router")
		}
		r = moveRunner{Runner: r, env: e, shards: o.Moves}
	}
	return r, nil
}

// conclude fills the report's figures from the rounds' totals.
func (rep *Report) conclude(o Options, env Env, t *totals) {
	rep.TPS /= float64(len(rep.Rounds))
	rep.Latency = summarize(t.hist)
	rep.Coffer = t.coffer.side()
	rep.WALBytesPerOp = rep.Coffer.WALBytesPerOp
	rep.TrxWritten = t.coffer.trx
	if len(t.ratios) > 0 { // the baseline ran
		rep.RatioMedian = median(t.ratios)
		side := t.baseline.side()
		rep.Baseline = &side
		if rep.Coffer.PostgresCPUPer1000Op > 0 {
			rep.CapacityRatio = side.PostgresCPUPer1000Op / rep.Coffer.PostgresCPUPer1000Op
		}
		bl := summarize(t.baseHist)
		rep.BaselineLat = &bl
	}
	if env.CofferPID != 0 {
		rep.RSSPeakBytes = rssPeakBytes(env.CofferPID)
	}
	if o.Ops > 0 && len(rep.Runs) > 0 {
		rep.Decay = decay(o.Ops, rep.Runs[0].Tenths, rep.Runs[0].TenthsCPU)
	}
}

// newReport is the report's header: what the runs are.
func newReport(o Options) *Report {
	rep := &Report{Workload: o.Workload, Transport: o.Transport, Clients: o.Clients, Rate: o.Rate, Scale: o.Scale,
		DurationS: o.Duration.Seconds(), Errors: map[string]int64{}}
	if o.Workload == Batch {
		rep.BatchSize = o.BatchSize
	}
	return rep
}

// check tries each side once before the runs, so that a wrong key or an
// unreachable target stops the bench before its runs.
func check(ctx context.Context, cofferRunner, baseline Runner) error {
	if err := cofferRunner.Check(ctx); err != nil {
		return fmt.Errorf("coffer: %w", err)
	}
	if baseline != nil {
		if err := baseline.Check(ctx); err != nil {
			return fmt.Errorf("the baseline: %w", err)
		}
	}
	return nil
}

// preload grants o.Preload times through coffer, unmeasured, and returns
// the grants done.
func preload(ctx context.Context, o Options, env Env, out io.Writer) (int64, error) {
	cfg := o.RunConfig
	cfg.Workload, cfg.Ops, cfg.Label, cfg.Out, cfg.Seed = Write, o.Preload, "preload", out, o.Seed+7_777_777
	cfg.Warmup = 0
	res, err := Run(ctx, cfg, env.Coffer)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(out, "preload   done: %d grants in %.1fs, errors %v\n", res.Ops, res.Elapsed, res.Errors)
	return res.Ops, nil
}

// runSide runs round number round (from 0) of a side.
func runSide(ctx context.Context, o Options, env Env, side Runner, round int, totals *sideTotals, out io.Writer) (*Result, error) {
	label := fmt.Sprintf("%s#%d", side.Name(), round+1)
	before, err := env.read(ctx)
	if err != nil {
		return nil, err
	}
	statements := o.Statements && env.Router != nil
	if statements {
		if err := resetStatements(ctx, env.Router); err != nil {
			return nil, err
		}
	}
	cfg := o.RunConfig
	cfg.Label, cfg.Out = label, out
	// Each round draws other players and keys, the same for both sides.
	cfg.Seed += uint64(round) * 1_000_003
	res, err := side.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if statements {
		run, err := readStatements(ctx, env.Router)
		if err != nil {
			return nil, err
		}
		totals.addStatements(run)
	}
	after, err := env.read(ctx)
	if err != nil {
		return nil, err
	}
	totals.add(before, after, res.answered)
	fmt.Fprintf(out, "%-9s done: %d ops in %.1fs, %.0f tps, p99 %.2f ms, errors %v\n", label, res.Ops, res.Elapsed, res.TPS, res.Latency.P99, res.Errors)
	return res, nil
}

// preflight reads one balance through t, so that a wrong address, key or
// deployment fails at once rather than as a run of errors.
func preflight(ctx context.Context, t Target) error {
	if code := t.Do(ctx, &Op{Call: CallRead, Namespace: 1, Player: 1}); code != "" {
		return fmt.Errorf("a balance read (namespace 1, player 1) failed: %s; check the address, --transport, --api-key, and that the deployment has the bench's namespaces and currencies (docs/benchmarks.md)", code)
	}
	return nil
}

// decay compares the throughput of the first and last tenth of ops, from
// the seconds each tenth took and coffer's CPU seconds in each (if read).
func decay(ops int64, tenths, cpu []float64) *Decay {
	if len(tenths) < 10 || tenths[0] <= 0 || tenths[9] <= 0 {
		return nil
	}
	per := float64(ops / 10)
	d := &Decay{Ops: ops}
	for _, sec := range tenths {
		d.TenthsTPS = append(d.TenthsTPS, per/sec)
	}
	if len(cpu) == len(tenths) {
		for _, sec := range cpu {
			d.TenthsCofferCPU = append(d.TenthsCofferCPU, 1000*sec/per)
		}
	}
	d.FirstTPS, d.LastTPS = d.TenthsTPS[0], d.TenthsTPS[9]
	d.Ratio = d.LastTPS / d.FirstTPS
	return d
}

// TargetRunner is a Runner that drives t op by op, as Bench drives
// Coffer; name names its side.
func TargetRunner(name string, t Target) Runner { return targetRunner{name, t} }

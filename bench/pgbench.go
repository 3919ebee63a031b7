package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
)

// Pgbench is the baseline run by PostgreSQL's own benchmark tool: the
// write workload's grants as a pgbench script of the SQL baseline's
// statements (pgbenchTransaction), drawn as the workload draws
// them. Each shard database gets one pgbench process, with one script per
// shard weighted by the shard's players, and a share of the run's clients
// as large as its share of the players (at least one).
type Pgbench struct {
	bin    string
	router *shard.Router
	// players is how many players each shard holds, by shard id.
	players []int64
}

// NewPgbench sets the baseline's tables up for scale (not measured: call
// it before the runs) and returns the baseline, run by the pgbench binary
// bin.
func NewPgbench(ctx context.Context, bin string, router *shard.Router, scale float64) (*Pgbench, error) {
	players, err := NewBaseline(router).setupPgbench(ctx, int64(PlayersPerScale*scale))
	if err != nil {
		return nil, err
	}
	return &Pgbench{bin: bin, router: router, players: players}, nil
}

// Name implements Runner.
func (p *Pgbench) Name() string { return "pgbench" }

// Check implements Runner: the binary runs.
func (p *Pgbench) Check(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, p.bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %v: %s", p.bin, err, bytes.TrimSpace(out))
	}
	return nil
}

// pgbenchProcess is one database's pgbench.
type pgbenchProcess struct {
	cmd *exec.Cmd
	db  int
	// stderr is what pgbench wrote there but its progress lines, once
	// read is closed.
	stderr bytes.Buffer
	read   chan struct{}
}

// Run implements Runner: one pgbench per database for the warmup and the
// duration together, then the per-transaction logs are read, and the
// transactions that began after the warmup measured.
func (p *Pgbench) Run(ctx context.Context, cfg RunConfig) (*Result, error) {
	if cfg.Workload != Write || cfg.Rate > 0 || cfg.Ops > 0 {
		return nil, errors.New("pgbench runs the write workload, in a closed loop for a duration")
	}
	dir, err := os.MkdirTemp("", "coffer-pgbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	keys := "p" + cfg.Keys + "-" + strconv.FormatUint(cfg.Seed, 36) + "-"
	begin := time.Now()
	var procs []*pgbenchProcess
	for i := range p.router.Map().Databases() {
		proc, err := p.start(ctx, cfg, dir, i, keys)
		if err != nil {
			stopAll(procs)
			waitAll(procs)
			return nil, err
		}
		if proc != nil {
			procs = append(procs, proc)
		}
	}
	// Stop interrupts them: pgbench then logs and reports what it did.
	finished := make(chan struct{})
	go func() {
		select {
		case <-cfg.Stop:
			stopAll(procs)
		case <-finished:
		}
	}()
	err = waitAll(procs)
	close(finished)
	if err != nil && !cfg.Stopped() {
		return nil, err
	}
	return readPgbenchLogs(dir, cfg, begin)
}

// waitAll waits for the processes to exit and returns their failures.
func waitAll(procs []*pgbenchProcess) error {
	var errs []error
	for _, proc := range procs {
		<-proc.read // Wait closes the pipe
		if err := proc.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("pgbench on database %d: %v: %s", proc.db, err, strings.TrimSpace(proc.stderr.String())))
		}
	}
	return errors.Join(errs...)
}

// start starts the pgbench of database db, or returns nil if it holds no
// players.
func (p *Pgbench) start(ctx context.Context, cfg RunConfig, dir string, db int, keys string) (*pgbenchProcess, error) {
	var total, here int64
	var scripts []string
	for s, n := range p.players {
		total += n
		id := coffer.ShardID(s)
		if p.router.DatabaseIndex(id) != db || n == 0 {
			continue
		}
		here += n
		path := filepath.Join(dir, fmt.Sprintf("shard%d.sql", s))
		if err := os.WriteFile(path, []byte(pgbenchScript(id, n, keys)), 0o644); err != nil {
			return nil, err
		}
		scripts = append(scripts, "-f", path+"@"+strconv.FormatInt(n, 10))
	}
	if here == 0 {
		return nil, nil
	}
	clients := max(1, int(math.Round(float64(cfg.Clients)*float64(here)/float64(total))))
	seconds := int(math.Ceil((cfg.Warmup + cfg.Duration).Seconds()))
	args := []string{"--no-vacuum", "--protocol=prepared", "--client=" + strconv.Itoa(clients),
		"--jobs=" + strconv.Itoa(min(clients, runtime.NumCPU())), "--time=" + strconv.Itoa(seconds),
		"--log", "--log-prefix=" + filepath.Join(dir, "db"+strconv.Itoa(db)), "--define=n=0"}
	if cfg.Progress > 0 && cfg.Out != nil {
		args = append(args, "--progress="+strconv.Itoa(max(1, int(cfg.Progress.Seconds()))))
	}
	conf := p.router.Map().Databases()[db].Config
	password := conf.Password
	conf.Password = "" // in the environment, not on the command line
	args = append(append(args, scripts...), conf.ConnString(3))
	proc := &pgbenchProcess{db: db, cmd: exec.CommandContext(ctx, p.bin, args...), read: make(chan struct{})}
	proc.cmd.Dir = dir
	proc.cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
	stderr, err := proc.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := proc.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgbench: %w", err)
	}
	go func() {
		defer close(proc.read)
		forwardProgress(stderr, &proc.stderr, cfg, db)
	}()
	return proc, nil
}

// pgbenchScript draws a grant as the write workload does (Generator.Next)
// and writes it on shard id, whose players are numbered 0 … players-1.
func pgbenchScript(id coffer.ShardID, players int64, keys string) string {
	return fmt.Sprintf(`\set ns random_zipfian(1, %d, %g)
\set currency random_zipfian(1, %d, %g)
\set amount random(1, 10000)
\set i random(0, %d)
\set n :n + 1
`, Namespaces, zipfS, Currencies, zipfS, players-1) + pgbenchTransaction(id, keys)
}

// stderrKeptMax bounds what is kept of a pgbench's standard error: its
// first lines say why it failed.
const stderrKeptMax = 16 << 10

// forwardProgress copies pgbench's progress lines to cfg.Out, labelled,
// and keeps the first stderrKeptMax bytes of the rest in keep.
func forwardProgress(stderr io.Reader, keep *bytes.Buffer, cfg RunConfig, db int) {
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "progress: "); ok && cfg.Out != nil {
			fmt.Fprintf(cfg.Out, "%-9s db%d %s\n", cfg.Label, db, rest)
			continue
		}
		if keep.Len() < stderrKeptMax {
			keep.WriteString(line + "\n")
		}
	}
}

func stopAll(procs []*pgbenchProcess) {
	for _, proc := range procs {
		_ = proc.cmd.Process.Signal(syscall.SIGINT)
	}
}

// pgbenchTrx is one transaction of a per-transaction log.
type pgbenchTrx struct {
	end     time.Time
	latency time.Duration
	failed  bool
}

// readPgbenchLogs reads the per-transaction logs of a run that began at
// begin: those that began after the warmup are measured, in the order they
// ended; all are answered, and every one that did not fail is a write.
func readPgbenchLogs(dir string, cfg RunConfig, begin time.Time) (*Result, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "db*.*"))
	if err != nil {
		return nil, err
	}
	var trxs []pgbenchTrx
	for _, path := range paths {
		if trxs, err = readPgbenchLog(path, trxs); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(trxs, func(a, b pgbenchTrx) int { return a.end.Compare(b.end) })
	start := begin.Add(cfg.Warmup)
	rec := newRecorder(start)
	next, last := start.Add(time.Second), start
	var writes int64
	for _, t := range trxs {
		code := ""
		if t.failed {
			code = "sql_error"
		} else {
			writes++
		}
		if t.end.Add(-t.latency).Before(start) {
			continue // the warmup's
		}
		for !t.end.Before(next) {
			rec.tick(next)
			next = next.Add(time.Second)
		}
		rec.record(t.latency, code, 1)
		last = t.end
	}
	elapsed := last.Sub(start)
	if elapsed <= 0 {
		elapsed = cfg.Duration
	}
	return &Result{Label: cfg.Label, Ops: rec.ops, Elapsed: elapsed.Seconds(), TPS: float64(rec.ops) / elapsed.Seconds(),
		Latency: summarize(rec.total), Errors: rec.errors, Series: rec.series, hist: rec.total,
		writes: writes, answered: int64(len(trxs))}, nil
}

// readPgbenchLog appends the transactions of one log to trxs. A line is
// client, transaction, latency µs (or "failed"), script, end s, end µs.
func readPgbenchLog(path string, trxs []pgbenchTrx) ([]pgbenchTrx, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		var endS, endUs int64
		var err1, err2 error
		if len(fields) >= 6 {
			endS, err1 = strconv.ParseInt(fields[4], 10, 64)
			endUs, err2 = strconv.ParseInt(fields[5], 10, 64)
		}
		if len(fields) < 6 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("pgbench log %s: %q is not a transaction", filepath.Base(path), sc.Text())
		}
		t := pgbenchTrx{end: time.Unix(endS, endUs*1000)}
		us, err := strconv.ParseInt(fields[2], 10, 64)
		t.latency, t.failed = time.Duration(us)*time.Microsecond, err != nil
		trxs = append(trxs, t)
	}
	return trxs, sc.Err()
}

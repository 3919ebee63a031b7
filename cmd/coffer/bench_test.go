package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cofferhq/coffer/bench"
	"github.com/cofferhq/coffer/internal/cgroup"
)

// TestBenchSelf runs a short `coffer bench --self` with the SQL baseline
// and checks the report: produced in every format, numbers consistent, no
// errors, every acknowledged write a trx row, the audit clean.
func TestBenchSelf(t *testing.T) {
	bin := cofferBinary(t)
	dir := t.TempDir()
	jsonPath, reportDir := filepath.Join(dir, "bench.json"), filepath.Join(dir, "report")
	cmd := exec.Command(bin, "bench", "--self", "--workload", "write", "--clients", "4", "--duration", "2s",
		"--rounds", "2", "--baseline", "sql", "--progress", "1s", "--warmup", "1s", "--scale", "0.01", "--statements", "--committers", "1", "--readers", "2", "--json", jsonPath, "--report", reportDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coffer bench: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "median ratio coffer/sql") || !strings.Contains(string(out), "coffer#1") ||
		!strings.Contains(string(out), "(PostgreSQL's capacity: coffer/sql ") {
		t.Fatalf("terminal report:\n%s", out)
	}
	raw, err := os.ReadFile(jsonPath)
	must(t, err)
	var rep bench.Report
	must(t, json.Unmarshal(raw, &rep))
	l := rep.Latency
	switch {
	case rep.Workload != bench.Write || rep.Clients != 4 || len(rep.Rounds) != 2:
		t.Fatalf("header: %s", raw)
	case rep.Rounds[0].CofferTPS <= 0 || rep.Rounds[0].BaselineTPS <= 0 || rep.Rounds[1].Ratio <= 0 || rep.RatioMedian <= 0:
		t.Fatalf("rounds: %+v, median %v", rep.Rounds, rep.RatioMedian)
	case !(0 < l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max):
		t.Fatalf("latency not ordered: %+v", l)
	case len(rep.Errors) != 0:
		t.Fatalf("errors: %v", rep.Errors)
	case rep.Writes == 0 || rep.Writes != rep.TrxWritten:
		t.Fatalf("writes acknowledged %d, trx rows written %d", rep.Writes, rep.TrxWritten)
	case !rep.Audited || rep.AuditViolations != 0:
		t.Fatalf("audit: ran %v, %d violations", rep.Audited, rep.AuditViolations)
	case rep.PostgresSettings["shared_buffers"] != quarterOfMemory(1) || rep.PostgresSettings["shared_preload_libraries"] != "pg_stat_statements" ||
		rep.PostgresSettings["pg_stat_statements.track"] != "all" ||
		!strings.Contains(string(out), "PostgreSQL: checkpoint_timeout=30min max_wal_size=16GB pg_stat_statements.track=all shared_buffers="):
		t.Fatalf("PostgreSQL settings: %v\n%s", rep.PostgresSettings, out)
	case rep.Committers != 1 || rep.Readers != 2 || !strings.Contains(string(out), "coffer serve: batches.committers=1 batches.readers=2\n"):
		t.Fatalf("committers %d, readers %d\n%s", rep.Committers, rep.Readers, out)
	case rep.Confinement == nil || rep.Confinement.Servers != 1 || rep.Confinement.Databases != 2 || rep.Confinement.PostgresCPUs != "" ||
		rep.Confinement.CPUs == "" || !strings.Contains(string(out), "CPUs: shared: PostgreSQL (1 server(s), 2 database(s)), coffer serve and the bench on CPUs "+rep.Confinement.CPUs+"\n"):
		t.Fatalf("confinement %+v\n%s", rep.Confinement, out)
	case rep.WALBytesPerOp <= 0 || rep.Baseline == nil || rep.Baseline.WALBytesPerOp <= 0 || rep.RSSPeakBytes <= 0 || rep.Coffer.CofferCPUPer1000Op <= 0 ||
		rep.CapacityRatio != rep.Baseline.PostgresCPUPer1000Op/rep.Coffer.PostgresCPUPer1000Op || rep.CapacityRatio <= 0:
		t.Fatalf("costs: %s", raw)
	case rep.Coffer.TransactionsPerOp <= 0 || rep.Coffer.TransactionsPerOp > 1.01 || rep.Baseline.TransactionsPerOp < 0.99 || rep.Baseline.TransactionsPerOp > 1.01:
		t.Fatalf("transactions per write: coffer %.3f, want at most one; baseline %.3f, want one", rep.Coffer.TransactionsPerOp, rep.Baseline.TransactionsPerOp)
	}
	var ops int64
	for _, r := range rep.Runs {
		if strings.HasPrefix(r.Label, "coffer") {
			ops += r.Ops
		}
	}
	// Writes include those of the unmeasured warmups, and so do the ops
	// the costs are divided by: the counters are read around whole runs.
	if ops == 0 || ops >= rep.Writes || rep.Coffer.Ops != rep.Writes {
		t.Fatalf("coffer ops measured %d, writes acknowledged %d, costed %d", ops, rep.Writes, rep.Coffer.Ops)
	}
	// pg_stat_statements: the baseline inserts one trx per write; coffer
	// one trx insert per batch of writes and shard (at most one per
	// write), and at most ten statements per write: BEGIN, the lock
	// timeout, per shard the lock, lots and keys, the trx, op, lot and
	// player rows, COMMIT.
	for side, s := range map[string]*bench.Side{"INSERT INTO trx_N ": &rep.Coffer, "INSERT INTO bench_trx_N ": rep.Baseline} {
		if calls := callsPerOp(s, side); calls <= 0 || calls > 1.01 || s.ExecUsPerOp <= 0 || (s == rep.Baseline && calls < 1) {
			t.Fatalf("statements: no %q once per op or batch: %+v", side, s)
		}
	}
	if sent := writeStatementsPerOp(&rep.Coffer); sent <= 0 || sent > 10 || rep.Baseline.StatementsPerOp < 5 {
		t.Fatalf("statements sent per write: coffer %.3f, want at most 10; baseline %.3f, want 6", sent, rep.Baseline.StatementsPerOp)
	}
	for _, f := range []string{"throughput.png", "p99.png", "latency.png"} {
		b, err := os.ReadFile(filepath.Join(reportDir, f))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("%s: not a PNG (%v)", f, err)
		}
	}
	md, err := os.ReadFile(filepath.Join(reportDir, "report.md"))
	if err != nil || !strings.Contains(string(md), "![throughput](throughput.png)") {
		t.Fatalf("report.md: %v", err)
	}
}

// benchSelf runs `coffer bench --self` with args and returns its output
// and its report, as JSON and read.
func benchSelf(t *testing.T, args ...string) (out, raw []byte, rep bench.Report) {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	out, err := exec.Command(cofferBinary(t), append([]string{"bench", "--self", "--json", jsonPath}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("coffer bench: %v\n%s", err, out)
	}
	raw, err = os.ReadFile(jsonPath)
	must(t, err)
	must(t, json.Unmarshal(raw, &rep))
	return out, raw, rep
}

// TestBenchSelfTrace runs a short `coffer bench --self --trace`: coffer
// serve traces every call to the bench's own OTLP receiver, which gets a
// call's span and its queue wait, at least, for every write.
func TestBenchSelfTrace(t *testing.T) {
	out, _, rep := benchSelf(t, "--trace", "--workload", "write", "--clients", "2", "--duration", "1s",
		"--rounds", "1", "--warmup", "1s", "--scale", "0.01", "--committers", "1", "--readers", "1")
	m := regexp.MustCompile(`coffer bench: (\d+) spans received over OTLP`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no count of spans received:\n%s", out)
	}
	if spans, _ := strconv.ParseInt(string(m[1]), 10, 64); rep.Writes == 0 || spans < 2*rep.Writes {
		t.Fatalf("%d spans received for %d writes, want two or more a write:\n%s", spans, rep.Writes, out)
	}
}

// TestBenchSelfFeed runs a short `coffer bench --self --feed`: the coffer
// side's writes, and only those, come out of the feed (the baseline's run
// with it off), and the report has both sides' costs and the lag.
func TestBenchSelfFeed(t *testing.T) {
	out, raw, rep := benchSelf(t, "--feed", "--workload", "write", "--clients", "4", "--duration", "2s",
		"--rounds", "2", "--progress", "1s", "--warmup", "1s", "--scale", "0.01")
	switch f := rep.Feed; {
	case !strings.Contains(string(out), "median ratio coffer/feed-off") || !strings.Contains(string(out), "change feed: "):
		t.Fatalf("terminal report:\n%s", out)
	case rep.BaselineName != "feed-off" || rep.Baseline == nil || rep.Baseline.Ops == 0 || rep.Baseline.WALBytesPerOp <= 0 || rep.Coffer.PostgresCPUPer1000Op <= 0:
		t.Fatalf("sides: %s", raw)
	case rep.Baseline.TrxWritten != rep.Baseline.Ops:
		t.Fatalf("the feed-off side wrote %d trx rows in %d ops: its writes must be its own, not replays", rep.Baseline.TrxWritten, rep.Baseline.Ops)
	case f == nil || rep.Writes == 0 || int64(f.Events) != rep.Writes:
		t.Fatalf("the feed stored %+v events; coffer's side acknowledged %d writes (the baseline's runs have the feed off)", f, rep.Writes)
	case !(0 < f.Lag.P50 && f.Lag.P50 <= f.Lag.P99 && f.Lag.P99 <= f.Lag.Max) || f.RelayCPUPer1000Events <= 0:
		t.Fatalf("feed figures: %+v", f)
	case rep.PostgresSettings["wal_level"] != "logical" || !rep.Audited || rep.AuditViolations != 0:
		t.Fatalf("settings %v, audit %v %d", rep.PostgresSettings, rep.Audited, rep.AuditViolations)
	}
}

// callsPerOp is how many statements per op ran insert, which coffer's
// write statements carry in a WITH of their own (one text per set of
// tables a batch writes), the baseline's leads.
func callsPerOp(s *bench.Side, insert string) float64 {
	var calls float64
	for _, st := range s.Statements {
		if !st.Nested && strings.Contains(st.Query, insert) {
			calls += st.CallsPerOp
		}
	}
	return calls
}

// writeStatementsPerOp is the statements a side sent per op, less the
// sweepers' (each pass reads every shard, whatever the writes) and the
// bench's own reset.
func writeStatementsPerOp(s *bench.Side) float64 {
	sent := s.StatementsPerOp
	for _, st := range s.Statements {
		if !st.Nested && (strings.Contains(st.Query, " WHERE status = ") || strings.Contains(st.Query, " WHERE expires_at <= now()") ||
			strings.HasPrefix(st.Query, "SELECT pg_stat_statements_reset()")) {
			sent -= st.CallsPerOp
		}
	}
	return sent
}

// TestBenchSelfBatchAgainstPgbench runs a short `coffer bench --self` of
// the batch workload against the pgbench baseline: its ops are grants
// (each one trx insert), pgbench's are its script's transactions (each one
// trx insert of the baseline's), every acknowledged grant is a trx row,
// the audit is clean.
func TestBenchSelfBatchAgainstPgbench(t *testing.T) {
	bin := cofferBinary(t)
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	cmd := exec.Command(bin, "bench", "--self", "--workload", "batch", "--batch-size", "20", "--clients", "2", "--duration", "2s",
		"--rounds", "1", "--baseline", "pgbench", "--progress", "1s", "--warmup", "1s", "--scale", "0.01", "--statements", "--json", jsonPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coffer bench: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "median ratio coffer/pgbench") || !strings.Contains(string(out), "pgbench#1 db0 ") {
		t.Fatalf("terminal report:\n%s", out)
	}
	raw, err := os.ReadFile(jsonPath)
	must(t, err)
	var rep bench.Report
	must(t, json.Unmarshal(raw, &rep))
	switch {
	case rep.Workload != bench.Batch || rep.BatchSize != 20 || rep.BaselineName != "pgbench" || len(rep.Rounds) != 1:
		t.Fatalf("header: %s", raw)
	case rep.Rounds[0].CofferTPS <= 0 || rep.Rounds[0].BaselineTPS <= 0 || rep.RatioMedian <= 0 || rep.Baseline == nil || rep.BaselineLat.P50 <= 0:
		t.Fatalf("rounds: %+v, baseline %+v", rep.Rounds, rep.Baseline)
	case len(rep.Errors) != 0 || len(rep.Runs[1].Errors) != 0:
		t.Fatalf("errors: %v, pgbench's %v", rep.Errors, rep.Runs[1].Errors)
	case rep.Writes == 0 || rep.Writes != rep.TrxWritten || rep.Coffer.Ops != rep.Writes:
		t.Fatalf("grants acknowledged %d, trx rows written %d, costed %d", rep.Writes, rep.TrxWritten, rep.Coffer.Ops)
	case !rep.Audited || rep.AuditViolations != 0:
		t.Fatalf("audit: ran %v, %d violations", rep.Audited, rep.AuditViolations)
	// A call's 20 grants are one transaction per database (two), each of
	// pgbench's one of its own.
	case rep.Coffer.TransactionsPerOp <= 0 || rep.Coffer.TransactionsPerOp > 0.15 || rep.Baseline.TransactionsPerOp < 0.99 || rep.Baseline.TransactionsPerOp > 1.01:
		t.Fatalf("transactions per grant: coffer %.3f, want about 0.1; pgbench %.3f, want 1", rep.Coffer.TransactionsPerOp, rep.Baseline.TransactionsPerOp)
	}
	// pgbench inserts a trx per grant; coffer one per batch and shard:
	// 20 grants over 16 shards share at least four.
	for side, s := range map[string]*bench.Side{"INSERT INTO trx_N ": &rep.Coffer, "INSERT INTO bench_trx_N ": rep.Baseline} {
		if calls := callsPerOp(s, side); calls > 1.01 || calls < 0.99 && s == rep.Baseline || calls > 0.81 && s == &rep.Coffer {
			t.Fatalf("statements: %q %.2f per op: %+v", side, calls, s.Statements)
		}
	}
	// The four writes; pg_stat_statements does not see the BEGIN and END
	// that pgbench sends as prepared statements.
	if rep.Baseline.StatementsPerOp < 4 {
		t.Fatalf("pgbench sent %.2f statements per write, want the four writes", rep.Baseline.StatementsPerOp)
	}
}

// The bench's server gets the buffer cache operations.md recommends: a
// quarter of the machine's memory.
func TestQuarterOfMemory(t *testing.T) {
	raw, err := os.ReadFile("/proc/meminfo")
	must(t, err)
	var kb int64
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err = strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			must(t, err)
		}
	}
	mb, err := strconv.ParseInt(strings.TrimSuffix(quarterOfMemory(1), "MB"), 10, 64)
	if err != nil || kb == 0 || mb < kb/4/1024-1 || mb > kb/4/1024+1 {
		t.Fatalf("quarterOfMemory(1) = %s, MemTotal %d kB", quarterOfMemory(1), kb)
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--workload", "write"},
		{"--self", "--target", "http://x"},
		{"--self", "--workload", "nap"},
		{"--self", "--workload", "hold", "--baseline", "sql"},
		{"--self", "--workload", "read", "--baseline", "pgbench"},
		{"--self", "--baseline", "pgbench", "--rate", "100"},
		{"--self", "--baseline", "pgbench", "--decay", "1000"},
		{"--self", "--baseline", "pgsql"},
		{"--target", "http://x", "--api-key", "k", "--baseline", "pgbench"},
		{"--self", "--workload", "batch", "--batch-size", "0"},
		{"--self", "--workload", "batch", "--batch-size", "1001"},
		{"--self", "--workload", "batch", "--rate", "10"},
		{"--self", "--transport", "smoke"},
		{"--target", "http://x"},
		{"--target", "http://x", "--api-key", "k", "--statements"},
		{"--target", "http://x", "--api-key", "k", "--pg-set", "shared_buffers=2GB"},
		{"--self", "--pg-set", "shared_buffers"},
		{"--self", "--json", "/nonexistent/bench.json"},
		{"--self", "--shards", "3"},
		{"--self", "--shards", "0"},
		{"--target", "http://x", "--api-key", "k", "--shards", "16"},
		{"--self", "--committers", "0"},
		{"--self", "--readers", "0"},
		{"--target", "http://x", "--api-key", "k", "--committers", "2"},
		{"--target", "http://x", "--api-key", "k", "--readers", "2"},
		{"--target", "http://x", "--api-key", "k", "--pg-cpus", "1"},
		{"--target", "http://x", "--api-key", "k", "--pg-cpu-quota", "0.5"},
		{"--target", "http://x", "--api-key", "k", "--databases", "1,2"},
		{"--target", "http://x", "--api-key", "k", "--trace"},
		{"--target", "http://x", "--api-key", "k", "--feed"},
		{"--self", "--feed", "--baseline", "sql"},
		{"--self", "--feed", "--pg-set", "wal_level=replica"},
		{"--self", "--feed", "--databases", "1,2"},
	} {
		if code, _, _ := run(t, append([]string{"bench"}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// The CPU flags that do not fit: each refused before anything runs, with
// what is wrong.
func TestBenchCPUFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pg-cpus", "-1"}, "must not be negative"},
		{[]string{"--pg-cpus", "1000"}, "needs one at least for itself and coffer serve"},
		{[]string{"--pg-cpu-quota", "0.05"}, "at least 0.1 cores"},
		{[]string{"--pg-cpu-quota", "1000"}, "more than the"},
		{[]string{"--databases", "2,1"}, "ascending"},
		{[]string{"--databases", "0"}, "not a list of server counts"},
		{[]string{"--databases", "1,x"}, "not a list of server counts"},
		{[]string{"--databases", "17"}, "not a list of server counts"},
		{[]string{"--databases", "1,3"}, "16 shards do not spread evenly over 3"},
		{[]string{"--pg-cpus", "1", "--pg-cpu-quota", "0.5", "--databases", "1,4"}, "--pg-cpu-quota 0.5 × 4 servers is more than --pg-cpus 1"},
	} {
		code, _, errOut := run(t, append([]string{"bench", "--self"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestBenchSelfConfined runs `coffer bench --self --databases 1,2` with
// every PostgreSQL server on the last CPU with half a core each, the bench
// and coffer serve on the others: the CPUs read back from the processes
// after the runs are those (the backends forked during the runs
// included), each stack is reported and audited, the scale-out table
// compares them, and no cgroup is left. Without root and cgroup v1 it is
// skipped, and make test says so.
func TestBenchSelfConfined(t *testing.T) {
	if err := cgroup.Check(true, true); err != nil {
		t.Skip(err)
	}
	allowed, err := cgroup.AllowedCPUs(os.Getpid())
	must(t, err)
	cpus, err := cgroup.ParseList(allowed)
	must(t, err)
	if len(cpus) < 2 {
		t.Fatalf("--pg-cpus needs two CPUs at least; this test may use %s", allowed)
	}
	last, rest := cgroup.FormatList(cpus[len(cpus)-1:]), cgroup.FormatList(cpus[:len(cpus)-1])
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	cmd := exec.Command(cofferBinary(t), "bench", "--self", "--pg-cpus", "1", "--pg-cpu-quota", "0.5", "--databases", "1,2", "--shards", "4",
		"--workload", "write", "--clients", "4", "--duration", "2s", "--rounds", "1", "--progress", "0", "--warmup", "1s", "--scale", "0.01", "--json", jsonPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coffer bench: %v\n%s", err, out)
	}
	for _, c := range []string{"cpuset", "cpu"} {
		if _, err := os.Stat(filepath.Join(cgroup.Root, c, "coffer-bench-"+strconv.Itoa(cmd.Process.Pid))); !os.IsNotExist(err) {
			t.Errorf("the bench's %s cgroup is left: %v", c, err)
		}
	}
	raw, err := os.ReadFile(jsonPath)
	must(t, err)
	var so bench.ScaleOut
	must(t, json.Unmarshal(raw, &so))
	if len(so.Stacks) != 2 || len(so.Points) != 2 || so.Points[0].Ratio != 1 || so.Points[1].Ratio <= 0 || so.Points[1].Cores.PostgresBudget != 1 {
		t.Fatalf("scale-out: %+v", so.Points)
	}
	for i, rep := range so.Stacks {
		c, want := rep.Confinement, bench.Confinement{Servers: i + 1, Databases: i + 1, CPUs: allowed, PostgresCPUs: last, LoadCPUs: rest,
			PostgresCPUQuota: 0.5, PostgresCPUsSeen: last, LoadCPUsSeen: rest}
		switch {
		case c == nil || *c != want:
			t.Fatalf("stack %d: confinement %+v, want %+v", i, c, want)
		case rep.TPS <= 0 || len(rep.Errors) != 0 || rep.Writes == 0 || rep.Writes != rep.TrxWritten || !rep.Audited || rep.AuditViolations != 0:
			t.Fatalf("stack %d: tps %.0f, errors %v, writes %d, trx rows %d, audit %v %d", i, rep.TPS, rep.Errors, rep.Writes, rep.TrxWritten, rep.Audited, rep.AuditViolations)
		case rep.Coffer.PostgresCPUPer1000Op <= 0 || rep.Coffer.CofferCPUPer1000Op <= 0:
			t.Fatalf("stack %d: CPU per op %+v", i, rep.Coffer)
		}
	}
	for _, line := range []string{
		fmt.Sprintf("CPUs: PostgreSQL (2 server(s), 2 database(s)) on CPUs %s (seen: %s), 0.50 cores each (CFS quota); coffer serve and the bench on CPUs %s (seen: %s)\n", last, last, rest, rest),
		"PostgreSQL quota ran out %", "scale-out: write, 4 clients", "cores busy in coffer's runs: PostgreSQL ",
	} {
		if !strings.Contains(string(out), line) {
			t.Fatalf("no %q in the report:\n%s", line, out)
		}
	}
}

// TestBenchSelfMove runs `coffer bench --self --databases 2 --move 1`:
// shard 1 goes to the other server's database and back while the load
// goes on, and the report gives each move's pause, the other shards'
// p99 during its copy and without a move, and the moved shard's ops
// around the cut-over; no op failed, every acknowledged write is a trx
// row, the audit is clean.
func TestBenchSelfMove(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	out, err := exec.Command(cofferBinary(t), "bench", "--self", "--databases", "2", "--shards", "4", "--move", "1", "--workload", "write",
		"--clients", "4", "--duration", "2s", "--rounds", "1", "--progress", "0", "--warmup", "1s", "--scale", "0.01", "--json", jsonPath).CombinedOutput()
	if err != nil {
		t.Fatalf("coffer bench: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(jsonPath)
	must(t, err)
	var so bench.ScaleOut
	must(t, json.Unmarshal(raw, &so))
	if len(so.Stacks) != 1 || len(so.Stacks[0].Moves) != 2 {
		t.Fatalf("want one stack with two moves (there and back): %s", raw)
	}
	rep := so.Stacks[0]
	if len(rep.Errors) != 0 || rep.Writes == 0 || rep.Writes != rep.TrxWritten || !rep.Audited || rep.AuditViolations != 0 {
		t.Fatalf("errors %v, writes %d, trx rows %d, audit %v %d", rep.Errors, rep.Writes, rep.TrxWritten, rep.Audited, rep.AuditViolations)
	}
	for i, m := range rep.Moves {
		from, to := "coffer_0", "coffer_1" // shards 0–1 on the first database
		if i == 1 {
			from, to = to, from
		}
		switch {
		case m.Run != "coffer#1" || m.Shard != 1 || m.From != from || m.To != to || m.PauseMs <= 0:
			t.Fatalf("move %d: %+v", i, m)
		case m.Copy.Ops == 0 || m.Copy.P99 <= 0 || m.Quiet.Ops == 0 || m.Quiet.P99 <= 0 || m.P99Ratio <= 0 || m.Copy.ToS <= m.Copy.FromS || m.Quiet.ToS > rep.Moves[0].Copy.FromS:
			t.Fatalf("move %d: the other shards' ops: copy %+v, quiet %+v, ratio %v", i, m.Copy, m.Quiet, m.P99Ratio)
		case m.Cut.Ops == 0 || m.Cut.Max <= 0 || m.Cut.Errors != 0 || m.Cut.FromS < m.Copy.ToS:
			t.Fatalf("move %d: the moved shard's ops around the cut-over: %+v", i, m.Cut)
		}
	}
	for _, line := range []string{"shard 1: writes paused ", "\nshard moves: ", "\ncoffer#1      1 coffer_0 → coffer_1 ", "\npause: median "} {
		if !strings.Contains(string(out), line) {
			t.Fatalf("no %q in the report:\n%s", line, out)
		}
	}
}

// The --move flags that do not fit: each refused before anything runs,
// with what is wrong.
func TestBenchMoveFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "http://x", "--api-key", "k", "--move", "1"}, "--move needs --self"},
		{[]string{"--self", "--move", "1,x"}, "not a list of shard ids"},
		{[]string{"--self", "--move", "-1"}, "not a list of shard ids"},
		{[]string{"--self", "--move", "16"}, "the stack's shards are 0 … 15"},
		{[]string{"--self", "--move", "1", "--baseline", "sql"}, "not with --baseline"},
		{[]string{"--self", "--move", "1", "--decay", "1000"}, "not with --decay"},
		{[]string{"--self", "--move", "1", "--workload", "batch"}, "not with --workload batch"},
		{[]string{"--self", "--move", "1", "--databases", "1,2"}, "not with --databases 1"},
	} {
		code, _, errOut := run(t, append([]string{"bench"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestBenchPGSetReachesPostgres: a --pg-set setting is passed to the
// server, which refuses a bad value before anything runs.
func TestBenchPGSetReachesPostgres(t *testing.T) {
	code, _, errOut := run(t, "bench", "--self", "--pg-set", "max_connections=lots", "--duration", "1s", "--rounds", "1")
	if code != 1 || !strings.Contains(errOut, "max_connections") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// An interrupt stops the runs, not the report: the ops in flight finish,
// the rounds done are reported and audited, and the local stack is gone
// afterwards, its data outside the temp dir included.
func TestBenchInterrupted(t *testing.T) {
	tmp, dir := t.TempDir(), t.TempDir()
	jsonPath := filepath.Join(dir, "bench.json")
	code, out, errOut := interruptBench(t, tmp, 1, "--json", jsonPath)
	if code != 0 {
		t.Fatalf("coffer bench: exit %d\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(jsonPath)
	must(t, err)
	var rep bench.Report
	must(t, json.Unmarshal(raw, &rep))
	switch {
	case !rep.Interrupted || len(rep.Rounds) != 1 || rep.Rounds[0].CofferTPS <= 0 || rep.Rounds[0].BaselineTPS != 0 || rep.Baseline != nil:
		t.Fatalf("rounds: %s", raw)
	case len(rep.Errors) != 0 || rep.Writes == 0 || rep.Writes != rep.TrxWritten:
		t.Fatalf("errors %v; writes acknowledged %d, trx rows written %d", rep.Errors, rep.Writes, rep.TrxWritten)
	case !rep.Audited || rep.AuditViolations != 0:
		t.Fatalf("audit: ran %v, %d violations", rep.Audited, rep.AuditViolations)
	case !strings.Contains(out, "interrupted: ") || !strings.Contains(errOut, "stopping after the ops in flight"):
		t.Fatalf("no word of the interrupt:\n%s%s", out, errOut)
	}
	stackGone(t, tmp)
}

// A second interrupt abandons the report, and still removes the stack.
func TestBenchAbandoned(t *testing.T) {
	tmp, dir := t.TempDir(), t.TempDir()
	jsonPath := filepath.Join(dir, "bench.json")
	code, out, errOut := interruptBench(t, tmp, 2, "--json", jsonPath)
	if code != 1 || !strings.Contains(errOut, "abandoned at the second interrupt") || strings.Contains(out, "coffer latency") {
		t.Fatalf("coffer bench: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(jsonPath); !os.IsNotExist(err) {
		t.Fatalf("a report was written: %v", err)
	}
	stackGone(t, tmp)
}

// interruptBench runs a long `coffer bench --self` with TMPDIR=tmp and
// sends it n interrupts at its first progress line. It returns the exit
// code and output.
func interruptBench(t *testing.T, tmp string, n int, args ...string) (int, string, string) {
	cmd, _, finish := startUntil(t, tmp, "coffer#1 ", append([]string{"bench", "--self", "--workload", "write", "--clients", "4", "--duration", "10m",
		"--rounds", "3", "--baseline", "sql", "--progress", "1s", "--warmup", "1s", "--scale", "0.01"}, args...)...)
	for i := range n {
		if i > 0 {
			// Signals sent together merge into one; the bench spends over
			// a second after the first reading its counters.
			time.Sleep(300 * time.Millisecond)
		}
		must(t, cmd.Process.Signal(syscall.SIGINT))
	}
	return finish()
}

// stackGone fails if a bench's local stack left anything in tmp, its
// TMPDIR, or data outside it under /var/tmp.
func stackGone(t *testing.T, tmp string) {
	t.Helper()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("left in the temp dir: %v", left)
	}
	links, _ := filepath.Glob("/var/tmp/coffer-pg-*/link")
	for _, l := range links {
		if to, err := os.ReadFile(l); err == nil && strings.HasPrefix(string(to), tmp) {
			t.Fatalf("data left outside the temp dir: %s", filepath.Dir(l))
		}
	}
}

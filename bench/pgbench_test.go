package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPgbenchLogs: a transaction that began in the warmup is answered, not
// measured; a failed one is an error, not a write (its latency unknown);
// latencies are pgbench's; the run ends with its last transaction.
func TestPgbenchLogs(t *testing.T) {
	dir := t.TempDir()
	begin := time.Unix(1_700_000_000, 0)
	// client, transaction, latency µs, script, end s, end µs
	logs := map[string]string{
		"db0.123":   "0 1 2000 0 1700000001 1000\n0 2 3000 0 1700000001 600000\n",
		"db1.456":   "0 1 failed 2 1700000002 0\n",
		"db1.456.1": "1 1 500000 1 1700000001 800000\n", // began at 1.3 s
	}
	for name, text := range logs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := readPgbenchLogs(dir, RunConfig{Label: "pgbench#1", Warmup: 1500 * time.Millisecond, Duration: time.Second}, begin)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case res.answered != 4 || res.writes != 3:
		t.Fatalf("answered %d, writes %d; want 4, 3", res.answered, res.writes)
	case res.Ops != 2 || res.Errors["sql_error"] != 1 || res.hist.TotalCount() != 2:
		t.Fatalf("measured %d, errors %v", res.Ops, res.Errors)
	case res.Latency.Max < 2.99 || res.Latency.Max > 3.01 || res.Elapsed != 0.5:
		t.Fatalf("latency %+v, elapsed %v", res.Latency, res.Elapsed)
	}
	if err := os.WriteFile(filepath.Join(dir, "db2.9"), []byte("not a log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPgbenchLogs(dir, RunConfig{}, begin); err == nil {
		t.Fatal("a malformed log was read")
	}
}

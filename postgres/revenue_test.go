package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer/postgres"
)

// TestRevenueReadsOnlyPaidOps: the report's statement is an index-only
// scan of op_N_revenue, a namespace's paid ops up to the report's end,
// not a read of every op of the shard. The planner is kept off sequential
// scans, as a large ledger would keep it: on the few rows here it would
// read the table whatever the indexes.
func TestRevenueReadsOnlyPaidOps(t *testing.T) {
	e := newEnv(t)
	e.mustChange(15, "buy", paid("gold", 100, "o"))
	tx, err := e.router.Database(0).Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
	must(t, err)
	rows, err := tx.Query(ctx, "EXPLAIN "+postgres.RevenueSQL(0), 1, time.Now().Add(-time.Hour), time.Now())
	must(t, err)
	var plan []string
	for rows.Next() {
		var line string
		must(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	must(t, rows.Err())
	if text := strings.Join(plan, "\n"); !strings.Contains(text, "Index Only Scan using op_0_revenue") {
		t.Fatalf("the revenue report does not read the paid ops' index:\n%s", text)
	}
}

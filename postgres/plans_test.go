package postgres_test

import (
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestBatchPlansProbeIndexes plans every batch statement the way a batch
// runs it (a prepared statement, on a connection of the batches, whose
// settings must make it use its generic plan rather than plan every
// execution again)
// on a shard of a thousand rows with fresh statistics. There the
// planner's guess of ten rows from unnest makes a hash join over a
// sequential scan of the whole table look cheaper than ten index probes;
// each statement must still reach its tables through their indexes.
func TestBatchPlansProbeIndexes(t *testing.T) {
	e := newEnv(t)
	e.damaged = true // rows without their ops
	id := coffer.ShardID(0)
	db := e.router.Shard(id)
	for _, sql := range []string{
		`INSERT INTO balance_0 (ns, player_id, version, updated_at, pos) SELECT 1, i, 1, now(), 1 FROM generate_series(1, 1000) i`,
		`INSERT INTO lot_0 (ns, player_id, lot_id, currency, paid, amount, reserved, priority, created_at, trx_id)
			SELECT 1, i, i, 1, false, 5, 0, 0, now(), i FROM generate_series(1, 1000) i`,
		`INSERT INTO trx_0 (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status, reason, version, pos)
			SELECT 1, i, now(), i, 1, 'k' || i, '\x00', 'change', 'committed', '', 1, 1 FROM generate_series(1, 1000) i`,
		`INSERT INTO op_0 (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, created_at, pos)
			SELECT i, 0, 1, i, 1, i, 'grant', 'change', 5, false, 5, 0, now(), 1 FROM generate_series(1, 1000) i`,
		`ANALYZE balance_0, lot_0, trx_0, op_0`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	batches := e.store.BatchPool(e.router.DatabaseIndex(id))
	statements := postgres.BatchReads(id)
	statements["write"] = postgres.BatchWrite(id)
	// A batch of one row sends each statement in its one-row form.
	for name, sql := range postgres.BatchReads(id) {
		statements[name+" (one row)"] = postgres.OneRow(sql)
	}
	statements["write (one row)"] = postgres.OneRow(statements["write"])
	for name, sql := range statements {
		text := genericPlan(t, batches, sql)
		if strings.Contains(text, "Seq Scan") {
			t.Errorf("%s scans a table:\n%s", name, text)
		}
		// The rows' arrays are unnested one by one in a select list
		// (ProjectSet), not by unnest(a, b, …), a Function Scan that
		// fills a tuplestore per array.
		if strings.Contains(text, "Function Scan on unnest") {
			t.Errorf("%s materialises its arrays:\n%s", name, text)
		}
	}
	// A player's lots are never deleted: a refund finds the lots of its
	// order by the order, not among all the lots the player ever held.
	if text := genericPlan(t, batches, statements["exchanges"]); !strings.Contains(text, "lot_0_order") {
		t.Errorf("exchanges does not find the order's lots by lot_0_order:\n%s", text)
	}
}

// genericPlan is the plan of sql, prepared on a connection of pool, in a
// transaction rolled back after; the prepared statement is dropped with
// its connection. The connection's settings must make it the generic
// plan, cached for every execution.
func genericPlan(t *testing.T, pool *pgxpool.Pool, sql string) string {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Conn().Close(ctx); conn.Release() }()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "PREPARE s AS "+sql); err != nil {
		t.Fatal(err)
	}
	var params int
	if err := tx.QueryRow(ctx, "SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = 's'").Scan(&params); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN EXECUTE s("+strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")+")")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var custom int
	if err := tx.QueryRow(ctx, "SELECT custom_plans FROM pg_prepared_statements WHERE name = 's'").Scan(&custom); err != nil {
		t.Fatal(err)
	}
	if custom != 0 {
		t.Errorf("planned for its values (a custom plan), not once:\n%s", sql)
	}
	return strings.Join(plan, "\n")
}

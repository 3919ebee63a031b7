package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgtest"
)

// withLowIDs makes the next write on player's shard draw its ids from a
// session whose cached block of the id sequence lies below every id drawn
// by the writes in between: the sequence caches 32 ids per session, so
// that is how ids from two pooled connections interleave in production.
// It returns a function that hands the low session back to the pool as
// its only idle connection; the next write then runs on it.
func (e *env) withLowIDs(player coffer.PlayerID) (useLow func()) {
	e.t.Helper()
	id := e.router.Map().ShardOf(player)
	pool := e.router.Shard(id)
	low, err := pool.Acquire(ctx)
	must(e.t, err)
	_, err = low.Exec(ctx, fmt.Sprintf(`SELECT nextval('id_seq_%d')`, id))
	must(e.t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT setval('id_seq_%d', 1000000000)`, id))
	must(e.t, err)
	return func() {
		e.t.Helper()
		others := pool.AcquireAllIdle(ctx)
		low.Release()
		e.t.Cleanup(func() {
			for _, c := range others {
				c.Release()
			}
		})
	}
}

// TestExpiryAfterAHoldSortsAfterIt reproduces the reported defect: a
// hold's rollback or commit that lands on an expired lot records the
// expiry after the hold's own ops; ordered by trx id, which comes from a
// sequence cached per connection, the expiry sorted first whenever the
// finishing connection's ids were lower. The balance in the past then
// disagreed with the current one and the audit saw a broken chain.
func TestExpiryAfterAHoldSortsAfterIt(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			e := newEnv(t)
			const p = 17
			useLow := e.withLowIDs(p)
			soon := time.Now().Add(time.Second)
			ops := []coffer.OpRequest{free("gold", -8)}
			if commit {
				// The commit grants a lot whose expiry has passed.
				ops = []coffer.OpRequest{{Currency: "gold", Amount: 6, ExpiresAt: &soon}}
			}
			e.mustChange(p, "seed", coffer.OpRequest{Currency: "gold", Amount: 10, ExpiresAt: &soon}, free("gold", 5))
			_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Hold: true, Ops: ops})
			must(t, err)
			for i := 0; i < 4; i++ {
				e.mustChange(p, fmt.Sprint("more", i), free("silver", 1))
			}
			time.Sleep(time.Until(soon) + 50*time.Millisecond)
			useLow()
			finish := e.store.Rollback
			if commit {
				finish = e.store.Commit
			}
			_, _, err = finish(ctx, scope(p, "h"))
			must(t, err)
			for i := 0; i < 2; i++ {
				e.mustChange(p, fmt.Sprint("after", i), free("silver", 1))
			}
			now := time.Now()
			at, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p, Currency: "gold", At: &now})
			must(t, err)
			if cur := e.balance(p, "gold"); at.Balances[0].Total != cur.Total || cur.Total != 5 {
				t.Fatalf("gold at now = %d, current = %d; want 5 both", at.Balances[0].Total, cur.Total)
			}
			// The lot's remainder expires before the finish's ops, what
			// returns to it (or the grant) after them.
			got := e.expiries(p)
			if len(got) != 2 || got[1].BalanceAfter != 5 {
				t.Fatalf("expiries = %+v; want two, the last leaving 5", got)
			}
			e.auditClean()
		})
	}
}

// TestMigrationKeepsTheOrderOfExistingRows: V0007 gives the rows written
// before it positions in the order they had, (created_at, trx_id, seq),
// and the player's row the last; writes after it continue from there.
// The fixture is a hold that began before a change with a smaller trx id
// and was rolled back after it.
func TestMigrationKeepsTheOrderOfExistingRows(t *testing.T) {
	e := newEnvAt(t, 6, pgtest.Server(t, 0), pgtest.Server(t, 1))
	const p = 50
	id := e.router.Map().ShardOf(p)
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, row := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO balance_N VALUES (1, $1, 4, $2)`, []any{at(3)}},
		{`INSERT INTO lot_N VALUES (1, $1, 9, 1, false, 105, NULL, 0, $2, 10)`, []any{at(0)}},
		{`INSERT INTO trx_N (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status, reason, version, finished_at)
			VALUES (1, $1, $2, 10, 7, 'a', '', 'change', 'committed', '', 1, NULL),
				(1, $1, $3, 12, 7, 'h', '', 'hold', 'rolled_back', '', 4, $5),
				(1, $1, $4, 11, 7, 'b', '', 'change', 'committed', '', 3, NULL)`, []any{at(0), at(1), at(2), at(3)}},
		{`INSERT INTO op_N (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, created_at)
			VALUES (10, 0, 1, $1, 1, 9, 'grant', 'change', 100, false, 100, 0, $2),
				(12, 0, 1, $1, 1, 9, 'consume', 'change', -30, false, 70, 0, $3),
				(11, 0, 1, $1, 1, 9, 'grant', 'change', 5, false, 75, 0, $4),
				(12, 1, 1, $1, 1, 9, 'grant', 'release', 30, false, 105, 0, $5)`, []any{at(0), at(1), at(2), at(3)}},
	} {
		e.exec(p, row.sql, append([]any{p}, row.args...)...)
	}
	migrateTo(t, e.router.Map(), -1)

	var got string
	err := e.router.Shard(id).QueryRow(ctx, fmt.Sprintf(`SELECT string_agg(x, ' ' ORDER BY pos) FROM (
			SELECT pos, 'trx' || trx_id AS x FROM trx_%[1]d UNION ALL SELECT pos, 'op' || trx_id || '/' || seq FROM op_%[1]d
			UNION ALL SELECT pos, 'last' FROM balance_%[1]d) e`, id)).Scan(&got)
	must(t, err)
	if want := "trx10 op10/0 trx12 op12/0 trx11 op11/0 op12/1 last"; got != want {
		t.Fatalf("positions after the migration: %s; want %s", got, want)
	}
	e.mustChange(p, "c", free("gold", 1))
	page, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: p, Limit: 2})
	must(t, err)
	next, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: p, Limit: 2, Cursor: page.NextCursor})
	must(t, err)
	var keys []string
	for _, trx := range append(page.Items, next.Items...) {
		keys = append(keys, trx.IdempotencyKey)
	}
	if fmt.Sprint(keys) != "[a h b c]" || next.Items[1].Ops[0].BalanceAfter != 106 {
		t.Fatalf("finlog after the migration: %v, %+v", keys, next.Items)
	}
	t2 := at(2)
	b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p, Currency: "gold", At: &t2})
	if err != nil || b.Balances[0].Total != 75 {
		t.Fatalf("gold at the change's time: %+v %v; want 75", b, err)
	}
}

// TestMigrationReservesWhatPendingHoldsTook: V0009 sets each lot's
// reservation from the pending holds that took from it, so that a hold
// begun before it rolls back onto its lots (and one finished is left
// alone).
func TestMigrationReservesWhatPendingHoldsTook(t *testing.T) {
	e := newEnvAt(t, 8, pgtest.Server(t, 0), pgtest.Server(t, 1))
	const p = 51
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	for _, sql := range []string{
		`INSERT INTO balance_N VALUES (1, $1, 3, $2, 7)`,
		`INSERT INTO lot_N VALUES (1, $1, 9, 1, false, 60, NULL, 0, $2, 10)`,
		`INSERT INTO trx_N (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status, reason,
				hold_expires_at, version, pos)
			VALUES (1, $1, $2, 10, 7, 'a', '', 'change', 'committed', '', NULL, 1, 1),
				(1, $1, $2 + interval '1 second', 11, 7, 'h', '', 'hold', 'pending', '', now() + interval '1 hour', 2, 3),
				(1, $1, $2 + interval '2 second', 12, 7, 'c', '', 'hold', 'committed', '', now() + interval '1 hour', 3, 5)`,
		`INSERT INTO op_N (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, created_at, pos)
			VALUES (10, 0, 1, $1, 1, 9, 'grant', 'change', 100, false, 100, 0, $2, 2),
				(11, 0, 1, $1, 1, 9, 'consume', 'change', -30, false, 70, 0, $2 + interval '1 second', 4),
				(12, 0, 1, $1, 1, 9, 'consume', 'change', -10, false, 60, 0, $2 + interval '2 second', 6)`,
	} {
		e.exec(p, sql, p, t0)
	}
	migrateTo(t, e.router.Map(), -1)
	r, _, err := e.store.Rollback(ctx, scope(p, "h"))
	if err != nil || r.Balances[0].Total != 90 {
		t.Fatalf("rollback of a hold begun before V0009: %+v %v", r, err)
	}
	if b := e.balance(p, "gold"); b.Total != 90 {
		t.Fatalf("gold = %+v, want 90", b)
	}
}

package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
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
	e.t.Cleanup(low.Release) // a test that fails before useLow: the router's Close waits for it
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
			later := time.Now().Add(time.Hour)
			ops := []coffer.OpRequest{free("gold", -8)}
			if commit {
				// The commit grants a lot whose expiry has passed.
				ops = []coffer.OpRequest{{Currency: "gold", Amount: 6, ExpiresAt: &later}}
			}
			e.mustChange(p, "seed", coffer.OpRequest{Currency: "gold", Amount: 10, ExpiresAt: &later}, free("gold", 5))
			_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Hold: true, Ops: ops})
			must(t, err)
			for i := 0; i < 4; i++ {
				e.mustChange(p, fmt.Sprint("more", i), free("silver", 1))
			}
			e.expireNow(p)
			useLow()
			finish := e.store.Rollback
			if commit {
				finish = e.store.Commit
			}
			_, _, err = finish(ctx, byItsClient(p, "h"))
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

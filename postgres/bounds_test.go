package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
)

// ops is n copies of op: one request's worth of the same movement.
func ops(n int, op coffer.OpRequest) []coffer.OpRequest {
	out := make([]coffer.OpRequest, n)
	for i := range out {
		out[i] = op
	}
	return out
}

// paidLots are n paid grants of 1, each a lot of its own.
func paidLots(cur string, n int, order string) []coffer.OpRequest {
	out := make([]coffer.OpRequest, n)
	for i := range out {
		out[i] = paid(cur, 1, fmt.Sprint(order, "-", i))
	}
	return out
}

// TestRollbacksCannotOverflow: a hold reserves a balance filled to the
// bound, the balance is refilled, and the hold is rolled back. The refill
// is refused (what pending holds reserve counts towards BalanceMax), so
// the rollback returns the reservation without wrapping: it wrapped the
// balance to about −9.2·10¹⁸.
func TestRollbacksCannotOverflow(t *testing.T) {
	e := newEnv(t)
	const p = 60
	many := ops(coffer.OpsMax, free("gold", coffer.OpAmountMax))
	// Filled in big steps, then in single grants, until each is refused.
	for _, step := range [][]coffer.OpRequest{many, many[:1]} {
		var err error
		for i := 0; err == nil; i++ {
			if i > 200 {
				t.Fatal("the balance grew past int64 without a refusal")
			}
			_, err = e.change(p, fmt.Sprint("fill", len(step), "-", i), step...)
		}
		wantCode(t, err, coffer.CodeInvalid)
	}
	filled := e.balance(p, "gold").Total
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Hold: true, HoldTTL: time.Second,
		Ops: ops(coffer.OpsMax, free("gold", -coffer.OpAmountMax))})
	must(t, err)
	for _, refill := range [][]coffer.OpRequest{many, many[:1]} {
		_, err = e.change(p, fmt.Sprint("refill", len(refill)), refill...)
		wantCode(t, err, coffer.CodeInvalid)
	}
	r, _, err := e.store.Rollback(ctx, byItsClient(p, "h"))
	if err != nil || r.Balances[0].Total != filled {
		t.Fatalf("rollback: %+v %v; want the balance back at %d", r.Balances, err, filled)
	}
	if b := e.balance(p, "gold"); b.Total != filled || b.Total > coffer.BalanceMax {
		t.Fatalf("gold = %d, want %d", b.Total, filled)
	}
}

// TestLotsAreBounded: a player holds at most LotsMax lots in a currency
// (too_many_lots beyond, for one grant or many, through either path of a
// grant); a hold over all of them, on lots that expire while it is
// pending, can be rolled back and swept; and a trx may not move more than
// TrxOpsMax lots.
func TestLotsAreBounded(t *testing.T) {
	e := newEnv(t)
	const p = 61
	later := time.Now().Add(time.Hour)
	for i := 0; i < coffer.LotsMax/coffer.OpsMax; i++ {
		e.mustChange(p, fmt.Sprint("gold", i), paidLots("gold", coffer.OpsMax, fmt.Sprint("g", i))...)
		e.mustChange(p, fmt.Sprint("silver", i), paidLots("silver", coffer.OpsMax, fmt.Sprint("s", i))...)
	}
	rest := coffer.LotsMax % coffer.OpsMax
	expiring := ops(rest, coffer.OpRequest{Currency: "gold", Amount: 1})
	for i := range expiring {
		at := later.Add(time.Duration(i) * time.Millisecond)
		expiring[i].ExpiresAt = &at
	}
	e.mustChange(p, "gold-rest", expiring...)
	e.mustChange(p, "silver-rest", paidLots("silver", rest, "s-rest")...)
	e.mustChange(p, "credits", free("credits", 1))

	_, err := e.change(p, "one more", paid("gold", 1, "o-more"))
	wantCode(t, err, coffer.CodeTooManyLots)
	_, err = e.change(p, "two more", free("silver", 1), paid("silver", 1, "o-more2"))
	wantCode(t, err, coffer.CodeTooManyLots)
	if g := e.balance(p, "gold"); len(g.Lots) != coffer.LotsMax {
		t.Fatalf("gold has %d lots, want %d", len(g.Lots), coffer.LotsMax)
	}
	e.mustChange(p, "joins", free("credits", 1))

	// Every lot of gold and silver and the one of credits: one op more
	// than a trx may write.
	all := []coffer.OpRequest{free("gold", -coffer.LotsMax), free("silver", -coffer.LotsMax), free("credits", -1)}
	_, err = e.change(p, "all", all...)
	wantCode(t, err, coffer.CodeTooManyLots)

	hold := func(key string, ttl time.Duration) {
		t.Helper()
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, key), Hold: true, HoldTTL: ttl, Ops: all[:2]})
		must(t, err)
	}
	hold("h1", time.Hour)
	e.expireNow(p)
	r, _, err := e.store.Rollback(ctx, byItsClient(p, "h1"))
	if err != nil || r.Status != coffer.StatusRolledBack {
		t.Fatalf("rollback over %d lots: %v", 2*coffer.LotsMax, err)
	}
	left := coffer.Amount(coffer.LotsMax - rest)
	if g := e.balance(p, "gold"); g.Total != left {
		t.Fatalf("gold after the rollback = %d, want %d (the expired lots gone)", g.Total, left)
	}
	_, _, err = e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h2"), Hold: true, HoldTTL: time.Second,
		Ops: []coffer.OpRequest{free("gold", -left), free("silver", -coffer.LotsMax)}})
	must(t, err)
	time.Sleep(1100 * time.Millisecond)
	if n, err := e.store.SweepHolds(ctx, 100); err != nil || n != 1 {
		t.Fatalf("sweep of a hold over %d lots: %d %v", int(left)+coffer.LotsMax, n, err)
	}
	if s := e.balance(p, "silver"); s.Total != coffer.LotsMax {
		t.Fatalf("silver after the sweep = %d", s.Total)
	}
}

// TestBalanceReadNeverWraps: lots that no write allows, damaged to sum
// past int64, make a balance read fail (internal), not answer a wrapped
// balance.
func TestBalanceReadNeverWraps(t *testing.T) {
	e := newEnv(t)
	const p = 62
	e.mustChange(p, "a", paid("gold", 1, "o1"), paid("gold", 1, "o2"))
	id := e.router.Map().ShardOf(p)
	_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE lot_%d SET amount = 4611686018427387904 WHERE player_id = %d`, id, p))
	must(t, err)
	e.damaged = true
	_, err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p})
	wantCode(t, err, coffer.CodeInternal)
}

// TestRevenueNeverWraps: paid figures of two shards that sum past int64
// (damaged: no write allows them) make the report fail, not answer a
// wrapped sum.
func TestRevenueNeverWraps(t *testing.T) {
	e := newEnv(t)
	players := []coffer.PlayerID{63}
	for p := coffer.PlayerID(64); len(players) < 2; p++ {
		if e.router.Map().ShardOf(p) != e.router.Map().ShardOf(players[0]) {
			players = append(players, p)
		}
	}
	for _, p := range players {
		e.mustChange(p, "buy", paid("gold", 1, fmt.Sprint("o", p)))
		id := e.router.Map().ShardOf(p)
		_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE op_%d SET amount = 5000000000000000000 WHERE player_id = %d`, id, p))
		must(t, err)
	}
	e.damaged = true
	_, err := e.store.Revenue(ctx, coffer.RevenueQuery{Namespace: 1, From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)})
	wantCode(t, err, coffer.CodeInternal)
}

// TestPricesCannotOverflowTheReport: two purchases of 5·10¹⁸ US cents
// would sum past int64 in their namespace's revenue report, and fail it
// for every period from then on (deferred sums every paid op since the
// first). A price past coffer.PriceMax is invalid_argument, and nothing
// is written.
func TestPricesCannotOverflowTheReport(t *testing.T) {
	e := newEnv(t)
	_, err := e.change(61, "buy", bought(1, "huge", 5_000_000_000_000_000_000))
	wantCode(t, err, coffer.CodeInvalid)
	_, err = e.store.Trx(ctx, scope(61, "buy"))
	wantCode(t, err, coffer.CodeNotFound)
}

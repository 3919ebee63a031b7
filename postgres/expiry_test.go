package postgres_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
)

// TestReplayAfterTheExpiryPassed retries grants whose expiry has passed
// since they were written, through both paths of a grant: the retry gets
// the first answer, not invalid_argument (which told a client its write
// had not happened when it had; torture found it), while a new key with
// that expiry is refused and writes nothing.
func TestReplayAfterTheExpiryPassed(t *testing.T) {
	e := newEnv(t)
	later := time.Now().Add(time.Hour)
	one := []coffer.OpRequest{{Currency: "gold", Amount: 5, ExpiresAt: &later}}
	two := append(one, free("silver", 1))
	first := []coffer.Trx{e.mustChange(44, "one", one...), e.mustChange(44, "two", two...)}
	// The retries' time passes the expiry they carry: a player's writes
	// never go back in time (coffer.NewPlayer), so the next comes after
	// its last, moved to the expiry.
	e.exec(44, `UPDATE balance_N SET updated_at = $2 WHERE ns = 1 AND player_id = $1`, 44, later)
	for i, ops := range [][]coffer.OpRequest{one, two} {
		again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(44, first[i].IdempotencyKey), Ops: ops, Reason: "test"})
		if err != nil || !replayed {
			t.Fatalf("retry of %s after its expiry: %v %v", first[i].IdempotencyKey, replayed, err)
		}
		sameAnswer(t, first[i], again)
		_, err = e.change(44, first[i].IdempotencyKey+"-new", ops...)
		wantCode(t, err, coffer.CodeInvalid)
	}
	if b, _ := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 44}); b.Version != 2 {
		t.Fatalf("version %d after two writes and refusals", b.Version)
	}
}

func TestExpiryAndBalanceAt(t *testing.T) {
	e := newEnv(t)
	later := time.Now().Add(time.Hour)
	e.mustChange(11, "a", coffer.OpRequest{Currency: "gold", Amount: 40, ExpiresAt: &later}, free("gold", 10))
	t1 := time.Now()
	e.mustChange(11, "b", free("gold", -5))
	e.expireNow(11)
	if b := e.balance(11, "gold"); b.Total != 10 {
		t.Fatalf("expired lot still counted: %+v", b)
	}
	// After the expiry, before the sweep records it: the same answer
	// before the sweep and after.
	t2 := time.Now()
	before, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 11, Currency: "gold", At: &t2})
	if err != nil || before.Balances[0].Total != 10 || before.Balances[0].Free != 10 {
		t.Fatalf("at t2, before the sweep: %+v %v", before, err)
	}
	n, err := e.store.SweepExpiredLots(ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	page, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 11})
	must(t, err)
	last := page.Items[len(page.Items)-1]
	if last.Kind != coffer.TrxExpire || last.Ops[0].Amount != -35 || last.Ops[0].BalanceAfter != 10 {
		t.Fatalf("expire trx = %+v", last)
	}
	at, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 11, Currency: "gold", At: &t1})
	if err != nil || at.Balances[0].Total != 50 {
		t.Fatalf("at t1: %+v %v", at, err)
	}
	after, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 11, Currency: "gold", At: &t2})
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("at t2, after the sweep: %+v %v; before it %+v", after, err, before)
	}
}

// TestBalanceAtVersionAcrossHolds: a balance read at a past time T
// answers the version a current read answered at T, also while holds
// were pending: a hold finished after T counts with its begin's version,
// not its finish's; a hold's finish after the player's last trx before T
// counts, also one that writes no op (a commit of consumes alone); and a
// hold still pending counts with its begin's.
func TestBalanceAtVersionAcrossHolds(t *testing.T) {
	e := newEnv(t)
	const p = 60
	hold := func(key string, amount coffer.Amount) {
		t.Helper()
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, key), Hold: true, Ops: []coffer.OpRequest{free("gold", amount)}})
		must(t, err)
	}
	type seen struct {
		after   string
		at      time.Time
		version int64
	}
	var log []seen
	step := func(after string, write func()) {
		t.Helper()
		write()
		time.Sleep(2 * time.Millisecond)
		b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p})
		must(t, err)
		log = append(log, seen{after, time.Now(), b.Version})
		time.Sleep(2 * time.Millisecond)
	}
	step("the grant", func() { e.mustChange(p, "grant", free("gold", 100)) })
	step("h1 begun (pending at T, finished later)", func() { hold("h1", -10) })
	step("a change while h1 is pending", func() { e.mustChange(p, "more", free("gold", 5)) })
	step("h1 committed (no op), after the change", func() {
		_, _, err := e.store.Commit(ctx, byItsClient(p, "h1"))
		must(t, err)
	})
	step("h2 begun (rolled back later)", func() { hold("h2", -5) })
	step("h3 begun (pending to the end)", func() { hold("h3", -1) })
	step("h2 rolled back, after h3 begun", func() {
		_, _, err := e.store.Rollback(ctx, byItsClient(p, "h2"))
		must(t, err)
	})
	for _, s := range log {
		b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p, At: &s.at})
		must(t, err)
		if b.Version != s.version {
			t.Errorf("after %s: version at T %d; a current read at T answered %d", s.after, b.Version, s.version)
		}
	}
}

// TestWriteRecordsItsCurrenciesExpiries checks that a write records the due
// expiries of the currencies it touches before its own ops, and leaves
// those of other currencies to the sweeper: it reads only its currencies'
// lots.
func TestWriteRecordsItsCurrenciesExpiries(t *testing.T) {
	e := newEnv(t)
	later := time.Now().Add(time.Hour)
	e.mustChange(12, "a", coffer.OpRequest{Currency: "gold", Amount: 40, ExpiresAt: &later}, free("gold", 10),
		coffer.OpRequest{Currency: "silver", Amount: 7, ExpiresAt: &later}, free("silver", 3))
	e.expireNow(12)

	trx := e.mustChange(12, "b", free("gold", 1))
	if got := e.expiries(12); len(got) != 1 || got[0].Currency != "gold" || got[0].Amount != -40 || got[0].BalanceAfter != 10 {
		t.Fatalf("after a gold write, expiries = %+v; want gold's alone", got)
	}
	if trx.Ops[0].BalanceAfter != 11 {
		t.Fatalf("gold write: %+v", trx.Ops)
	}

	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(12, "x"), From: "gold", To: "silver", Amount: 1})
	must(t, err)
	got := e.expiries(12)
	if len(got) != 2 || got[1].Currency != "silver" || got[1].Amount != -7 || got[1].BalanceAfter != 3 {
		t.Fatalf("after an exchange into silver, expiries = %+v", got)
	}
	if n, err := e.store.SweepExpiredLots(ctx, 100); err != nil || n != 0 {
		t.Fatalf("sweep after the writes: %d %v; want nothing left", n, err)
	}
	if b := e.balance(12, "silver"); b.Total != 103 {
		t.Fatalf("silver = %+v", b)
	}
}

// expiries are the expire ops in a player's finlog, oldest first.
func (e *env) expiries(player coffer.PlayerID) []coffer.Op {
	e.t.Helper()
	page, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: player})
	must(e.t, err)
	var ops []coffer.Op
	for _, trx := range page.Items {
		if trx.Kind == coffer.TrxExpire {
			ops = append(ops, trx.Ops...)
		}
	}
	return ops
}

// expireNow moves every expiry of the player still to come, its lots' and
// its pending holds' grants', to the database's present, as if their time
// had come: a test that gives them an expiry a moment ahead and sleeps
// past it fails on a busy machine whenever its writes before that moment
// take longer. The writes, reads and sweeps after it find them expired.
func (e *env) expireNow(player coffer.PlayerID) {
	e.t.Helper()
	e.exec(player, `UPDATE lot_N SET expires_at = now() WHERE ns = 1 AND player_id = $1 AND expires_at > now()`, player)
	e.exec(player, `UPDATE trx_N SET pending_grants = (
		SELECT jsonb_agg(CASE WHEN (g->>'e')::timestamptz > now() THEN jsonb_set(g, '{e}', to_jsonb(now())) ELSE g END ORDER BY i)
		FROM jsonb_array_elements(pending_grants) WITH ORDINALITY AS a(g, i))
		WHERE ns = 1 AND player_id = $1 AND status = 'pending' AND pending_grants IS NOT NULL`, player)
}

// TestHoldCommitRecordsAPastExpiry: a hold's grant whose expiry passed
// before the commit expires at once, recorded by the commit, so that the
// lot sweeper, which looks back only so far, has nothing left behind.
func TestHoldCommitRecordsAPastExpiry(t *testing.T) {
	e := newEnv(t)
	later := time.Now().Add(time.Hour)
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(15, "h"), Hold: true,
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: 10, ExpiresAt: &later}}})
	must(t, err)
	e.expireNow(15)
	trx, _, err := e.store.Commit(ctx, byItsClient(15, "h"))
	if err != nil || trx.Status != coffer.StatusCommitted {
		t.Fatalf("commit: %+v %v", trx, err)
	}
	if got := e.expiries(15); len(got) != 1 || got[0].Amount != -10 || got[0].BalanceAfter != 0 {
		t.Fatalf("expiries after the commit = %+v; want the grant's", got)
	}
	if n, err := e.store.SweepExpiredLots(ctx, 100); err != nil || n != 0 {
		t.Fatalf("sweep after the commit: %d %v; want nothing left", n, err)
	}
}

// TestBalanceAtEqualsFinlogReplay checks, at every trx's time, that the
// balance in the past equals a replay of the finlog up to it.
func TestBalanceAtEqualsFinlogReplay(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 12; i++ {
		ops := []coffer.OpRequest{free("gold", coffer.Amount(10+i))}
		if i%3 == 2 {
			ops = []coffer.OpRequest{free("gold", -7), paid("gold", 3, fmt.Sprint(i))}
		}
		e.mustChange(13, fmt.Sprint("k", i), ops...)
	}
	var items []coffer.Trx
	cursor := ""
	for {
		page, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 13, Limit: 5, Cursor: cursor})
		must(t, err)
		items = append(items, page.Items...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(items) != 12 {
		t.Fatalf("finlog has %d trx, want 12", len(items))
	}
	desc, _ := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 13, Limit: 500, Desc: true})
	if desc.Items[0].ID != items[11].ID {
		t.Fatal("descending finlog does not start with the newest trx")
	}
	var total coffer.Amount
	for _, trx := range items {
		for _, op := range trx.Ops {
			total += op.Amount
		}
		at := trx.CreatedAt
		b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 13, Currency: "gold", At: &at})
		must(t, err)
		if b.Balances[0].Total != total {
			t.Fatalf("at %v: %d, finlog replay %d", at, b.Balances[0].Total, total)
		}
	}
}

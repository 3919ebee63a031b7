package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

type env struct {
	store   *postgres.Store
	router  *shard.Router
	catalog *coffer.Catalog
	t       *testing.T
	// damaged skips the closing audit of a test that corrupts rows.
	damaged bool
	// sent counts the statements and batches the router's pools send.
	sent *sentCounter
	// cfg is the shard config the router was opened with.
	cfg shard.Config
}

var ctx = context.Background()

// newEnv migrates 8 shards over two servers and returns a store with
// gold and silver (can be paid) and credits (free only), gold→silver 1:100
// and silver→credits 10:1 in namespace 1; refunds claw gold back and write
// silver off. The audit runs when the test ends.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, pgtest.Server(t, 0), pgtest.Server(t, 1))
}

// newEnvOn is newEnv with its two databases on the given servers.
func newEnvOn(t *testing.T, servers ...*pgserver.Server) *env {
	t.Helper()
	cfg := shard.Config{ShardCount: 8, DistributionMode: "auto", ShardOnDB: 4}
	for _, s := range servers {
		d := pgtest.NewDBOn(t, s)
		cfg.Databases = append(cfg.Databases, shard.DatabaseConfig{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(),
			User: pgserver.Superuser, Password: pgserver.Password})
	}
	m, err := shard.NewMap(cfg)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := migrate.SchemaEngine(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Apply(ctx, migrate.Options{TargetVersion: -1}); err != nil {
		t.Fatal(err)
	}
	pc, sent := shard.DefaultPoolConfig(), &sentCounter{}
	pc.Tracer = sent
	router, err := shard.Open(m, pc)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := coffer.NewCatalog([]coffer.Currency{
		{ID: 1, Code: "gold", Paid: true, RefundPolicy: coffer.RefundClawBack}, {ID: 2, Code: "silver", Paid: true}, {ID: 3, Code: "credits"},
		{ID: 4, Code: "gems", Paid: true},
	}, 10*time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	must(t, cat.AddRate(1, "gold", "silver", coffer.Rate{Num: 100, Den: 1}))
	must(t, cat.AddRate(1, "gold", "gems", coffer.Rate{Num: 10, Den: 1}))
	must(t, cat.AddRate(1, "silver", "credits", coffer.Rate{Num: 1, Den: 10}))
	e := &env{store: postgres.New(router, cat, postgres.Options{}), router: router, catalog: cat, t: t, sent: sent, cfg: cfg}
	t.Cleanup(func() {
		if !t.Failed() && !e.damaged {
			e.auditClean()
		}
		e.store.Close()
		router.Close()
	})
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) auditClean() {
	e.t.Helper()
	r, err := (&audit.Checker{Router: e.router, HoldGrace: time.Minute}).Check(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if !r.Clean() {
		e.t.Fatalf("audit: %+v", r.Violations)
	}
}

// exec runs sql, its tables named trx_N …, on player's shard: rows
// damaged, for the audit or a read to meet.
func (e *env) exec(player coffer.PlayerID, sql string, args ...any) {
	e.t.Helper()
	id := e.router.Map().ShardOf(player)
	if _, err := e.router.Shard(id).Exec(ctx, shard.Tables(sql, id), args...); err != nil {
		e.t.Fatal(err)
	}
}

func scope(player coffer.PlayerID, key string) coffer.Scope {
	return coffer.Scope{Namespace: 1, PlayerID: player, Emitter: 7, IdempotencyKey: key}
}

func (e *env) change(player coffer.PlayerID, key string, ops ...coffer.OpRequest) (coffer.Trx, error) {
	trx, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(player, key), Ops: ops, Reason: "test"})
	return trx, err
}

func (e *env) mustChange(player coffer.PlayerID, key string, ops ...coffer.OpRequest) coffer.Trx {
	e.t.Helper()
	trx, err := e.change(player, key, ops...)
	if err != nil {
		e.t.Fatalf("change %s: %v", key, err)
	}
	return trx
}

func (e *env) balance(player coffer.PlayerID, currency string) coffer.Balance {
	e.t.Helper()
	b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: player, Currency: currency, Lots: true})
	if err != nil {
		e.t.Fatal(err)
	}
	return b.Balances[0]
}

func free(cur string, amount coffer.Amount) coffer.OpRequest {
	return coffer.OpRequest{Currency: cur, Amount: amount}
}

func paid(cur string, amount coffer.Amount, order string) coffer.OpRequest {
	return coffer.OpRequest{Currency: cur, Amount: amount, Kind: "paid",
		Purchase: &coffer.Purchase{Store: "steam", OrderID: order, Price: 499, Fiat: "USD"}}
}

func wantCode(t *testing.T, err error, code coffer.Code) {
	t.Helper()
	if got := coffer.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

func TestChangeReplayAndConflict(t *testing.T) {
	e := newEnv(t)
	trx := e.mustChange(42, "order-1", paid("gold", 500, "o1"), free("gold", 50))
	if trx.Version != 1 || len(trx.Ops) != 2 || trx.Ops[1].BalanceAfter != 550 || trx.Balances[0].Paid != 500 {
		t.Fatalf("trx = %+v", trx)
	}
	again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(42, "order-1"),
		Ops: []coffer.OpRequest{paid("gold", 500, "o1"), free("gold", 50)}, Reason: "test"})
	if err != nil || !replayed || again.ID != trx.ID || again.Version != 1 {
		t.Fatalf("replay = %+v %v %v", again, replayed, err)
	}
	_, err = e.change(42, "order-1", free("gold", 51))
	wantCode(t, err, coffer.CodeIdempotencyConflict)
	if b := e.balance(42, "gold"); b.Total != 550 || b.Paid != 500 || b.Free != 50 || len(b.Lots) != 2 {
		t.Fatalf("balance = %+v", b)
	}
	// The same key from another emitter is another trx.
	sc := scope(42, "order-1")
	sc.Emitter = 8
	if _, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: sc, Ops: []coffer.OpRequest{free("gold", 1)}}); err != nil || replayed {
		t.Fatalf("other emitter: %v %v", replayed, err)
	}
}

// TestReplayOfSpentConsume retries a consume whose currency has been spent
// since: the retry gets the first answer, not insufficient_funds, and a
// changed payload under the key is still a conflict.
func TestReplayOfSpentConsume(t *testing.T) {
	e := newEnv(t)
	e.mustChange(43, "grant", free("gold", 100))
	buy := e.mustChange(43, "buy", free("gold", -100))
	again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(43, "buy"),
		Ops: []coffer.OpRequest{free("gold", -100)}, Reason: "test"})
	if err != nil || !replayed || again.ID != buy.ID || again.Version != 2 {
		t.Fatalf("replay = %+v %v %v", again, replayed, err)
	}
	_, err = e.change(43, "buy", free("gold", -5))
	wantCode(t, err, coffer.CodeIdempotencyConflict)
	b, _ := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 43, Currency: "gold"})
	if b.Version != 2 || b.Balances[0].Total != 0 {
		t.Fatalf("after the replays: %+v", b)
	}
}

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

func TestInsufficientFundsWritesNothing(t *testing.T) {
	e := newEnv(t)
	e.mustChange(1, "a", free("gold", 100), free("silver", 5))
	_, err := e.change(1, "b", free("silver", -1), free("gold", -101))
	wantCode(t, err, coffer.CodeInsufficientFunds)
	b, _ := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 1})
	if b.Version != 1 || b.Balances[0].Total != 100 || b.Balances[1].Total != 5 {
		t.Fatalf("after a rejected trx: %+v", b)
	}
	// The key of the rejected request is free for a corrected retry.
	trx := e.mustChange(1, "b", free("silver", -1), free("gold", -100))
	if trx.Version != 2 {
		t.Fatalf("retry: %+v", trx)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'k'
	}
	past := time.Now().Add(-time.Hour)
	cases := []struct {
		key string
		ops []coffer.OpRequest
	}{
		{"zero", []coffer.OpRequest{free("gold", 0)}},
		{"too big", []coffer.OpRequest{free("gold", coffer.OpAmountMax+1)}},
		{"too negative", []coffer.OpRequest{free("gold", -coffer.OpAmountMax-1)}},
		{"unknown currency", []coffer.OpRequest{free("rubies", 1)}},
		{"paid free-only", []coffer.OpRequest{paid("credits", 1, "x")}},
		{"paid without purchase", []coffer.OpRequest{{Currency: "gold", Amount: 1, Kind: "paid"}}},
		{"expired grant", []coffer.OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &past}}},
		{"no ops", nil},
		{string(long), []coffer.OpRequest{free("gold", 1)}},
		{"", []coffer.OpRequest{free("gold", 1)}},
	}
	for _, c := range cases {
		_, err := e.change(3, c.key, c.ops...)
		wantCode(t, err, coffer.CodeInvalid)
	}
	if trx := e.mustChange(3, "max", free("gold", coffer.OpAmountMax)); trx.Balances[0].Total != coffer.OpAmountMax {
		t.Fatalf("10^15 grant: %+v", trx)
	}
}

func TestSpendOrder(t *testing.T) {
	e := newEnv(t)
	soon, later := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	e.mustChange(5, "g1", paid("gold", 10, "p1"))
	e.mustChange(5, "g2", free("gold", 10))
	e.mustChange(5, "g3", coffer.OpRequest{Currency: "gold", Amount: 10, ExpiresAt: &later})
	e.mustChange(5, "g4", coffer.OpRequest{Currency: "gold", Amount: 10, ExpiresAt: &soon})
	trx := e.mustChange(5, "spend", free("gold", -35))
	// soonest-expiring, then later-expiring, then free, then paid.
	var got []coffer.Amount
	for _, op := range trx.Ops {
		got = append(got, op.Amount)
	}
	if fmt.Sprint(got) != "[-10 -10 -10 -5]" || !trx.Ops[3].Paid || trx.Ops[2].Paid {
		t.Fatalf("ops = %+v", trx.Ops)
	}
	if b := e.balance(5, "gold"); b.Total != 5 || b.Paid != 5 {
		t.Fatalf("balance = %+v", b)
	}
}

func TestHoldLifecycle(t *testing.T) {
	e := newEnv(t)
	e.mustChange(7, "seed", paid("gold", 30, "p"), free("gold", 20))
	begin := func(key string, ttl time.Duration) coffer.Trx {
		trx, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(7, key), Hold: true, HoldTTL: ttl,
			Ops: []coffer.OpRequest{free("gold", -40), free("silver", 5)}})
		must(t, err)
		return trx
	}
	h := begin("h1", 0)
	if h.Status != coffer.StatusPending || e.balance(7, "gold").Total != 10 || e.balance(7, "silver").Total != 0 ||
		len(h.Balances) != 1 || h.Balances[0].Total != 10 || h.Balances[0].Paid != 10 {
		t.Fatalf("begin: %+v", h)
	}
	sameAnswer(t, h, begin("h1", 0))
	c, replayed, err := e.store.Commit(ctx, scope(7, "h1"))
	if err != nil || replayed || c.Status != coffer.StatusCommitted || e.balance(7, "silver").Total != 5 ||
		len(c.Balances) != 1 || c.Balances[0].Currency != "silver" || c.Balances[0].Total != 5 {
		t.Fatalf("commit: %+v %v %v", c, replayed, err)
	}
	again, replayed, err := e.store.Commit(ctx, scope(7, "h1"))
	if err != nil || !replayed {
		t.Fatalf("second commit: %v %v", replayed, err)
	}
	sameAnswer(t, c, again)
	_, _, err = e.store.Rollback(ctx, scope(7, "h1"))
	wantCode(t, err, coffer.CodeHoldNotPending)

	e.mustChange(7, "refill", free("gold", 30))
	before := e.balance(7, "gold")
	begin("h2", 0)
	r, _, err := e.store.Rollback(ctx, scope(7, "h2"))
	if err != nil || r.Status != coffer.StatusRolledBack || r.Balances[0].Total != before.Total {
		t.Fatalf("rollback: %+v %v", r, err)
	}
	again, _, err = e.store.Rollback(ctx, scope(7, "h2"))
	must(t, err)
	sameAnswer(t, r, again)
	after := e.balance(7, "gold")
	if fmt.Sprint(after.Lots) != fmt.Sprint(before.Lots) {
		t.Fatalf("rollback did not restore the very lots:\n%+v\n%+v", before.Lots, after.Lots)
	}
	_, _, err = e.store.Commit(ctx, scope(7, "h2"))
	wantCode(t, err, coffer.CodeHoldNotPending)

	begin("h3", time.Second)
	time.Sleep(1100 * time.Millisecond)
	n, err := e.store.SweepHolds(ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if n, _ := e.store.SweepHolds(ctx, 100); n != 0 {
		t.Fatalf("second sweep rolled back %d", n)
	}
	_, _, err = e.store.Commit(ctx, scope(7, "h3"))
	wantCode(t, err, coffer.CodeHoldExpired)
	if got := e.balance(7, "gold").Total; got != after.Total {
		t.Fatalf("expired hold kept %d", after.Total-got)
	}
	_, _, err = e.store.Commit(ctx, scope(7, "nope"))
	wantCode(t, err, coffer.CodeNotFound)
	_, _, err = e.store.Commit(ctx, scope(7, "seed"))
	wantCode(t, err, coffer.CodeHoldNotPending)
}

// sameAnswer fails unless a replay answered exactly what the write did.
func sameAnswer(t *testing.T, first, replay coffer.Trx) {
	t.Helper()
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(replay)
	if !bytes.Equal(a, b) {
		t.Fatalf("replay differs from the first answer:\n%s\n%s", a, b)
	}
}

func TestExchange(t *testing.T) {
	e := newEnv(t)
	e.mustChange(9, "seed", paid("gold", 3, "p"), free("gold", 2), free("silver", 19))
	ex := func(key, from, to string, amount coffer.Amount) (coffer.Trx, error) {
		trx, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(9, key), From: from, To: to, Amount: amount})
		return trx, err
	}
	// Free is spent first: 2 free + 1 paid gold → 100 paid silver, 200 free.
	if _, err := ex("x1", "gold", "silver", 3); err != nil {
		t.Fatal(err)
	}
	if b := e.balance(9, "silver"); b.Total != 319 || b.Paid != 100 {
		t.Fatalf("silver = %+v", b)
	}
	// Into a free-only currency: 19 silver → 1 credit (rounded down).
	if _, err := ex("x2", "silver", "credits", 19); err != nil {
		t.Fatal(err)
	}
	if b := e.balance(9, "credits"); b.Total != 1 || b.Paid != 0 {
		t.Fatalf("credits = %+v", b)
	}
	_, err := ex("x3", "silver", "credits", 9)
	wantCode(t, err, coffer.CodeInvalid) // yields 0
	_, err = ex("x4", "credits", "gold", 1)
	wantCode(t, err, coffer.CodeInvalid) // no such pair
	_, err = ex("x5", "gold", "silver", 10)
	wantCode(t, err, coffer.CodeInsufficientFunds)
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
		_, _, err := e.store.Commit(ctx, scope(p, "h1"))
		must(t, err)
	})
	step("h2 begun (rolled back later)", func() { hold("h2", -5) })
	step("h3 begun (pending to the end)", func() { hold("h3", -1) })
	step("h2 rolled back, after h3 begun", func() {
		_, _, err := e.store.Rollback(ctx, scope(p, "h2"))
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
	trx, _, err := e.store.Commit(ctx, scope(15, "h"))
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

// TestLotSweeperLooksBackToItsLastPass: after a complete pass, the lot
// sweeper looks only at expiries since that pass began (less the
// overlap), not at every expiry ever recorded, and so does a new instance
// (one just restarted): the shard's expiry_sweep_N keeps the window. With
// the window cleared, a pass looks at all of them once.
func TestLotSweeperLooksBackToItsLastPass(t *testing.T) {
	e := newEnv(t)
	later := time.Now().Add(time.Hour)
	e.mustChange(14, "a", coffer.OpRequest{Currency: "gold", Amount: 5, ExpiresAt: &later})
	if n, err := e.store.SweepExpiredLots(ctx, 100); err != nil || n != 0 {
		t.Fatalf("first pass: %d %v", n, err)
	}
	// A due expiry behind the window, which no write leaves unrecorded: the
	// lot's expiry moved an hour back.
	id := e.router.Map().ShardOf(14)
	_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE lot_%d SET expires_at = now() - interval '1 hour' WHERE player_id = 14`, id))
	must(t, err)
	if n, err := e.store.SweepExpiredLots(ctx, 100); err != nil || n != 0 {
		t.Fatalf("second pass: %d %v; want the lot behind its window left alone", n, err)
	}
	fresh := postgres.New(e.router, e.catalog, postgres.Options{})
	defer fresh.Close()
	if n, err := fresh.SweepExpiredLots(ctx, 100); err != nil || n != 0 {
		t.Fatalf("a new instance's first pass: %d %v; want the window kept", n, err)
	}
	if back := e.lotsWindow(id); back < 10*time.Minute || back > 11*time.Minute {
		t.Fatalf("the window starts %v back; want the last pass's start less ten minutes", back)
	}
	e.forgetLotSweeps()
	if n, err := fresh.SweepExpiredLots(ctx, 100); err != nil || n != 1 {
		t.Fatalf("a pass without a window: %d %v; want the lot recorded", n, err)
	}
	if got := e.expiries(14); len(got) != 1 || got[0].Amount != -5 {
		t.Fatalf("expiries = %+v", got)
	}
}

// TestLotSweeperWindowMovesOnlyFromWhatItListed: a pass moves the window
// only from the one it was listed from. One listed before the window was
// cleared (by an operator, to have every expiry looked at again) or moved
// by another instance leaves it as it is, so it cannot set back a window
// that lots it never listed are behind.
func TestLotSweeperWindowMovesOnlyFromWhatItListed(t *testing.T) {
	e := newEnv(t)
	id := coffer.ShardID(3)
	must(t, e.store.LotsSwept(ctx, id, nil, time.Now()))
	if back := e.lotsWindow(id); back < 10*time.Minute || back > 11*time.Minute {
		t.Fatalf("the first window starts %v back", back)
	}
	var listed time.Time
	must(t, e.router.Shard(id).QueryRow(ctx, fmt.Sprintf(`SELECT swept_to FROM expiry_sweep_%d`, id)).Scan(&listed))
	must(t, e.store.LotsSwept(ctx, id, &listed, time.Now().Add(10*time.Minute)))
	if back := e.lotsWindow(id); back > time.Minute {
		t.Fatalf("moved from what it listed, the window starts %v back; want the pass's start, ten minutes on", back)
	}
	// A pass listed from this window but begun long before never moves it
	// back.
	var moved time.Time
	must(t, e.router.Shard(id).QueryRow(ctx, fmt.Sprintf(`SELECT swept_to FROM expiry_sweep_%d`, id)).Scan(&moved))
	must(t, e.store.LotsSwept(ctx, id, &moved, time.Now().Add(-time.Hour)))
	if back := e.lotsWindow(id); back > time.Minute {
		t.Fatalf("a pass begun an hour ago moved the window back to %v", back)
	}
	// Passes listed from the old window, or from none, after it moved.
	must(t, e.store.LotsSwept(ctx, id, &listed, time.Now().Add(time.Hour)))
	must(t, e.store.LotsSwept(ctx, id, nil, time.Now().Add(time.Hour)))
	if back := e.lotsWindow(id); back > time.Minute || back < -time.Minute {
		t.Fatalf("passes listed from another window moved it to %v back", back)
	}
	e.forgetLotSweeps()
	must(t, e.store.LotsSwept(ctx, id, &listed, time.Now().Add(time.Hour)))
	var n int
	must(t, e.router.Shard(id).QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM expiry_sweep_%d`, id)).Scan(&n))
	if n != 0 {
		t.Fatal("a pass listed before the window was cleared set it again")
	}
}

// lotsWindow is how far back from now shard id's lot sweeper window starts.
func (e *env) lotsWindow(id coffer.ShardID) time.Duration {
	var back float64
	must(e.t, e.router.Shard(id).QueryRow(ctx, fmt.Sprintf(`SELECT extract(epoch FROM now() - swept_to) FROM expiry_sweep_%d`, id)).Scan(&back))
	return time.Duration(back * float64(time.Second))
}

// forgetLotSweeps clears every shard's lot sweeper window: the next pass
// looks at every expiry.
func (e *env) forgetLotSweeps() {
	for id := range e.router.Map().ShardCount() {
		_, err := e.router.Shard(coffer.ShardID(id)).Exec(ctx, fmt.Sprintf(`DELETE FROM expiry_sweep_%d`, id))
		must(e.t, err)
	}
}

// TestTimeoutBoundsTheLockWait: a write on a player whose lock another
// transaction holds gives up at the store's Timeout with shard_unavailable
// (retry with the same key), instead of waiting as long as the lock is
// held; the timeout bounds every statement of the write.
func TestTimeoutBoundsTheLockWait(t *testing.T) {
	e := newEnv(t)
	e.mustChange(19, "a", free("gold", 5))
	id := e.router.Map().ShardOf(19)
	tx := begin(t, e.router.Shard(id))
	_, err := tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM balance_%d WHERE ns = 1 AND player_id = 19 FOR UPDATE`, id))
	must(t, err)
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 300 * time.Millisecond})
	_, _, err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(19, "b"), Ops: []coffer.OpRequest{free("gold", 1)}})
	wantCode(t, err, coffer.CodeUnavailable)
}

// TestLotSweeperWindowWaitsForACompletePass: the window moves only after a
// pass that listed every due lot of a shard (fewer than limit) and
// recorded them all. A pass cut short by a player it could not lock, or by
// the limit, leaves it where it was, so the lots it missed are found next.
func TestLotSweeperWindowWaitsForACompletePass(t *testing.T) {
	e := newEnv(t)
	// Four players of one shard, each with a lot due an hour ago: behind
	// the window of any complete pass (moved back by hand, as no write
	// leaves them).
	id := e.router.Map().ShardOf(20)
	players := []coffer.PlayerID{20}
	for p := coffer.PlayerID(21); len(players) < 4; p++ {
		if e.router.Map().ShardOf(p) == id {
			players = append(players, p)
		}
	}
	later := time.Now().Add(time.Hour)
	dueAnHourAgo := func(ps ...coffer.PlayerID) {
		t.Helper()
		for _, p := range ps {
			e.mustChange(p, "a", coffer.OpRequest{Currency: "gold", Amount: 5, ExpiresAt: &later})
			_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE lot_%d SET expires_at = now() - interval '1 hour' WHERE player_id = %d`, id, p))
			must(t, err)
		}
	}
	sweep := func(store *postgres.Store, limit, want int, failing bool) {
		t.Helper()
		if n, err := store.SweepExpiredLots(ctx, limit); n != want || (err != nil) != failing {
			t.Fatalf("pass (limit %d): %d players, error %v; want %d, failing %v", limit, n, err, want, failing)
		}
	}

	// A player locked elsewhere: its pass fails, the next finds it.
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 300 * time.Millisecond})
	dueAnHourAgo(players[0], players[1])
	tx := begin(t, e.router.Shard(id))
	_, err := tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM balance_%d WHERE ns = 1 AND player_id = %d FOR UPDATE`, id, players[0]))
	must(t, err)
	sweep(store, 100, 1, true)
	must(t, tx.Rollback(ctx))
	sweep(store, 100, 1, false)

	// A pass that reached its limit: the next one finds the rest.
	e.forgetLotSweeps()
	dueAnHourAgo(players[2], players[3])
	sweep(store, 1, 1, false)
	sweep(store, 1, 1, false)
	sweep(store, 1, 0, false)
}

// TestLotSweeperWindowFailuresFailTheirShardOnly: a shard whose window
// cannot be read is not swept, and one whose window cannot be moved has
// its expiries recorded all the same; either way the pass's error says
// so, and the other shards are swept.
func TestLotSweeperWindowFailuresFailTheirShardOnly(t *testing.T) {
	e := newEnv(t)
	broken, other := coffer.PlayerID(67), coffer.PlayerID(68)
	for e.router.Map().ShardOf(other) == e.router.Map().ShardOf(broken) {
		other++
	}
	id := e.router.Map().ShardOf(broken)
	later := time.Now().Add(time.Hour)
	for _, p := range []coffer.PlayerID{broken, other} {
		e.mustChange(p, "a", coffer.OpRequest{Currency: "gold", Amount: 5, ExpiresAt: &later})
		_, err := e.router.Shard(e.router.Map().ShardOf(p)).Exec(ctx,
			fmt.Sprintf(`UPDATE lot_%d SET expires_at = now() - interval '1 hour' WHERE player_id = %d`, e.router.Map().ShardOf(p), p))
		must(t, err)
	}
	exec := func(sql string) {
		t.Helper()
		_, err := e.router.Shard(id).Exec(ctx, shard.Tables(sql, id))
		must(t, err)
	}
	// Whether the player's expiry is recorded (a balance read leaves
	// expired coins out either way).
	recorded := func(p coffer.PlayerID) bool {
		t.Helper()
		var n int
		sh := e.router.Map().ShardOf(p)
		must(t, e.router.Shard(sh).QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM op_%d WHERE player_id = %d AND kind = 'expire'`, sh, p)).Scan(&n))
		return n > 0
	}
	exec(`ALTER TABLE expiry_sweep_N RENAME TO expiry_sweep_away`)
	if n, err := e.store.SweepExpiredLots(ctx, 100); n != 1 || err == nil || !strings.Contains(err.Error(), "expiry_sweep") ||
		recorded(broken) || !recorded(other) {
		t.Fatalf("window unreadable: %d players swept, error %v", n, err)
	}
	exec(`ALTER TABLE expiry_sweep_away RENAME TO expiry_sweep_N`)
	exec(`CREATE FUNCTION window_broken() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'window broken'; END$$`)
	exec(`CREATE TRIGGER window_broken BEFORE INSERT OR UPDATE ON expiry_sweep_N FOR EACH ROW EXECUTE FUNCTION window_broken()`)
	if n, err := e.store.SweepExpiredLots(ctx, 100); n != 1 || err == nil || !strings.Contains(err.Error(), "window broken") || !recorded(broken) {
		t.Fatalf("window unmovable: %d players swept, error %v", n, err)
	}
	exec(`DROP TRIGGER window_broken ON expiry_sweep_N`)
}

// TestSweepersTryFailingCandidatesApart: a player whose sweep fails at
// every pass (a damaged lot) does not starve the others of its shard,
// though it is the oldest due and fills the listing's limit: the next
// pass tries it apart and lists the rest. Its lots keep the lot
// sweeper's window until, repaired, a pass records them.
func TestSweepersTryFailingCandidatesApart(t *testing.T) {
	e := newEnv(t)
	damaged, other := coffer.PlayerID(70), coffer.PlayerID(71)
	for e.router.Map().ShardOf(other) != e.router.Map().ShardOf(damaged) {
		other++
	}
	id := e.router.Map().ShardOf(damaged)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := e.router.Shard(id).Exec(ctx, shard.Tables(sql, id), args...)
		must(t, err)
	}
	later := time.Now().Add(time.Hour)
	for i, p := range []coffer.PlayerID{damaged, other} {
		e.mustChange(p, "a", coffer.OpRequest{Currency: "gold", Amount: 5, ExpiresAt: &later}, free("silver", 5), free("gold", 5))
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", -1)}})
		must(t, err)
		exec(`UPDATE lot_N SET expires_at = now() - $2 * interval '1 hour' WHERE player_id = $1 AND expires_at IS NOT NULL`, p, 2-i)
		exec(`UPDATE trx_N SET hold_expires_at = now() - $2 * interval '1 hour' WHERE player_id = $1 AND status = 'pending'`, p, 2-i)
	}
	exec(`UPDATE lot_N SET reserved = -1 WHERE player_id = $1 AND currency = 2`, damaged)
	e.forgetLotSweeps()
	windows := func() int {
		var n int
		must(t, e.router.Shard(id).QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM expiry_sweep_%d`, id)).Scan(&n))
		return n
	}
	pass := func(name string, sweep func(context.Context, int) (int, error), want int, failing bool) {
		t.Helper()
		if n, err := sweep(ctx, 1); n != want || (err != nil) != failing {
			t.Fatalf("%s (limit 1): %d done, error %v; want %d, failing %v", name, n, err, want, failing)
		}
	}
	pass("lot sweep", e.store.SweepExpiredLots, 0, true)
	pass("lot sweep", e.store.SweepExpiredLots, 1, true)
	if len(e.expiries(other)) != 1 || windows() != 0 {
		t.Fatalf("the other player's expiries %+v, %d windows; want it recorded, the window kept", e.expiries(other), windows())
	}
	pass("hold sweep", e.store.SweepHolds, 0, true)
	pass("hold sweep", e.store.SweepHolds, 1, true)
	exec(`UPDATE lot_N SET reserved = 0 WHERE player_id = $1 AND currency = 2`, damaged)
	pass("lot sweep, repaired", e.store.SweepExpiredLots, 1, false)
	pass("hold sweep, repaired", e.store.SweepHolds, 1, false)
	if len(e.expiries(damaged)) == 0 || windows() != 1 {
		t.Fatalf("the repaired player's expiries %+v, %d windows", e.expiries(damaged), windows())
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

// TestRevenue: two purchases of 499 (USD cents), 100 and 50 gold; 30
// spent (149.7: 150) and 10 exchanged (of 70 coins worth 349: 49.9, 50).
func TestRevenue(t *testing.T) {
	e := newEnv(t)
	from := time.Now().Add(-time.Minute)
	e.mustChange(15, "buy", paid("gold", 100, "o"))
	e.mustChange(16, "buy", paid("gold", 50, "o2"))
	e.mustChange(15, "spend", free("gold", -30))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(15, "ex"), From: "gold", To: "silver", Amount: 10})
	must(t, err)
	want := "gold USD: opening 0 deposited 150 recognised 30 converted 0/10 expired 0 refunded 0/0 deferred 110 | " +
		"value: opening 0 deposited 998 recognised 150 converted 0/50 expired 0 refunded 0/0 deferred 798\n" +
		"silver USD: opening 0 deposited 0 recognised 0 converted 1000/0 expired 0 refunded 0/0 deferred 1000 | " +
		"value: opening 0 deposited 0 recognised 0 converted 50/0 expired 0 refunded 0/0 deferred 50"
	if got := e.revenue(from, time.Now().Add(time.Minute)); got != want {
		t.Fatalf("revenue:\n%s\nwant\n%s", got, want)
	}
}

// TestConcurrentWrites runs grants, consumes and holds on one player and on
// others in parallel, with two sweepers; the totals must equal the sum of
// what succeeded.
func TestConcurrentWrites(t *testing.T) {
	e := newEnv(t)
	const workers, rounds = 12, 25
	var mu sync.Mutex
	sum := map[coffer.PlayerID]coffer.Amount{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				player := coffer.PlayerID(100 + (w+i)%3)
				key := fmt.Sprintf("w%d-%d", w, i)
				amount := coffer.Amount(1 + (w*7+i)%13)
				if i%4 == 3 {
					amount = -amount
				}
				hold := i%5 == 4
				trx, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(player, key), Hold: hold, Ops: []coffer.OpRequest{free("gold", amount)}})
				if err != nil {
					if coffer.ErrorCode(err) != coffer.CodeInsufficientFunds {
						t.Error(err)
					}
					continue
				}
				if hold {
					if i%2 == 0 {
						_, _, err = e.store.Commit(ctx, scope(player, key))
					} else {
						_, _, err = e.store.Rollback(ctx, scope(player, key))
						amount = 0
					}
					if err != nil {
						t.Error(err)
					}
				}
				mu.Lock()
				sum[player] += amount
				mu.Unlock()
				_ = trx
			}
		}(w)
	}
	stop := make(chan struct{})
	var sweepers sync.WaitGroup
	for i := 0; i < 2; i++ {
		sweepers.Add(1)
		go func() {
			defer sweepers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.store.SweepHolds(ctx, 10); err != nil {
					t.Error(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(stop)
	sweepers.Wait()
	for player, want := range sum {
		if got := e.balance(player, "gold").Total; got != want {
			t.Errorf("player %d: balance %d, sum of accepted ops %d", player, got, want)
		}
	}
}

func TestSameKeyInParallelAppliesOnce(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	ids := make([]int64, 10)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			trx, err := e.change(21, "once", free("gold", 5))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = trx.ID
		}(i)
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("different trx ids for one key: %v", ids)
		}
	}
	if b := e.balance(21, "gold"); b.Total != 5 {
		t.Fatalf("applied more than once: %+v", b)
	}
}

// TestAuditFindsDamage corrupts rows behind the store's back; the audit must
// report each kind of damage.
func TestAuditFindsDamage(t *testing.T) {
	cases := map[string]string{
		"lot differs from its ops":                   "UPDATE lot_%d SET amount = amount + 1",
		"balance_after chain broken":                 "DELETE FROM op_%d WHERE seq = 0 AND kind = 'grant' AND amount = 5",
		"balance differs from its ops":               "INSERT INTO op_%[1]d SELECT trx_id, seq + 10, ns, player_id, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, created_at, purchase, pos + 10 FROM op_%[1]d WHERE amount = 7",
		"player order broken":                        "UPDATE op_%d SET pos = pos - 1 WHERE amount = 7",
		"lot reservation differs from pending holds": "UPDATE lot_%d SET reserved = 3",
		"balance above its bound":                    "UPDATE lot_%d SET reserved = 1000000000000000000",
		"too many lots": "INSERT INTO lot_%[1]d SELECT ns, player_id, lot_id + i, currency, paid, 1, expires_at, priority, created_at, trx_id, 0 " +
			"FROM lot_%[1]d, generate_series(1, 1000) AS i",
	}
	for check, damage := range cases {
		t.Run(check, func(t *testing.T) {
			e := newEnv(t)
			e.mustChange(31, "a", free("gold", 5))
			e.mustChange(31, "b", free("gold", 7))
			e.auditFinds(31, check, damage)
		})
	}
}

// TestAuditFindsAHoldBegunAtItsFinishVersion: a finished hold's begin
// version must be below its finish's (balances at a past time answer it).
func TestAuditFindsAHoldBegunAtItsFinishVersion(t *testing.T) {
	e := newEnv(t)
	e.mustChange(31, "a", free("gold", 5))
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(31, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", -2)}})
	must(t, err)
	_, _, err = e.store.Commit(ctx, scope(31, "h"))
	must(t, err)
	e.auditFinds(31, "version went back", "UPDATE trx_%d SET begin_version = version WHERE kind = 'hold'")
}

// TestAHoldFinishedWithoutItsBeginVersion: a finished hold's row that
// lost its begin's version cannot give its first answer again: the audit
// finds it, and a replay of its begin is internal, not the hold as now.
func TestAHoldFinishedWithoutItsBeginVersion(t *testing.T) {
	e := newEnv(t)
	e.mustChange(32, "a", free("gold", 5))
	req := coffer.ChangeRequest{Scope: scope(32, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", -2)}}
	_, _, err := e.store.Change(ctx, req)
	must(t, err)
	_, _, err = e.store.Rollback(ctx, scope(32, "h"))
	must(t, err)
	e.auditFinds(32, "version went back", "UPDATE trx_%d SET begin_version = NULL WHERE kind = 'hold'")
	_, _, err = e.store.Change(ctx, req)
	wantCode(t, err, coffer.CodeInternal)
}

// auditFinds runs damage, an SQL statement with the shard's number for
// %d, on player's shard, and wants the audit to report check.
func (e *env) auditFinds(player coffer.PlayerID, check, damage string) {
	e.t.Helper()
	e.damaged = true
	s := e.router.Map().ShardOf(player)
	if _, err := e.router.Shard(s).Exec(ctx, fmt.Sprintf(damage, s)); err != nil {
		e.t.Fatal(err)
	}
	r, err := (&audit.Checker{Router: e.router}).Check(ctx)
	must(e.t, err)
	for _, v := range r.Violations {
		if v.Check == check {
			return
		}
	}
	e.t.Fatalf("audit missed %q: %+v", check, r.Violations)
}

// TestShardDownIsUnavailableAndRecovers stops the server of one database:
// its players get shard_unavailable, the other database's players keep
// working, and the same key succeeds once the server is back.
func TestShardDownIsUnavailableAndRecovers(t *testing.T) {
	own, err := pgserver.Start(ctx, pgserver.Options{})
	must(t, err)
	t.Cleanup(own.Remove) // after the env's closing audit, which needs it up
	e := newEnvOn(t, pgtest.Server(t, 0), own)
	var up, down coffer.PlayerID
	for p := coffer.PlayerID(1); up == 0 || down == 0; p++ {
		if e.router.Map().DatabaseOf(e.router.Map().ShardOf(p)).Index == 0 {
			up = p
		} else {
			down = p
		}
	}
	e.mustChange(up, "a", free("gold", 5))
	e.mustChange(down, "a", free("gold", 5))
	must(t, own.Stop())
	_, err = e.change(down, "b", free("gold", 1))
	wantCode(t, err, coffer.CodeUnavailable)
	// The failure marked the database down: the next request is refused
	// without trying to connect.
	_, err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: down})
	wantCode(t, err, coffer.CodeUnavailable)
	if !strings.Contains(err.Error(), "down (a connection failed") {
		t.Fatalf("not refused fast: %v", err)
	}
	e.mustChange(up, "b", free("gold", 1))
	// The audit checks every shard it reaches and reports each check it
	// could not run, without stopping at the first.
	r, err := (&audit.Checker{Router: e.router}).Check(ctx)
	if err == nil || len(r.Violations) > 0 || len(r.Failures) == 0 || r.Totals["1/1"] == nil || r.Totals["1/1"].Int64() != 6 {
		t.Fatalf("audit with a database down: %v\n%+v", err, r)
	}
	for _, f := range r.Failures {
		if e.router.Map().DatabaseOf(f.Shard).Index != 1 {
			t.Fatalf("a check failed on a shard that is up: %+v", f)
		}
	}
	must(t, own.Start(ctx))
	// Once the cooldown is over, the same key goes through.
	deadline := time.Now().Add(shard.DownCooldown + 5*time.Second)
	for {
		_, err = e.change(down, "b", free("gold", 1))
		if coffer.ErrorCode(err) != coffer.CodeUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, err)
	if b := e.balance(down, "gold"); b.Total != 6 {
		t.Fatalf("after recovery: %+v", b)
	}
}

func TestTrxRead(t *testing.T) {
	e := newEnv(t)
	want := e.mustChange(51, "k", free("gold", 3))
	got, err := e.store.Trx(ctx, scope(51, "k"))
	if err != nil || got.ID != want.ID || got.Kind != coffer.TrxChange || len(got.Ops) != 1 || got.Ops[0].BalanceAfter != 3 {
		t.Fatalf("Trx = %+v, %v", got, err)
	}
	_, err = e.store.Trx(ctx, scope(51, "other"))
	wantCode(t, err, coffer.CodeNotFound)
	_, err = e.store.Trx(ctx, scope(0, "k"))
	wantCode(t, err, coffer.CodeInvalid)
}

func TestFinlogFilters(t *testing.T) {
	e := newEnv(t)
	e.mustChange(53, "a", free("gold", 1))
	mid := time.Now()
	e.mustChange(53, "b", free("silver", 2))
	if _, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(53, "c"), Reason: "quest", Ops: []coffer.OpRequest{free("gold", 3)}}); err != nil {
		t.Fatal(err)
	}
	// pageOf is the keys of q's page, and its cursor.
	pageOf := func(q coffer.FinlogQuery) (string, string) {
		t.Helper()
		q.Namespace, q.PlayerID = 1, 53
		page, err := e.store.Finlog(ctx, q)
		must(t, err)
		var ks []string
		for _, trx := range page.Items {
			ks = append(ks, trx.IdempotencyKey)
		}
		return fmt.Sprint(ks), page.NextCursor
	}
	keys := func(q coffer.FinlogQuery) string {
		t.Helper()
		ks, _ := pageOf(q)
		return ks
	}
	for _, c := range []struct {
		q    coffer.FinlogQuery
		want string
	}{
		{coffer.FinlogQuery{Currency: "gold"}, "[a c]"},
		{coffer.FinlogQuery{Reason: "quest"}, "[c]"},
		{coffer.FinlogQuery{From: &mid}, "[b c]"},
		{coffer.FinlogQuery{To: &mid}, "[a]"},
		{coffer.FinlogQuery{Desc: true, Limit: 2}, "[c b]"},
	} {
		if got := keys(c.q); got != c.want {
			t.Errorf("finlog %+v = %s, want %s", c.q, got, c.want)
		}
	}
	// A cursor is a position: given with the other order, it pages the
	// other way from there.
	first, cursor := pageOf(coffer.FinlogQuery{Limit: 2})
	if first != "[a b]" || cursor == "" {
		t.Fatalf("first page %s, cursor %q", first, cursor)
	}
	for desc, want := range map[bool]string{false: "[c]", true: "[a]"} {
		if got := keys(coffer.FinlogQuery{Cursor: cursor, Desc: desc}); got != want {
			t.Errorf("after [a b], desc %v: %s, want %s", desc, got, want)
		}
	}
	_, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 53, Cursor: "garbage"})
	wantCode(t, err, coffer.CodeInvalid)
	_, err = e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 53, Limit: coffer.FinlogLimitMax + 1})
	wantCode(t, err, coffer.CodeInvalid)
}

// TestFinlogFilterScanIsBounded: a page with a filter looks at
// FinlogScanMax trx at most, so a trx that few pass is not searched for
// through the whole history: the page answers what its scan found, even
// nothing, and a cursor from where the scan stopped; paging on finds
// every trx, both ways, and the last page has no cursor.
func TestFinlogFilterScanIsBounded(t *testing.T) {
	e := newEnv(t)
	const p = 54
	e.mustChange(p, "g1", free("gold", 1))
	var mid time.Time
	for i := range 8 {
		if i == 4 {
			mid = time.Now()
		}
		e.mustChange(p, fmt.Sprint("s", i), free("silver", 1))
	}
	e.mustChange(p, "g2", free("gold", 1))
	bounded := postgres.New(e.router, e.catalog, postgres.Options{FinlogScanMax: 4})
	// pages are the keys of each page of q, each with "+" when it has a
	// cursor.
	pages := func(store *postgres.Store, q coffer.FinlogQuery) string {
		t.Helper()
		q.Namespace, q.PlayerID = 1, p
		var out []string
		for {
			page, err := store.Finlog(ctx, q)
			must(t, err)
			var ks []string
			for _, trx := range page.Items {
				ks = append(ks, trx.IdempotencyKey)
			}
			if page.NextCursor == "" {
				return strings.Join(append(out, fmt.Sprint(ks)), " ")
			}
			out, q.Cursor = append(out, fmt.Sprint(ks)+"+"), page.NextCursor
		}
	}
	for _, c := range []struct {
		store *postgres.Store
		q     coffer.FinlogQuery
		want  string
	}{
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1}, "[g1]+ []+ [g2]"},
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1, Desc: true}, "[g2]+ []+ [g1]"},
		{bounded, coffer.FinlogQuery{Reason: "test", Limit: 3}, "[g1 s0 s1]+ [s2 s3 s4]+ [s5 s6 s7]+ [g2]"},
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1, To: &mid}, "[g1]+ []"},
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1, From: &mid, Desc: true}, "[g2]+ []"},
		{e.store, coffer.FinlogQuery{Currency: "gold", Limit: 1}, "[g1]+ [g2]"},
	} {
		if got := pages(c.store, c.q); got != c.want {
			t.Errorf("finlog %+v = %s, want %s", c.q, got, c.want)
		}
	}
}

// TestBalancesRead: a read lists the currencies the player holds in
// currency id order, whatever order their lots came in; a named currency
// is listed even at zero; a player with nothing has an empty list.
func TestBalancesRead(t *testing.T) {
	e := newEnv(t)
	e.mustChange(21, "a", free("credits", 3))
	e.mustChange(21, "b", free("silver", 5))
	e.mustChange(21, "c", free("gold", 7), paid("gold", 11, "o-1"))
	b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 21})
	must(t, err)
	want := []coffer.Balance{{Currency: "gold", Total: 18, Paid: 11, Free: 7}, {Currency: "silver", Total: 5, Free: 5}, {Currency: "credits", Total: 3, Free: 3}}
	if b.Version != 3 || !reflect.DeepEqual(b.Balances, want) {
		t.Fatalf("balances: %+v, want %+v", b, want)
	}
	b, err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 22, Currency: "silver"})
	must(t, err)
	if !reflect.DeepEqual(b.Balances, []coffer.Balance{{Currency: "silver"}}) {
		t.Fatalf("a named currency at zero: %+v", b)
	}
	b, err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 22})
	must(t, err)
	if b.Balances == nil || len(b.Balances) != 0 {
		t.Fatalf("a player with nothing: %#v", b.Balances)
	}
}

// TestLotsLoadEveryField: a lot loads back with every field the ledger
// gave it. Each field of coffer.BookLot but New and Changed (what a plan
// did to it) is set in some lot of the player below: a field stored but
// not loaded, or added to the lot without its column, fails here instead
// of in a rule that reads it (as the lot's trx did, once).
func TestLotsLoadEveryField(t *testing.T) {
	e := newEnv(t)
	const p = 72
	e.mustChange(p, "buy", paid("gold", 10, "o-72"))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(p, "ex"), From: "gold", To: "silver", Amount: 5})
	must(t, err)
	expires := time.Now().Add(time.Hour)
	e.mustChange(p, "reward", coffer.OpRequest{Currency: "credits", Amount: 5, ExpiresAt: &expires, Priority: 3})
	_, _, err = e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "hold"), Ops: []coffer.OpRequest{free("silver", -100)}, Hold: true})
	must(t, err)
	e.mustChange(p, "buy-2", paid("silver", 10, "o-72-2"))
	e.mustRefund(refundOf(p, "r", "o-72"))
	lots, err := e.store.Lots(ctx, e.router.Map().ShardOf(p), 1, p)
	must(t, err)
	typ := reflect.TypeFor[coffer.BookLot]()
	for _, f := range reflect.VisibleFields(typ) {
		if f.Anonymous || f.Name == "New" || f.Name == "Changed" {
			continue
		}
		set := false
		for _, l := range lots {
			set = set || !reflect.ValueOf(*l).FieldByIndex(f.Index).IsZero()
		}
		if !set {
			t.Errorf("no lot loaded with %s set: %d lots", f.Name, len(lots))
		}
	}
}

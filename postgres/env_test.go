package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	var dbs []shard.DatabaseConfig
	for _, s := range servers {
		d := pgtest.NewDBOn(t, s)
		dbs = append(dbs, shard.DatabaseConfig{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(),
			User: pgserver.Superuser, Password: pgserver.Password})
	}
	return newEnvFor(t, dbs)
}

// newGuardedEnv is newEnv with one database, on primary, that has
// standby as its second host (coffer then follows a failover) and
// requires a synchronous standby, as coffer serve does under
// require_synchronous_standby.
func newGuardedEnv(t *testing.T, primary, standby *pgserver.Server) *env {
	t.Helper()
	d := pgtest.NewDBOn(t, primary)
	e := newEnvFor(t, []shard.DatabaseConfig{{Name: d.Name, User: pgserver.Superuser, Password: pgserver.Password,
		Hosts: []string{fmt.Sprintf("127.0.0.1:%d", primary.Port()), fmt.Sprintf("127.0.0.1:%d", standby.Port())}}})
	e.router.RequireSynchronousStandby()
	return e
}

// newEnvFor is newEnv with the given databases, four shards on each.
func newEnvFor(t *testing.T, dbs []shard.DatabaseConfig) *env {
	t.Helper()
	cfg := shard.Config{ShardCount: 4 * len(dbs), DistributionMode: "auto", ShardOnDB: 4, Databases: dbs}
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

// byItsClient is a commit or rollback of the hold of scope(player, key)
// by the client that began it.
func byItsClient(player coffer.PlayerID, key string) coffer.FinishRequest {
	sc := scope(player, key)
	return coffer.FinishRequest{Scope: sc, By: sc.Emitter}
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

// sameAnswer fails unless a replay answered exactly what the write did.
func sameAnswer(t *testing.T, first, replay coffer.Trx) {
	t.Helper()
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(replay)
	if !bytes.Equal(a, b) {
		t.Fatalf("replay differs from the first answer:\n%s\n%s", a, b)
	}
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

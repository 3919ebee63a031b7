package move_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shard/move"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

var ctx = context.Background()

// env is a deployment of 4 shards, 0–1 on database 0 and 2–3 on database
// 1 (on two servers), migrated, plus a third database, migrated, that
// holds none yet; a store serving it and a mover, each with a router of
// its own, as two processes would have.
type env struct {
	t     *testing.T
	cfg   shard.Config
	dbs   []pgtest.DB
	store *postgres.Store
	// router is the store's.
	router *shard.Router
	mover  *move.Mover
	out    *bytes.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, pgtest.Server(t, 0), pgtest.Server(t, 1), pgtest.Server(t, 0))
}

// newEnvOn is newEnv with its three databases on the given servers.
func newEnvOn(t *testing.T, servers ...*pgserver.Server) *env {
	t.Helper()
	e := &env{t: t, cfg: shard.Config{ShardCount: 4, DistributionMode: "manual"}, out: &bytes.Buffer{}}
	for i, r := range [][]shard.Range{{{Min: 0, Max: 1}}, {{Min: 2, Max: 3}}, {}} {
		d := pgtest.NewDBOn(t, servers[i])
		e.dbs = append(e.dbs, d)
		e.cfg.Databases = append(e.cfg.Databases, shard.DatabaseConfig{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(),
			User: pgserver.Superuser, Password: pgserver.Password, Shards: r})
	}
	m, err := shard.NewMap(e.cfg)
	must(t, err)
	schema, err := migrate.SchemaEngine(m, nil)
	must(t, err)
	must(t, schema.Apply(ctx, migrate.Options{TargetVersion: -1}))
	e.router = e.openRouter()
	cat, err := coffer.NewCatalog([]coffer.Currency{{ID: 1, Code: "gold", Paid: true}}, 10*time.Minute, time.Hour)
	must(t, err)
	e.store = postgres.New(e.router, cat, postgres.Options{})
	e.mover = &move.Mover{Router: e.openRouter(), Engine: schema, Out: e.out}
	t.Cleanup(func() {
		e.store.Close()
		if t.Failed() {
			t.Logf("mover:\n%s", e.out)
		}
		e.dropReplication()
	})
	return e
}

// dropReplication drops what a failed test's moves left of logical
// replication, which would keep its databases from being dropped.
func (e *env) dropReplication() {
	for _, d := range e.dbs {
		conn := d.Conn(e.t)
		rows, _ := conn.Query(ctx, "SELECT subname FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())")
		subs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, sub := range subs {
			for _, sql := range []string{"ALTER SUBSCRIPTION %s DISABLE", "ALTER SUBSCRIPTION %s SET (slot_name = NONE)", "DROP SUBSCRIPTION %s"} {
				_, _ = conn.Exec(ctx, fmt.Sprintf(sql, pgx.Identifier{sub}.Sanitize()))
			}
		}
	}
	for _, d := range e.dbs {
		_, _ = d.Conn(e.t).Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
	}
}

// openRouter opens a router on the env's config, closed at the end.
func (e *env) openRouter() *shard.Router {
	m, err := shard.NewMap(e.cfg)
	must(e.t, err)
	r, err := shard.Open(m, shard.DefaultPoolConfig())
	must(e.t, err)
	e.t.Cleanup(r.Close)
	must(e.t, r.Refresh(ctx))
	return r
}

// schema is coffer's schema and the migrations of more after it, on the
// map the store's router reads now.
func (e *env) schema(t *testing.T, more fstest.MapFS) *migrate.Engine {
	t.Helper()
	must(t, e.router.Refresh(ctx))
	engine, err := migrate.SchemaEngine(e.router.Map(), nil)
	must(t, err)
	ms, err := migrate.Load(more, "test")
	must(t, err)
	engine.Migrations = append(engine.Migrations, ms...)
	return engine
}

// name is database i's name (shard.Database.Name).
func (e *env) name(i int) string { return e.router.Map().Databases()[i].Name() }

// playerOn is the first player from `from` on shard s.
func (e *env) playerOn(s coffer.ShardID, from coffer.PlayerID) coffer.PlayerID {
	for p := from; ; p++ {
		if shard.Jump(uint64(p), 4) == int64(s) {
			return p
		}
	}
}

func (e *env) grant(p coffer.PlayerID, key string) error {
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: coffer.Scope{Namespace: 1, PlayerID: p, Emitter: 1, IdempotencyKey: key},
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: 1, Kind: "free"}}, Reason: "test"})
	return err
}

func (e *env) gold(p coffer.PlayerID) coffer.Amount {
	e.t.Helper()
	b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p, Currency: "gold"})
	must(e.t, err)
	if len(b.Balances) == 0 {
		return 0
	}
	return b.Balances[0].Total
}

// auditClean runs the audit by the store's map on every database.
func (e *env) auditClean() {
	e.t.Helper()
	must(e.t, e.router.Refresh(ctx))
	r, err := (&audit.Checker{Router: e.router, HoldGrace: time.Hour}).Check(ctx)
	must(e.t, err)
	if !r.Clean() {
		e.t.Fatalf("audit: %+v", r)
	}
}

// count is what sql counts on database i.
func (e *env) count(i int, sql string, args ...any) int {
	e.t.Helper()
	var n int
	must(e.t, e.dbs[i].Conn(e.t).QueryRow(ctx, sql, args...).Scan(&n))
	return n
}

// leftovers counts the publications, subscriptions and replication slots
// of moves on database i and its server.
func (e *env) leftovers(i int) string {
	e.t.Helper()
	conn := e.dbs[i].Conn(e.t)
	var pubs, subs, slots int
	must(e.t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_publication),
		(SELECT count(*) FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())),
		(SELECT count(*) FROM pg_replication_slots WHERE database = current_database())`).Scan(&pubs, &subs, &slots))
	return fmt.Sprintf("publications %d, subscriptions %d, slots %d", pubs, subs, slots)
}

// waitFor waits until cond holds, for a minute at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

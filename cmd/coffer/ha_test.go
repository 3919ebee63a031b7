package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// TestRequireSynchronousStandby: with require_synchronous_standby, a
// database whose standby stops refuses writes at once with
// shard_unavailable (instead of each commit waiting for a standby that is
// gone), still serves reads, while the other database serves writes; its
// writes resume when the standby is back. Status and metrics show it.
func TestRequireSynchronousStandby(t *testing.T) {
	primary, err := pgserver.Start(ctx, pgserver.Options{Settings: pgserver.ReplicationSettings()})
	must(t, err)
	t.Cleanup(primary.Remove)
	standby, err := pgserver.StartStandby(ctx, primary, pgserver.Options{Settings: pgserver.ReplicationSettings()})
	must(t, err)
	t.Cleanup(standby.Remove)
	must(t, primary.RequireSynchronousStandby(ctx))
	hosts := []string{fmt.Sprintf("127.0.0.1:%d", primary.Port()), fmt.Sprintf("127.0.0.1:%d", standby.Port())}
	s := startService(t, []*pgserver.Server{primary, pgtest.Server(t, 0)}, func(cfg *Config) {
		cfg.RequireSynchronousStandby = true
		cfg.Databases[0].Host, cfg.Databases[0].Port, cfg.Databases[0].Hosts = "", 0, hosts
	})
	t.Cleanup(func() { _ = standby.Start(ctx) }) // before the database is dropped, which waits for it
	guarded, other := playersByDatabase(s)
	change := func(p coffer.PlayerID, key string) response {
		return s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/transactions", p), devKey,
			`{"idempotency_key": "`+key+`", "ops": [{"currency": "gold", "amount": 5}]}`)
	}
	r := change(guarded, "a")
	wantStatus(t, r, 201, "")
	st := waitStatus(t, s, func(db coffer.DatabaseStatus) bool {
		return db.SynchronousStandbys != nil && *db.SynchronousStandbys == 1
	})
	if st.Primary != hosts[0] || st.WritesRefused {
		t.Fatalf("status of the guarded database: %+v", st)
	}

	must(t, standby.Stop())
	st = waitStatus(t, s, func(db coffer.DatabaseStatus) bool { return db.WritesRefused })
	if *st.SynchronousStandbys != 0 || !st.Up {
		t.Fatalf("status without the standby: %+v", st)
	}
	wantStatus(t, change(guarded, "b"), 503, coffer.CodeUnavailable)
	wantStatus(t, change(other, "b"), 201, "")
	// Refused, not sent: a write whose COMMIT waited for the standby
	// until its time ran out would have committed on the primary (the
	// balance would read 10).
	if b := balanceOf(t, s.dev, guarded, "gold"); b.Total != 5 {
		t.Fatalf("the refused write was applied: %+v", b)
	}
	metrics := s.metrics()
	if !strings.Contains(metrics, fmt.Sprintf(`coffer_database_synchronous_standbys{database="%s/`, strings.Join(hosts, ","))+s.m.Databases()[0].Config.Name+`"} 0`) {
		t.Fatalf("metrics do not show the missing standby:\n%s", grepLines(metrics, "coffer_database_synchronous_standbys"))
	}

	must(t, standby.Start(ctx))
	deadline := time.Now().Add(15 * time.Second)
	for r = change(guarded, "b"); r.status == 503 && time.Now().Before(deadline); r = change(guarded, "b") {
		time.Sleep(100 * time.Millisecond)
	}
	wantStatus(t, r, 201, "")
}

// waitStatus waits until the first database's status satisfies ok.
func waitStatus(t *testing.T, s *service, ok func(coffer.DatabaseStatus) bool) coffer.DatabaseStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := s.dev.Status(ctx)
		must(t, err)
		if ok(st.Databases[0]) {
			return st.Databases[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: %+v", st.Databases[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConnectionOnAReadOnlyServerReconnects: when the server a database's
// connections reach stops taking writes (as a primary turned standby
// does), the write that finds out fails with shard_unavailable and the
// pool reconnects at once, to the host that takes writes: the next write
// succeeds, without waiting for the probe.
func TestConnectionOnAReadOnlyServerReconnects(t *testing.T) {
	a, err := pgserver.Start(ctx, pgserver.Options{})
	must(t, err)
	t.Cleanup(a.Remove)
	b, err := pgserver.Start(ctx, pgserver.Options{})
	must(t, err)
	t.Cleanup(b.Remove)
	hosts := []string{fmt.Sprintf("127.0.0.1:%d", a.Port()), fmt.Sprintf("127.0.0.1:%d", b.Port())}
	s := startService(t, []*pgserver.Server{a, pgtest.Server(t, 0)}, func(cfg *Config) {
		cfg.Databases[0].Host, cfg.Databases[0].Port, cfg.Databases[0].Hosts = "", 0, hosts
		// One connection: without the reconnect, every write would get it.
		cfg.Pool.ConnsMax = 1
		// b holds the same database, migrated: where writes go next.
		onB := cfg.Config
		onB.Databases = []shard.DatabaseConfig{cfg.Databases[0], cfg.Databases[1]}
		onB.Databases[0].Hosts = hosts[1:]
		must(t, createDatabase(ctx, b, onB.Databases[0].Name))
		m, err := shard.NewMap(onB)
		must(t, err)
		must(t, applySchema(ctx, m, cfg.Env, io.Discard))
	})
	onA, _ := playersByDatabase(s)
	change := func(key string) response {
		return s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/transactions", onA), devKey,
			`{"idempotency_key": "`+key+`", "ops": [{"currency": "gold", "amount": 5}]}`)
	}
	wantStatus(t, change("a"), 201, "")
	setReadOnly(t, a)
	// A backend rereads its settings after its next command, so a write
	// on a connection that has run none since is still applied on a: one
	// per connection of the batches' pool (a committer's and a reader's)
	// at most. The write that finds out is refused, and the pool
	// reconnects to b.
	i := 0
	for ; ; i++ {
		r := change(fmt.Sprint("b", i))
		if r.status != 201 || i == 2 {
			wantStatus(t, r, 503, coffer.CodeUnavailable)
			break
		}
	}
	for j := i + 1; j < i+4; j++ {
		wantStatus(t, change(fmt.Sprint("b", j)), 201, "")
	}
}

// setReadOnly makes every session of s, open ones included, read-only,
// and returns once the postmaster has reloaded its settings: a new
// session starts read-only. The postmaster signals the open sessions in
// the same step, so each rereads its settings after its next command; a
// test that went on before the signal arrived would have the command
// after that one still write (seen on a loaded machine).
func setReadOnly(t *testing.T, s *pgserver.Server) {
	t.Helper()
	execSQL(t, s, "ALTER SYSTEM SET default_transaction_read_only = on", "SELECT pg_reload_conf()")
	t.Cleanup(func() { // before the test's database is dropped
		execSQL(t, s, "ALTER SYSTEM RESET default_transaction_read_only", "SELECT pg_reload_conf()")
	})
	waitFor(t, func() bool {
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		must(t, err)
		defer conn.Close(ctx)
		var on string
		must(t, conn.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&on))
		return on == "on"
	})
}

func execSQL(t *testing.T, s *pgserver.Server, sqls ...string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	must(t, err)
	defer conn.Close(ctx)
	for _, sql := range sqls {
		_, err := conn.Exec(ctx, sql)
		must(t, err)
	}
}

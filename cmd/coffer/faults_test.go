package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// playersByDatabase returns one player on each database of s.
func playersByDatabase(s *service) (onFirst, onSecond coffer.PlayerID) {
	ps := firstPlayers(s.m, 1)
	return ps[0], ps[1]
}

// TestShardServerDown stops the server of one shard database mid-test: its
// players get 503 with Retry-After, without waiting for the request's
// time; the others keep working; the instance stays ready; status and
// metrics show it; all recover after the restart.
func TestShardServerDown(t *testing.T) {
	own, err := pgserver.Start(ctx, pgserver.Options{})
	must(t, err)
	t.Cleanup(own.Remove) // after the service's closing audit, which needs it up
	// A request's time long enough that an answer that waited for it
	// cannot be taken for one slowed by a busy machine.
	const request = time.Minute
	s := startService(t, []*pgserver.Server{pgtest.Server(t, 0), own}, func(c *Config) { c.Timeouts.Request, c.Timeouts.Write = request, request })
	up, down := playersByDatabase(s)
	change := func(p coffer.PlayerID, key string) response {
		return s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/transactions", p), devKey,
			`{"idempotency_key": "`+key+`", "ops": [{"currency": "gold", "amount": 3}]}`)
	}
	wantStatus(t, change(up, "a"), 201, "")
	wantStatus(t, change(down, "a"), 201, "")
	must(t, own.Stop())

	r := change(down, "b")
	wantStatus(t, r, 503, coffer.CodeUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	start := time.Now()
	wantStatus(t, s.call("GET", fmt.Sprintf("/v1/namespaces/1/players/%d/balances", down), devKey, ""), 503, coffer.CodeUnavailable)
	if d := time.Since(start); d > request/2 {
		t.Fatalf("a request to a down database took %s: it waited for the request's time", d)
	}
	wantStatus(t, change(up, "b"), 201, "")
	batchFailsAlone(t, s, up, down)
	wantStatus(t, s.call("GET", "/readyz", "", ""), 200, "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := s.dev.Status(ctx)
		must(t, err)
		if !st.Databases[1].Up && st.ShardsAvailable == 4 && st.Databases[1].Error != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not show the database down: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	metrics := s.metrics()
	if !strings.Contains(metrics, `coffer_database_up{database="127.0.0.1:`+fmt.Sprint(own.Port())) || !strings.Contains(metrics, "coffer_shards_available 4") ||
		!strings.Contains(metrics, `coffer_errors_total{code="shard_unavailable"}`) {
		t.Fatalf("metrics do not show the outage:\n%s", grepLines(metrics, "coffer_database_up", "coffer_shards_available", "coffer_errors_total"))
	}

	must(t, own.Start(ctx))
	deadline = time.Now().Add(15 * time.Second)
	for {
		r = change(down, "b")
		if r.status != 503 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantStatus(t, r, 201, "")
	if b := balanceOf(t, s.dev, down, "gold"); b.Total != 6 {
		t.Fatalf("after recovery: %+v", b)
	}
}

// batchFailsAlone: in a batch, over HTTP and gRPC, the change of a player
// whose database is down fails alone, and the log, which the call's own
// line does not tell, says so.
func batchFailsAlone(t *testing.T, s *service, up, down coffer.PlayerID) {
	t.Helper()
	a := s.batch(devKey, fmt.Sprintf(`{"changes": [
		{"player_id": %d, "idempotency_key": "c", "ops": [{"currency": "gold", "amount": 1}]},
		{"player_id": %d, "idempotency_key": "c", "ops": [{"currency": "gold", "amount": 1}]}]}`, up, down))
	if a.Results[0].Status != 201 || a.Results[1].Status != 503 || a.Results[1].Error.Code != coffer.CodeUnavailable {
		t.Fatalf("batch: %+v", a.Results)
	}
	grpcBatch, err := s.grpc.BatchChange(grpcCtx(devKey), &cofferv1.BatchChangeRequest{Namespace: 1, Changes: []*cofferv1.BatchChange{
		{PlayerId: int64(down), IdempotencyKey: "d", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}},
		{PlayerId: int64(up), IdempotencyKey: "d", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}}}})
	must(t, err)
	if grpcBatch.Results[0].Error == nil || grpcBatch.Results[1].Error != nil {
		t.Fatalf("gRPC batch: %v", grpcBatch.Results)
	}
	// The change that failed is the second of the HTTP batch, the first
	// of the gRPC one.
	type line struct {
		Msg, Code, Transport string
		Failed, First        int
	}
	var lines []line
	for _, raw := range strings.Split(strings.TrimSpace(s.logs.String()), "\n") {
		var l line
		must(t, json.Unmarshal([]byte(raw), &l))
		lines = append(lines, l)
	}
	for transport, first := range map[string]int{"http": 1, "grpc": 0} {
		want := line{Msg: "batch changes failed", Code: string(coffer.CodeUnavailable), Transport: transport, Failed: 1, First: first}
		if !slices.Contains(lines, want) {
			t.Fatalf("no log line %+v:\n%s", want, s.logs.String())
		}
	}
}

func grepLines(text string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestGracefulShutdownDrains holds a player's lock from outside so that
// requests are in flight when shutdown starts: they finish (201), new
// connections and gRPC calls are refused, and Shutdown returns once they
// are done.
func TestGracefulShutdownDrains(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	const p = 5
	_, _, err := s.dev.Change(ctx, 1, p, grant("seed", "gold", 10))
	must(t, err)
	conn, tx := lockPlayer(t, s, p)

	const inFlight = 4
	var wg sync.WaitGroup
	errs := make([]error, inFlight)
	for i := range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = s.dev.Change(ctx, 1, p, grant(fmt.Sprintf("drain-%d", i), "gold", 1))
		}()
	}
	waitFor(t, func() bool {
		return strings.Contains(s.metrics(), fmt.Sprintf("coffer_requests_in_flight %d", inFlight))
	})
	stopped := make(chan struct{})
	go func() { s.stop(); close(stopped) }()
	waitFor(t, func() bool {
		_, err := http.Get(s.base + "/healthz")
		return err != nil
	})
	// gRPC stops taking calls too while HTTP drains, not once it is done.
	waitFor(t, func() bool {
		_, err := s.grpc.GetBalances(grpcCtx(devKey), &cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: p + 1})
		return err != nil
	})
	select {
	case <-stopped:
		t.Fatal("shutdown returned with requests in flight")
	case <-time.After(300 * time.Millisecond):
	}
	must(t, tx.Rollback(ctx))
	<-stopped
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("in-flight request %d: %v", i, err)
		}
	}
	var total int64
	must(t, conn.QueryRow(ctx, fmt.Sprintf("SELECT sum(amount) FROM lot_%d WHERE ns = 1 AND player_id = $1", s.m.ShardOf(p)), p).Scan(&total))
	if total != 10+inFlight {
		t.Fatalf("gold after drain: %d", total)
	}
}

// lockPlayer takes player p's lock (its balance row: p must have written)
// in a transaction of its own, so that p's writes wait until tx ends. The
// connection is closed at the test's end.
func lockPlayer(t *testing.T, s *service, p coffer.PlayerID) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	sh := s.m.ShardOf(p)
	conn, err := pgx.Connect(ctx, s.m.DatabaseOf(sh).Config.ConnString(5))
	must(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	must(t, err)
	_, err = tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM balance_%d WHERE ns = 1 AND player_id = $1 FOR UPDATE", sh), p)
	must(t, err)
	return conn, tx
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestShardServerFrozen freezes (SIGSTOP) one shard database's server: its
// players get 503 once the request timeout passes, the others are served
// meanwhile, and all recover after SIGCONT.
func TestShardServerFrozen(t *testing.T) {
	own, err := pgserver.Start(ctx, pgserver.Options{})
	must(t, err)
	t.Cleanup(own.Remove)
	s := startService(t, []*pgserver.Server{pgtest.Server(t, 0), own}, func(c *Config) { c.Timeouts.Request = time.Second })
	up, frozen := playersByDatabase(s)
	_, _, err = s.dev.Change(ctx, 1, frozen, grant("a", "gold", 1))
	must(t, err)
	must(t, own.Pause())
	resumed := false
	defer func() {
		if !resumed {
			_ = own.Resume()
		}
	}()
	done := make(chan response)
	go func() {
		done <- s.call("GET", fmt.Sprintf("/v1/namespaces/1/players/%d/balances", frozen), devKey, "")
	}()
	_, _, err = s.dev.Change(ctx, 1, up, grant("a", "gold", 1))
	must(t, err)
	select {
	case r := <-done:
		wantStatus(t, r, 503, coffer.CodeUnavailable)
	case <-time.After(5 * time.Second):
		t.Fatal("a request to a frozen database hangs past its timeout")
	}
	must(t, own.Resume())
	resumed = true
	waitFor(t, func() bool {
		_, _, err := s.dev.Change(ctx, 1, frozen, grant("b", "gold", 1))
		return err == nil
	})
	if b := balanceOf(t, s.dev, frozen, "gold"); b.Total != 2 {
		t.Fatalf("after resume: %+v", b)
	}
}

// TestOperationsListener: metrics and the profiler are served on the
// operations listener until shutdown, not on the API's port (metrics name
// the database hosts); shard availability is in the metrics from the
// start, not only after the first probe; a sweeper pass that panics is a
// failed pass, not a dead instance.
func TestOperationsListener(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	if m := s.metrics(); !strings.Contains(m, "coffer_shards_available 8") {
		t.Fatalf("metrics at start:\n%s", grepLines(m, "coffer_shards"))
	}
	for _, path := range []string{"/metrics", "/debug/pprof/"} {
		wantStatus(t, s.call("GET", path, "", ""), 404, coffer.CodeNotFound)
		if r := s.opsGet(path); r.status != 200 {
			t.Fatalf("ops %s: HTTP %d", path, r.status)
		}
	}
	s.main.sweep(ctx, "holds", func(context.Context, int) (int, error) { panic("a row the sweeper trips on") })
	if m := s.metrics(); !strings.Contains(m, `coffer_sweeper_runs_total{outcome="error",sweeper="holds"} 1`) {
		t.Fatalf("a panicking pass is not counted as failed:\n%s", grepLines(m, "coffer_sweeper_runs_total"))
	}
	url := "http://" + s.main.OpsAddr + "/metrics"
	s.stop()
	if _, err := http.Get(url); err == nil {
		t.Fatal("the operations listener still serves after shutdown")
	}
}

// TestDatabaseDownAtStartIsLogged: a database that cannot be reached from
// the first check (here a wrong password) is logged at start with why,
// as a database going down later is; otherwise its players' calls fail
// with shard_unavailable and nothing says why.
func TestDatabaseDownAtStartIsLogged(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	cfg := *s.main.Config
	cfg.Databases = slices.Clone(cfg.Databases)
	cfg.Databases[1].Password = "not-the-password"
	cfg.Listen = ListenConfig{HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0"}
	m, err := shard.NewMap(cfg.Config)
	must(t, err)
	main, logs := startMain(t, &cfg, m)
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	defer func() { must(t, main.Shutdown(sctx)) }()
	name := m.Databases()[1].Name()
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"msg":"database state","database":"`+name+`","up":false`) && strings.Contains(line, "password authentication failed") {
			return
		}
	}
	t.Fatalf("no warning names %s and why it is down:\n%s", name, logs.String())
}

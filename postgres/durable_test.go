package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/postgres"
	"github.com/jackc/pgx/v5"
)

// TestCutCommitIsAnsweredOnceTheStandbyHasIt: a batch's COMMIT waits for
// the synchronous standby, which is frozen, and its backend is then
// terminated (a primary's fast shutdown does so): PostgreSQL completes
// that COMMIT on the primary alone. The next attempt reads the batch's
// mark and finds it applied; it must not answer the write applied until
// a COMMIT of its own has waited for the standby too, or a failover to
// the standby would lose an acknowledged write. The same holds for a
// retry that finds the write stored and answers it as a replay.
func TestCutCommitIsAnsweredOnceTheStandbyHasIt(t *testing.T) {
	primary, standby := pgtest.SynchronousPair(t, nil)
	e := newEnvOn(t, primary, primary)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 60 * time.Second, LockTimeout: 60 * time.Second})
	defer store.Close()
	p := e.playersOn(0, 1, 1)[0]
	e.mustChange(p, "before", free("gold", 1))

	must(t, standby.Pause())
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = standby.Resume()
		}
	})
	answered := make(chan coffer.ChangeResult, 1)
	go func() {
		var r coffer.ChangeResult
		r.Trx, r.Replay, r.Err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "cut"), Ops: []coffer.OpRequest{free("gold", 5)}})
		answered <- r
	}()
	first := e.waitForSyncRep(answered)
	var killed bool
	must(t, e.router.Database(0).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, first).Scan(&killed))
	if !killed {
		t.Fatalf("backend %d not terminated", first)
	}
	e.waitForSyncRep(answered, first) // the next attempt's COMMIT, which waits for the standby
	must(t, standby.Resume())
	paused = false
	r := <-answered
	if r.Err != nil || r.Replay {
		t.Fatalf("the write: replay %v, %v; want applied", r.Replay, r.Err)
	}

	// A retry finds it stored: its replay waits for the standby as well.
	must(t, standby.Pause())
	paused = true
	go func() {
		var r coffer.ChangeResult
		r.Trx, r.Replay, r.Err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "cut"), Ops: []coffer.OpRequest{free("gold", 5)}})
		answered <- r
	}()
	e.waitForSyncRep(answered)
	must(t, standby.Resume())
	paused = false
	if r := <-answered; r.Err != nil || !r.Replay {
		t.Fatalf("the retry: replay %v, %v; want a replay", r.Replay, r.Err)
	}
	if b := e.balance(p, "gold"); b.Total != 6 {
		t.Fatalf("the player holds %d gold, want 6", b.Total)
	}
}

// waitForSyncRep returns the pid of a backend of database 0, not one of
// not, whose COMMIT waits for the synchronous standby. A write answered
// meanwhile fails the test: it was answered before the standby had it.
func (e *env) waitForSyncRep(answered <-chan coffer.ChangeResult, not ...int32) int32 {
	e.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case r := <-answered:
			e.t.Fatalf("answered (replay %v, %v) while the synchronous standby was frozen", r.Replay, r.Err)
		default:
		}
		var pid int32
		err := e.router.Database(0).QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event = 'SyncRep' AND datname = current_database() AND pid <> ALL($1) LIMIT 1`, append(not, 0)).Scan(&pid)
		if err == nil {
			return pid
		}
	}
	e.t.Fatal("no COMMIT waits for the synchronous standby")
	return 0
}

// TestCommitConfirmedByALogicalWalsenderIsNotAcknowledged: under
// synchronous_standby_names '*' (Patroni's strict synchronous mode with
// no replica to name, and this test's pair) a logical walsender that
// confirms what it receives, as a shard move's subscription does, is
// picked as the synchronous standby once the physical one stops, and its
// confirmation releases COMMITs no physical standby has. Until a probe
// notices, writes are still sent: such a write must not be answered
// applied (a failover would lose it) but as a COMMIT cut off. Once the
// physical standby has it, a retry is answered as a replay.
func TestCommitConfirmedByALogicalWalsenderIsNotAcknowledged(t *testing.T) {
	e, primary, standby := newGuardedPair(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 2 * time.Second})
	defer store.Close()
	p := e.playersOn(0, 1, 1)[0]
	e.mustChange(p, "before", free("gold", 1))

	var dsn string
	must(t, e.router.Database(0).QueryRow(ctx, "SELECT current_database()").Scan(&dsn))
	stopConsumer := pgtest.ConfirmingConsumer(t, primary.DSN(dsn))
	must(t, standby.Stop())
	t.Cleanup(func() { _ = standby.Start(ctx) }) // the database's drop waits for it
	e.waitTrue("the consumer was not picked as the synchronous standby", `SELECT count(*) > 0 FROM pg_stat_replication
		WHERE application_name = 'other-consumer' AND state = 'streaming' AND sync_state = 'sync'`)
	alone := coffer.ChangeRequest{Scope: scope(p, "alone"), Ops: []coffer.OpRequest{free("gold", 5)}}
	_, _, err := store.Change(ctx, alone)
	wantCode(t, err, coffer.CodeUnavailable) // not applied, whatever the consumer confirmed
	if b := e.balance(p, "gold"); b.Total != 6 {
		t.Fatalf("the player holds %d gold on the primary, want 6 (the write committed there)", b.Total)
	}
	// A purchase's claim, committed before its change, waits the same.
	_, _, err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "bought"), Ops: []coffer.OpRequest{paid("gold", 1, "order-1")}})
	wantCode(t, err, coffer.CodeUnavailable)
	if !strings.Contains(err.Error(), "claim") {
		t.Fatalf("the purchase: %v; want its claim refused", err)
	}

	stopConsumer()
	must(t, standby.Start(ctx))
	must(t, primary.WaitSynchronousStandby(ctx, time.Minute))
	if _, replay, err := store.Change(ctx, alone); err != nil || !replay {
		t.Fatalf("the retry: replay %v, %v; want a replay", replay, err)
	}
}

// TestCommitReleasedByAnEmptiedSettingIsNotAcknowledged: a Patroni agent
// restarting on a primary whose standby took over empties
// synchronous_standby_names before it demotes the server, and the
// COMMITs waiting there for the standby complete on the primary alone.
// Such a write must not be answered applied: a fault run lost three
// acknowledged writes so (docs/reliability.md).
func TestCommitReleasedByAnEmptiedSettingIsNotAcknowledged(t *testing.T) {
	e, _, standby := newGuardedPair(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 5 * time.Second})
	defer store.Close()
	p := e.playersOn(0, 1, 1)[0]
	e.mustChange(p, "before", free("gold", 1))
	// Patroni names its synchronous standby while it has one.
	var name string
	must(t, e.router.Database(0).QueryRow(ctx, "SELECT application_name FROM pg_stat_replication").Scan(&name))
	for _, sql := range []string{"ALTER SYSTEM SET synchronous_standby_names = '" + pgx.Identifier{name}.Sanitize() + "'", "SELECT pg_reload_conf()"} {
		_, err := e.router.Database(0).Exec(ctx, sql)
		must(t, err)
	}
	e.waitTrue("the named standby is not the synchronous standby", "SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync'")
	e.mustChange(p, "named", free("gold", 1))

	must(t, standby.Stop())
	t.Cleanup(func() { _ = standby.Start(ctx) }) // the database's drop waits for it
	answered := make(chan coffer.ChangeResult, 1)
	go func() {
		var r coffer.ChangeResult
		r.Trx, r.Replay, r.Err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "alone"), Ops: []coffer.OpRequest{free("gold", 5)}})
		answered <- r
	}()
	e.waitForSyncRep(answered)
	for _, sql := range []string{"ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()"} {
		_, err := e.router.Database(0).Exec(ctx, sql)
		must(t, err)
	}
	r := <-answered
	wantCode(t, r.Err, coffer.CodeUnavailable) // on the primary alone, whatever the setting says now
}

// newGuardedPair is newGuardedEnv on a primary and its synchronous
// standby of the test's own, under synchronous_standby_names '*'.
func newGuardedPair(t *testing.T) (e *env, primary, standby *pgserver.Server) {
	t.Helper()
	primary, standby = pgtest.SynchronousPair(t, nil)
	return newGuardedEnv(t, primary, standby), primary, standby
}

// waitTrue waits until database 0 answers query (a boolean) with true,
// and fails the test with failure after a generous bound.
func (e *env) waitTrue(failure, query string) {
	e.t.Helper()
	var ok bool
	for deadline := time.Now().Add(60 * time.Second); !ok; time.Sleep(10 * time.Millisecond) {
		must(e.t, e.router.Database(0).QueryRow(ctx, query).Scan(&ok))
		if time.Now().After(deadline) {
			e.t.Fatal(failure)
		}
	}
}

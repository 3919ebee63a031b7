package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestWriteOnAPlayerChangedSinceItsSnapshot: a batch reads its players
// without their locks, at one snapshot (docs/adr/0026-batch-snapshot.md).
// Another transaction that changes a player after that snapshot and
// before the batch's write must not be written over: the write fails,
// and the batch runs again, careful, on what that transaction left. The
// other transaction commits while the batch plans its second write (the
// plan clock: a batch reads it before each write but the first).
func TestWriteOnAPlayerChangedSinceItsSnapshot(t *testing.T) {
	e := newEnv(t)
	// meanwhile runs a batch of writes whose first attempt sees sql run
	// (its shard's number for the verb, player for $1), on the shard of
	// player, between its reads and its write, and returns the writes'
	// answers.
	meanwhile := func(player coffer.PlayerID, sql string, reqs ...coffer.ChangeRequest) []coffer.ChangeResult {
		t.Helper()
		store := postgres.New(e.router, e.catalog, postgres.Options{})
		defer store.Close()
		id := e.router.Map().ShardOf(player)
		ran := false
		store.SetPlanClock(func() time.Time {
			if !ran {
				ran = true
				_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(sql, id), player)
				must(t, err)
			}
			return time.Now()
		})
		got, err := store.BatchChange(ctx, reqs)
		must(t, err)
		if !ran {
			t.Fatal("the batch did not plan a second write")
		}
		return got
	}
	ps := e.playersOn(0, 1, 4)

	t.Run("its lots spent", func(t *testing.T) {
		e.mustChange(ps[0], "grant", free("gold", 10))
		got := meanwhile(ps[0], `WITH spent AS (UPDATE lot_%[1]d SET amount = 0 WHERE ns = 1 AND player_id = $1)
			UPDATE balance_%[1]d SET version = version + 1 WHERE ns = 1 AND player_id = $1`,
			coffer.ChangeRequest{Scope: scope(ps[0], "spend"), Ops: []coffer.OpRequest{free("gold", -10)}},
			coffer.ChangeRequest{Scope: scope(ps[1], "grant"), Ops: []coffer.OpRequest{free("gold", 1)}})
		wantCode(t, got[0].Err, coffer.CodeInsufficientFunds)
		must(t, got[1].Err)
		// The lot as its ops have it, for the audit at the end.
		id := e.router.Map().ShardOf(ps[0])
		_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE lot_%d SET amount = 10 WHERE ns = 1 AND player_id = $1`, id), ps[0])
		must(t, err)
	})

	t.Run("its row inserted", func(t *testing.T) {
		got := meanwhile(ps[2], `INSERT INTO balance_%d (ns, player_id, version, updated_at, pos) VALUES (1, $1, 5, now(), 0)`,
			coffer.ChangeRequest{Scope: scope(ps[2], "grant"), Ops: []coffer.OpRequest{free("gold", 7)}},
			coffer.ChangeRequest{Scope: scope(ps[3], "grant"), Ops: []coffer.OpRequest{free("gold", 1)}})
		must(t, got[0].Err)
		must(t, got[1].Err)
		if v := got[0].Trx.Version; v != 6 {
			t.Fatalf("the grant is at version %d, want 6: one after the row the other transaction inserted", v)
		}
	})
}

// TestCutAttemptAtItsSnapshotIsReadOnceItEnds: a batch's first attempt,
// which read at its snapshot and takes no player's lock before its write
// statement, is cut off while the server has that statement and its
// COMMIT but has not run them through: held (by a trigger, until the
// test lets go of an advisory lock) as it sets its mark, which it does
// first, or later, as it writes the player's row. The next attempt plans
// the grant again once its expires_at has passed, and refuses it
// (invalid): that answer must hold. With the mark read unlocked and the
// refusal rolled back, the first attempt went on to apply the grant
// answered invalid. Now the next attempt reads the mark locked
// (readMark) and commits even a refusal, and the first, which needs the
// player's row the next one locked, fails (either part alone would do
// here: the test holds the first attempt where the next one's locks stop
// it). The expiry starts at 2 s and doubles until the first attempt plans
// before it.
func TestCutAttemptAtItsSnapshotIsReadOnceItEnds(t *testing.T) {
	e := newEnv(t)
	db := e.router.Database(0)
	// The gate holds a batch's write statement, in the first case as it
	// raises its mark's token, in the second as it writes the player's
	// row (a version raised: not the lock's).
	_, err := db.Exec(ctx, `CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			held bool := false;
		BEGIN
			IF TG_TABLE_NAME = 'batch_mark' THEN
				held := NEW.token <> OLD.token;
			ELSIF TG_OP = 'INSERT' THEN
				held := NEW.version > 0;
			ELSE
				held := NEW.version <> OLD.version;
			END IF;
			IF held THEN
				WHILE NOT pg_try_advisory_xact_lock(4242) LOOP PERFORM pg_sleep(0.01); END LOOP;
			END IF;
			RETURN NEW;
		END $$`)
	must(t, err)
	gate, err := db.Acquire(ctx)
	must(t, err)
	defer gate.Release()
	players := e.playersOn(0, 1, 16)
	for _, at := range []string{"at its mark", "at the player's row"} {
		t.Run(at, func(t *testing.T) {
			for expiry := 2 * time.Second; ; expiry *= 2 {
				if expiry > time.Minute {
					t.Fatal("the first attempt never planned before the grant's expiry")
				}
				var p coffer.PlayerID
				p, players = players[0], players[1:]
				table := "batch_mark"
				if at == "at the player's row" {
					table = fmt.Sprintf("balance_%d", e.router.Map().ShardOf(p))
				}
				_, err := db.Exec(ctx, `DROP TRIGGER IF EXISTS gate ON batch_mark;
					CREATE TRIGGER gate BEFORE INSERT OR UPDATE ON `+table+` FOR EACH ROW EXECUTE FUNCTION gate()`)
				must(t, err)
				done := cutAndRefused(t, e, gate, p, expiry)
				_, err = db.Exec(ctx, `DROP TRIGGER gate ON `+table)
				must(t, err)
				if done {
					return
				}
			}
		})
	}
}

// cutAndRefused runs the scenario of
// TestCutAttemptAtItsSnapshotIsReadOnceItEnds on player p with a grant
// that expires after expiry, and returns false if the first attempt
// planned too late for it.
func cutAndRefused(t *testing.T, e *env, gate *pgxpool.Conn, p coffer.PlayerID, expiry time.Duration) bool {
	db := e.router.Database(0)
	cutter, _, store := e.storeThroughCutter(postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	// The store's first batch writes its mark anew (no UPDATE): this
	// one does.
	_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "first"), Ops: []coffer.OpRequest{free("gold", 1)}})
	must(t, err)
	var expires time.Time
	must(t, db.QueryRow(ctx, `SELECT now() + $1::interval`, expiry.String()).Scan(&expires))
	_, err = gate.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	must(t, err)
	type answer struct {
		trx coffer.Trx
		err error
	}
	done := make(chan answer, 1)
	go func() {
		trx, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "grant"), Ops: []coffer.OpRequest{{Currency: "gold", Amount: 10, ExpiresAt: &expires}}})
		done <- answer{trx, err}
	}()
	// The first attempt at the gate (its write statement: its text
	// as pg_stat_activity keeps it, cut short, starts with the trx),
	// or answered without it (its plan too late for the expiry: a
	// longer one then).
	var early *answer
	var first int32
	for early == nil && first == 0 {
		first = e.backendIn(0, "PgSleep", "WITH trx AS (INSERT INTO trx_%")
		select {
		case a := <-done:
			early = &a
		case <-time.After(10 * time.Millisecond):
		}
	}
	if early != nil {
		_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
		must(t, err)
		return false
	}
	for past := false; !past; {
		must(t, db.QueryRow(ctx, `SELECT now() > $1`, expires).Scan(&past))
		time.Sleep(10 * time.Millisecond)
	}
	cutter.cutClients()
	// The next attempt waits for a lock, or answers.
	var got *answer
	for got == nil && e.backendIn(0, "Lock", "%") == 0 {
		select {
		case a := <-done:
			got = &a
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	must(t, err)
	if got == nil {
		a := <-done
		got = &a
	}
	// The first attempt's transaction, to its end: committed, or failed
	// (aborted, its client gone: the server ends it later).
	for ended := false; !ended; time.Sleep(10 * time.Millisecond) {
		must(t, db.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_activity
			WHERE pid = $1 AND state IN ('active', 'idle in transaction'))`, first).Scan(&ended))
	}
	stored, err := e.store.Trx(ctx, scope(p, "grant"))
	switch {
	case got.err == nil:
		must(t, err)
		sameAnswer(t, got.trx, stored)
	case coffer.ErrorCode(got.err) == coffer.CodeInvalid:
		if err == nil {
			t.Fatalf("the grant answered %v, and applied by the attempt cut off: %+v", got.err, stored)
		}
		wantCode(t, err, coffer.CodeNotFound)
	default:
		t.Fatal(got.err)
	}
	return true
}

// backendIn is the pid of a backend of database db other than this
// connection's in state (its state, wait_event_type or wait_event)
// running a statement like query, or 0.
func (e *env) backendIn(db int, state, query string) int32 {
	e.t.Helper()
	var pid int32
	err := e.router.Database(db).QueryRow(ctx, `SELECT pid FROM pg_stat_activity
		WHERE $1 IN (state, wait_event_type, wait_event) AND query LIKE $2 AND pid <> pg_backend_pid() LIMIT 1`, state, query).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	must(e.t, err)
	return pid
}

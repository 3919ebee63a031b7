package postgres_test

import (
	"context"
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
	gate := newGate(t, e)
	players := e.playersOn(0, 1, 16)
	for _, at := range []string{"at its mark", "at the player's row"} {
		t.Run(at, func(t *testing.T) {
			players = gate.untilPlannedInTime(t, at, players, func(p coffer.PlayerID, expiry time.Duration) bool {
				return cutAndRefused(t, e, gate.conn, p, expiry)
			})
		})
	}
}

// gate holds a batch's write statement on database 0 until the test
// lets go of an advisory lock, whichever table its trigger is on: as it
// raises its mark's token (which it sets first, before it locks any
// player); as it writes a player's row (a version raised: not the
// lock's), before it locks it (an upsert's BEFORE INSERT trigger fires
// first); or as it inserts a trx, past the players' locks.
type gate struct {
	e    *env
	conn *pgxpool.Conn
}

func newGate(t *testing.T, e *env) *gate {
	db := e.router.Database(0)
	_, err := db.Exec(ctx, `CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			held bool := false;
		BEGIN
			IF TG_TABLE_NAME = 'batch_mark' THEN
				held := NEW.token <> OLD.token;
			ELSIF TG_TABLE_NAME LIKE 'trx\_%' THEN
				held := true;
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
	conn, err := db.Acquire(ctx)
	must(t, err)
	t.Cleanup(conn.Release)
	return &gate{e: e, conn: conn}
}

// untilPlannedInTime runs scenario, with the gate at (its mark, the
// player's row, or past it), on the next of players and a grant's expiry of 2 s,
// doubled for the next player until the scenario tells the first
// attempt planned before it; it returns the players left.
func (g *gate) untilPlannedInTime(t *testing.T, at string, players []coffer.PlayerID, scenario func(coffer.PlayerID, time.Duration) bool) []coffer.PlayerID {
	db := g.e.router.Database(0)
	for expiry := 2 * time.Second; ; expiry *= 2 {
		if expiry > time.Minute {
			t.Fatal("the first attempt never planned before the grant's expiry")
		}
		var p coffer.PlayerID
		p, players = players[0], players[1:]
		table := "batch_mark"
		switch at {
		case "at the player's row":
			table = fmt.Sprintf("balance_%d", g.e.router.Map().ShardOf(p))
		case "past the player's row":
			table = fmt.Sprintf("trx_%d", g.e.router.Map().ShardOf(p))
		}
		done := func() bool {
			_, err := db.Exec(ctx, `CREATE TRIGGER gate BEFORE INSERT OR UPDATE ON `+table+` FOR EACH ROW EXECUTE FUNCTION gate()`)
			must(t, err)
			// Also when the scenario fails: the next one starts clean.
			defer func() {
				_, err := db.Exec(ctx, `DROP TRIGGER gate ON `+table)
				must(t, err)
				_, err = g.conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
				must(t, err)
			}()
			return scenario(p, expiry)
		}()
		if done {
			return players
		}
	}
}

// TestRetryRefusedWhileItsFirstCopyIsInFlight: a grant's call ends
// while its batch, which read at its snapshot, is still on the server,
// held by the gate; the answer is "retry with the same key", whether the
// caller gave up or settle could not read whether the batch's COMMIT was
// applied (the database found unwritable after the cut). The client
// retries through another instance once the grant's expires_at has
// passed. The retry's answer must hold: before, the retry refused the
// grant (invalid) at its own snapshot, locking and writing nothing, and
// the first copy went on to apply it. Now a refusal at a snapshot runs
// again careful: held at its mark, the first copy holds no player's
// lock, and the careful retry's COMMIT writes the player's row again,
// on which the first copy then fails (without that COMMIT it applies);
// held past the player's row, the first copy holds its lock, and the
// careful retry waits for it and answers the replay.
func TestRetryRefusedWhileItsFirstCopyIsInFlight(t *testing.T) {
	e := newEnv(t)
	gate := newGate(t, e)
	players := e.playersOn(0, 1, 32)
	for _, ended := range []string{"its caller gone", "its outcome unread"} {
		for _, at := range []string{"at its mark", "past the player's row"} {
			t.Run(ended+", held "+at, func(t *testing.T) {
				players = gate.untilPlannedInTime(t, at, players, func(p coffer.PlayerID, expiry time.Duration) bool {
					return retriedAndRefused(t, e, gate.conn, p, expiry, ended == "its outcome unread")
				})
			})
		}
	}
}

// TestCutRefusalIsPlannedAgain: a careful attempt that refuses every
// write commits its mark's time alone, and sets no token. Cut in that
// COMMIT, and not applied, it was taken for applied by the check after
// it when its committer had no mark yet (a store just started): the mark
// then reads 0, the token of an attempt that set none, and the check
// answered the refusal. Here the grant's first copy is held at its mark
// (as in TestRetryRefusedWhileItsFirstCopyIsInFlight); a new store
// refuses the retry, careful, its COMMIT held and then cut; its check
// attempt is held before the player's lock until the refusal's backend
// is gone, which undoes the refusal's write of the player's row; the
// first copy then applies the grant. The check must answer what it
// finds under the lock, the replay.
func TestCutRefusalIsPlannedAgain(t *testing.T) {
	e := newEnv(t)
	g := newGate(t, e)
	// held_at names the step the triggers below hold, each on an
	// advisory lock of its own: the refusal's COMMIT (its statement
	// touching the mark), or the check's lock of the player (its row of
	// version 0, before the conflict).
	_, err := e.router.Database(0).Exec(ctx, `CREATE TABLE held_at (step text PRIMARY KEY);
		CREATE FUNCTION hold_touch() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT FROM held_at WHERE step = 'touch') THEN
				PERFORM pg_advisory_lock(4243); PERFORM pg_advisory_unlock(4243);
			END IF;
			RETURN NULL;
		END $$;
		CREATE FUNCTION hold_check() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.version = 0 AND EXISTS (SELECT FROM held_at WHERE step = 'check') THEN
				PERFORM pg_advisory_lock(4244); PERFORM pg_advisory_unlock(4244);
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER hold_touch BEFORE UPDATE ON batch_mark FOR EACH STATEMENT EXECUTE FUNCTION hold_touch()`)
	must(t, err)
	g.untilPlannedInTime(t, "at its mark", e.playersOn(0, 1, 8), func(p coffer.PlayerID, expiry time.Duration) bool {
		return cutRefusal(t, e, g.conn, p, expiry)
	})
}

// cutRefusal runs the scenario of TestCutRefusalIsPlannedAgain on
// player p with a grant that expires after expiry, and returns false if
// the first copy planned too late for it.
func cutRefusal(t *testing.T, e *env, gate *pgxpool.Conn, p coffer.PlayerID, expiry time.Duration) bool {
	db := e.router.Database(0)
	balance := fmt.Sprintf("balance_%d", e.router.Map().ShardOf(p))
	_, err := db.Exec(ctx, `CREATE TRIGGER hold_check BEFORE INSERT ON `+balance+` FOR EACH ROW EXECUTE FUNCTION hold_check()`)
	must(t, err)
	defer func() {
		_, err := db.Exec(ctx, `DELETE FROM held_at; DROP TRIGGER hold_check ON `+balance)
		must(t, err)
	}()
	_, _, first := e.storeThroughCutter(postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	call, hangUp := context.WithCancel(ctx)
	grant, held, done := holdGrant(t, e, gate, first, call, p, expiry)
	hangUp()
	if held == 0 {
		return false
	}
	wantCode(t, (<-done).err, coffer.CodeUnavailable)

	_, err = db.Exec(ctx, `INSERT INTO held_at VALUES ('touch')`)
	must(t, err)
	_, err = gate.Exec(ctx, `SELECT pg_advisory_lock(4243), pg_advisory_lock(4244)`)
	must(t, err)
	cutter, _, retry := e.storeThroughCutter(postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	go func() {
		trx, _, err := retry.Change(ctx, grant)
		done <- grantAnswer{trx, err}
	}()
	var refusal int32
	for refusal == 0 {
		refusal = e.backendIn(0, "advisory", "UPDATE batch_mark%")
		select {
		case a := <-done:
			t.Fatalf("the retry answered before its refusal's COMMIT: %v", a.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, err = db.Exec(ctx, `DELETE FROM held_at; INSERT INTO held_at VALUES ('check')`)
	must(t, err)
	cutter.cutClients()
	for check := int32(0); check == 0; {
		must(t, db.QueryRow(ctx, `SELECT COALESCE((SELECT pid FROM pg_stat_activity
			WHERE wait_event = 'advisory' AND pid NOT IN ($1, $2) LIMIT 1), 0)`, held, refusal).Scan(&check))
		select {
		case a := <-done:
			t.Fatalf("the retry answered before its check attempt: %v", a.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, err = db.Exec(ctx, `SELECT pg_terminate_backend($1)`, refusal)
	must(t, err)
	for gone := false; !gone; time.Sleep(10 * time.Millisecond) {
		must(t, db.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, refusal).Scan(&gone))
	}
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	must(t, err)
	e.untilTransactionEnds(held)
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	must(t, err)
	got := <-done
	stored, err := e.store.Trx(ctx, scope(p, "grant"))
	must(t, err)
	if got.err != nil {
		t.Fatalf("the retry answered %v, and the first copy applied the grant: %+v", got.err, stored)
	}
	sameAnswer(t, got.trx, stored)
	return true
}

// untilTransactionEnds waits until backend pid of database 0 is in no
// transaction: committed, or failed (aborted, its client gone: the
// server ends it later).
func (e *env) untilTransactionEnds(pid int32) {
	for ended := false; !ended; time.Sleep(10 * time.Millisecond) {
		must(e.t, e.router.Database(0).QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_activity
			WHERE pid = $1 AND state IN ('active', 'idle in transaction'))`, pid).Scan(&ended))
	}
}

// retriedAndRefused runs the scenario of
// TestRetryRefusedWhileItsFirstCopyIsInFlight on player p with a grant
// that expires after expiry (the first call's outcome given up by settle
// if unread, else by its caller), and returns false if the first attempt
// planned too late for it.
func retriedAndRefused(t *testing.T, e *env, gate *pgxpool.Conn, p coffer.PlayerID, expiry time.Duration, unread bool) bool {
	cutter, router, store := e.storeThroughCutter(postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	call, hangUp := context.WithCancel(ctx)
	defer hangUp()
	grant, first, done := holdGrant(t, e, gate, store, call, p, expiry)
	if first == 0 {
		return false
	}
	if unread {
		router.SetVerified(0, false)
		cutter.cutClients()
	} else {
		hangUp()
	}
	wantCode(t, (<-done).err, coffer.CodeUnavailable)
	go func() {
		trx, _, err := e.store.Change(ctx, grant)
		done <- grantAnswer{trx, err}
	}()
	answerHolds(t, e, gate, p, first, done)
	return true
}

// cutAndRefused runs the scenario of
// TestCutAttemptAtItsSnapshotIsReadOnceItEnds on player p with a grant
// that expires after expiry, and returns false if the first attempt
// planned too late for it.
func cutAndRefused(t *testing.T, e *env, gate *pgxpool.Conn, p coffer.PlayerID, expiry time.Duration) bool {
	cutter, _, store := e.storeThroughCutter(postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	_, first, done := holdGrant(t, e, gate, store, ctx, p, expiry)
	if first == 0 {
		return false
	}
	cutter.cutClients()
	answerHolds(t, e, gate, p, first, done)
	return true
}

// grantAnswer is a grant's call's answer.
type grantAnswer struct {
	trx coffer.Trx
	err error
}

// holdGrant sends, through store with call, a grant to player p that
// expires after expiry, and returns once the gate holds its batch's
// write statement on the server (its backend, first) and the expiry has
// passed, with the channel of the call's answer; or first 0 if the
// grant was answered before the gate (planned too late for the expiry),
// the gate let go.
func holdGrant(t *testing.T, e *env, gate *pgxpool.Conn, store *postgres.Store, call context.Context, p coffer.PlayerID, expiry time.Duration) (
	grant coffer.ChangeRequest, first int32, done chan grantAnswer) {
	db := e.router.Database(0)
	// The store's first batch writes its mark anew (no UPDATE): this
	// one does.
	_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "first"), Ops: []coffer.OpRequest{free("gold", 1)}})
	must(t, err)
	var expires time.Time
	must(t, db.QueryRow(ctx, `SELECT now() + $1::interval`, expiry.String()).Scan(&expires))
	_, err = gate.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	must(t, err)
	grant = coffer.ChangeRequest{Scope: scope(p, "grant"), Ops: []coffer.OpRequest{{Currency: "gold", Amount: 10, ExpiresAt: &expires}}}
	done = make(chan grantAnswer, 1)
	go func() {
		trx, _, err := store.Change(call, grant)
		done <- grantAnswer{trx, err}
	}()
	// The batch at the gate (its write statement: its text as
	// pg_stat_activity keeps it, cut short, starts with the trx), or
	// answered without it.
	for first == 0 {
		first = e.backendIn(0, "PgSleep", "WITH trx AS (INSERT INTO trx_%")
		select {
		case <-done:
			_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
			must(t, err)
			return grant, 0, nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	for past := false; !past; time.Sleep(10 * time.Millisecond) {
		must(t, db.QueryRow(ctx, `SELECT now() > $1`, expires).Scan(&past))
	}
	return grant, first, done
}

// answerHolds lets the gate go once the call that answers on done waits
// for a lock, or has answered; waits for the held batch's transaction
// (first) to end; and checks that the answer holds: the grant
// stored as answered, or, refused, not stored.
func answerHolds(t *testing.T, e *env, gate *pgxpool.Conn, p coffer.PlayerID, first int32, done chan grantAnswer) {
	var got *grantAnswer
	for got == nil && e.backendIn(0, "Lock", "%") == 0 {
		select {
		case a := <-done:
			got = &a
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, err := gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	must(t, err)
	if got == nil {
		a := <-done
		got = &a
	}
	e.untilTransactionEnds(first)
	stored, err := e.store.Trx(ctx, scope(p, "grant"))
	t.Logf("answered %v", got.err)
	switch {
	case got.err == nil:
		must(t, err)
		sameAnswer(t, got.trx, stored)
	case coffer.ErrorCode(got.err) == coffer.CodeInvalid:
		if err == nil {
			t.Fatalf("the grant answered %v, and applied by the batch held: %+v", got.err, stored)
		}
		wantCode(t, err, coffer.CodeNotFound)
	default:
		t.Fatal(got.err)
	}
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

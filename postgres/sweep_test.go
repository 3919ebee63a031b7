package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
)

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

	// A player locked elsewhere: its pass fails (its lock wait is cut at
	// 100 ms), the next finds it; the passes that must succeed have 20 s.
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, LockTimeout: 100 * time.Millisecond})
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

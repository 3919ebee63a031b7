package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
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

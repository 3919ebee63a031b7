package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
)

// withLots gives player coffer.LotsMax free lots of gold, 100 coins each:
// one per priority, so that no grant joins another's lot.
func (e *env) withLots(player coffer.PlayerID) {
	e.t.Helper()
	var reqs []coffer.ChangeRequest
	for i := 0; i < coffer.LotsMax; i += coffer.OpsMax {
		req := coffer.ChangeRequest{Scope: scope(player, fmt.Sprint("lots-", i)), Reason: "test"}
		for j := i; j < min(i+coffer.OpsMax, coffer.LotsMax); j++ {
			req.Ops = append(req.Ops, coffer.OpRequest{Currency: "gold", Amount: 100, Priority: int32(j)})
		}
		reqs = append(reqs, req)
	}
	got, err := e.store.BatchChange(ctx, reqs)
	must(e.t, err)
	for _, r := range got {
		must(e.t, r.Err)
	}
}

// heavyCall is a legal batch call that costs its database the most
// planning: changes of coffer.OpsMax one-coin spends each, on a player
// with coffer.LotsMax lots.
func heavyCall(player coffer.PlayerID, changes int) []coffer.ChangeRequest {
	var reqs []coffer.ChangeRequest
	for i := range changes {
		req := coffer.ChangeRequest{Scope: scope(player, fmt.Sprint("heavy-", i)), Reason: "test"}
		for range coffer.OpsMax {
			req.Ops = append(req.Ops, free("gold", -1))
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// TestHeavyBatchCallStallsOnlyItself: a store with one committer runs a
// heavy batch call, then another player's grant sent just after it, in
// the next batch or in the same one. The grant is applied within its
// Timeout, and no change of the heavy call is answered as a commit cut
// off (none was).
func TestHeavyBatchCallStallsOnlyItself(t *testing.T) {
	for _, sameBatch := range []bool{false, true} {
		t.Run(fmt.Sprint("same batch=", sameBatch), func(t *testing.T) {
			e := newEnv(t)
			// The blocker's lock wait spans the test's queueing of the
			// heavy call: its end, not a clock, ends it (queuedBehind).
			opts := postgres.Options{Committers: 1, Timeout: 5 * time.Second, LockTimeout: 5 * time.Second}
			if sameBatch {
				opts.BatchSizeMax = coffer.BatchChangesMax + 1
			}
			store := postgres.New(e.router, e.catalog, opts)
			defer store.Close()
			ps := e.playersOn(0, 1, 3)
			blocker, heavy, innocent := ps[0], ps[1], ps[2]
			e.withLots(heavy)
			// Queued behind a blocked write, so that the heavy call leads
			// the next batch and the grant follows it.
			var results []coffer.ChangeResult
			tx, errs := e.queuedBehind(store, blocker,
				func() (err error) {
					results, err = store.BatchChange(ctx, heavyCall(heavy, 300))
					return err
				},
				func() error {
					_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(innocent, "grant"), Ops: []coffer.OpRequest{free("gold", 1)}})
					if err != nil {
						return fmt.Errorf("the innocent grant: %w", err)
					}
					return nil
				})
			must(t, tx.Rollback(ctx))
			for range 3 {
				must(t, <-errs)
			}
			for i, r := range results {
				if r.Err != nil && strings.Contains(r.Err.Error(), "cut off") {
					t.Fatalf("heavy change %d: %v", i, r.Err)
				}
			}
			if b := e.balance(innocent, "gold"); b.Total != 1 {
				t.Fatalf("the innocent player's gold: %+v", b)
			}
			e.auditClean()
		})
	}
}

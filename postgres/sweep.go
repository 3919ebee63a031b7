package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
)

// SweepHolds rolls back holds past their TTL (status expired), at most
// limit per shard per pass, and returns how many it rolled back. It is safe
// to run on every instance at once: each hold is re-checked under its
// player's lock, so a hold another sweeper (or a client) finished first is
// left alone.
func (s *Store) SweepHolds(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, limit,
		func(id coffer.ShardID) (string, []any) { return s.q(id).pendingHolds, []any{limit} },
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID, &sc.Emitter, &sc.IdempotencyKey)
		},
		func(sc coffer.Scope) (bool, error) {
			trx, replayed, err := s.finishHold(ctx, sc, false, true)
			return err == nil && !replayed && trx.Status == coffer.StatusExpired, err
		}, nil)
}

// sweepOverlap is how far before a complete pass's start the lot sweeper's
// next pass looks back: past any write still in flight when the pass began
// (its grant may carry an expiry the pass could not see) and any drift
// between this instance's clock and the database's.
const sweepOverlap = 10 * time.Minute

// SweepExpiredLots records an expire op for every lot that expired with an
// amount left, for at most limit due lots per shard per pass, and returns how
// many players it changed. Safe on many instances, like SweepHolds.
//
// A recorded lot stays in the expiry index at amount 0 (a hold's rollback
// may return currency to it), so a scan of every expiry up to now would
// grow with all the expiries ever recorded. After a pass that listed every
// due lot of a shard and recorded them all, the next passes look only at
// expiries since its start (less sweepOverlap): a lot that expired before
// then had its expiry recorded, and the write that gives such a lot an
// amount again (a hold's rollback or commit) records its expiry itself.
func (s *Store) SweepExpiredLots(ctx context.Context, limit int) (int, error) {
	seen := map[coffer.Scope]bool{} // a player is listed once per due lot
	return s.sweep(ctx, limit,
		func(id coffer.ShardID) (string, []any) {
			var since time.Time
			if t, ok := s.lotsSwept.Load(id); ok {
				since = t.(time.Time)
			}
			return s.q(id).expiredPlayers, []any{limit, since}
		},
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID)
		},
		func(sc coffer.Scope) (bool, error) {
			if seen[sc] {
				return false, nil
			}
			seen[sc] = true
			return s.expirePlayer(ctx, sc.Namespace, sc.PlayerID)
		},
		func(id coffer.ShardID, started time.Time) { s.lotsSwept.Store(id, started.Add(-sweepOverlap)) })
}

// sweep runs one pass: on every shard it lists at most limit candidates
// with the statement list gives and acts on each. A failing shard or
// candidate does not stop the pass; the errors are joined. complete, if
// set, hears of each shard whose candidates were all listed (fewer than
// limit) and acted on without an error, with the time its listing began.
// It returns how many candidates act reported done.
func (s *Store) sweep(ctx context.Context, limit int, list func(coffer.ShardID) (string, []any),
	scan pgx.RowToFunc[coffer.Scope], act func(coffer.Scope) (bool, error), complete func(coffer.ShardID, time.Time)) (int, error) {
	n := 0
	var errs []error
	for sh := 0; sh < s.router.Map().ShardCount(); sh++ {
		id := coffer.ShardID(sh)
		pool, err := s.pool(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		started := time.Now()
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		sql, args := list(id)
		rows, err := pool.Query(cctx, sql, args...)
		var due []coffer.Scope
		if err == nil {
			due, err = pgx.CollectRows(rows, scan)
		}
		cancel()
		if err != nil {
			errs = append(errs, s.fail(id, err))
			continue
		}
		failed := false
		for _, sc := range due {
			done, err := act(sc)
			if err != nil {
				errs = append(errs, err)
				failed = true
			}
			if done {
				n++
			}
		}
		if complete != nil && !failed && len(due) < limit {
			complete(id, started)
		}
	}
	return n, errors.Join(errs...)
}

func (s *Store) expirePlayer(ctx context.Context, ns coffer.Namespace, player coffer.PlayerID) (bool, error) {
	changed := false
	err := s.withPlayer(ctx, ns, player, func(t *playerTx) error {
		book := &coffer.Book{NewID: t.nextID}
		b := &pgx.Batch{}
		queueLots(b, t, book, nil)
		if err := t.start(b, 1); err != nil {
			return err
		}
		book.Now = t.now
		expired := book.Expire()
		if len(expired) == 0 {
			return nil // another sweeper or a write recorded them first
		}
		w := &pgx.Batch{}
		s.queueExpireTrx(w, t, expired)
		queueLotWrites(w, t, book, 0)
		if t.idErr != nil {
			return t.idErr
		}
		if err := t.finish(w); err != nil {
			return err
		}
		changed = true
		return nil
	})
	return changed, err
}

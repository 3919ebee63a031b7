package postgres

import (
	"context"
	"errors"
	"fmt"
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
		func(id coffer.ShardID) (string, []any) { return s.q(id).pending, []any{limit} },
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID, &sc.Emitter, &sc.IdempotencyKey)
		},
		func(due []coffer.Scope) (int, error) { return s.sweepWrites(ctx, writeExpireHold, due) }, nil)
}

// sweepOverlap is how far before a complete pass's start the lot sweeper's
// next pass looks back: past any write still in flight when the pass began
// (its grant may carry an expiry the pass could not see).
const sweepOverlap = 10 * time.Minute

// SweepExpiredLots records an expire op for every lot that expired with an
// amount left, for at most limit due lots per shard per pass, and returns how
// many players it changed. Safe on many instances, like SweepHolds.
//
// A recorded lot stays in the expiry index at amount 0 (a hold's rollback
// may return currency to it), so a scan of every expiry up to now would
// grow with all the expiries ever recorded. After a pass that listed every
// due lot of a shard and recorded them all, the next passes, of any
// instance and after a restart, look only at expiries since its start
// (less sweepOverlap), which the shard's row of expiry_sweep keeps: a lot
// that expired before then had its expiry recorded, and the write that
// gives such a lot an amount again (a hold's rollback or commit) records
// its expiry itself.
func (s *Store) SweepExpiredLots(ctx context.Context, limit int) (int, error) {
	seen := map[coffer.Scope]bool{} // a player is listed once per due lot
	return s.sweep(ctx, limit,
		func(id coffer.ShardID) (string, []any) { return s.q(id).expiredPlayers, []any{limit, id} },
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID)
		},
		func(due []coffer.Scope) (int, error) {
			var players []coffer.Scope
			for _, sc := range due {
				if !seen[sc] {
					seen[sc] = true
					players = append(players, sc)
				}
			}
			return s.sweepWrites(ctx, writeExpireLots, players)
		},
		s.lotsSwept)
}

// lotsSwept moves the shard's expiry_sweep row to the start of a complete
// pass less sweepOverlap, never back. The start is the database's clock
// less the time the pass took by this instance's, so that the row does
// not depend on the instances' clocks agreeing with the database's.
func (s *Store) lotsSwept(ctx context.Context, id coffer.ShardID, started time.Time) error {
	pool, err := s.pool(id)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	_, err = pool.Exec(cctx, `INSERT INTO expiry_sweep (shard_id, swept_to) VALUES ($1, now() - $2 * interval '1 microsecond')
		ON CONFLICT (shard_id) DO UPDATE SET swept_to = GREATEST(expiry_sweep.swept_to, EXCLUDED.swept_to)`,
		id, (time.Since(started) + sweepOverlap).Microseconds())
	if err != nil {
		return s.fail(id, err)
	}
	return nil
}

// SweepMarks removes, on every database, at most limit rows of batch_mark
// not set for a day: committers of processes gone (a live committer sets
// its row at each batch, and one idle for a day has no attempt waiting to
// read it). It returns how many it removed.
func (s *Store) SweepMarks(ctx context.Context, limit int) (int, error) {
	n := 0
	var errs []error
	for db := range s.router.Map().Databases() {
		if err := s.router.Writable(db); err != nil {
			errs = append(errs, fmt.Errorf("database %d: %w", db, err))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		tag, err := s.router.Database(db).Exec(cctx, staleMarks, limit)
		cancel()
		if err != nil {
			s.failed(db, err)
			errs = append(errs, fmt.Errorf("database %d: %w", db, err))
			continue
		}
		n += int(tag.RowsAffected())
	}
	return n, errors.Join(errs...)
}

// sweep runs one pass: on every shard it lists at most limit candidates
// with the statement list gives and acts on them. A failing shard or
// candidate does not stop the pass; the errors are joined. complete, if
// set, hears of each shard whose candidates were all listed (fewer than
// limit) and acted on without an error, with the time its listing began.
// It returns how many candidates act reported done.
func (s *Store) sweep(ctx context.Context, limit int, list func(coffer.ShardID) (string, []any), scan pgx.RowToFunc[coffer.Scope],
	act func([]coffer.Scope) (int, error), complete func(context.Context, coffer.ShardID, time.Time) error) (int, error) {
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
		done, err := act(due)
		n += done
		if err != nil {
			errs = append(errs, err)
		}
		if complete != nil && err == nil && len(due) < limit {
			if err := complete(ctx, id, started); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

// sweepWrites runs a sweeper's writes of one shard as one job, through
// the batches that run the clients' writes (the same player locks, in the
// same order), and returns how many wrote: a hold rolled back as expired,
// a player's expiries recorded. A write that finds nothing to do (a hold
// finished meanwhile, expiries another instance recorded) is not counted.
func (s *Store) sweepWrites(ctx context.Context, kind writeKind, due []coffer.Scope) (int, error) {
	if len(due) == 0 {
		return 0, nil
	}
	reqs := make([]*request, len(due))
	for i, sc := range due {
		reqs[i] = &request{kind: kind, scope: sc}
	}
	if err := s.write(ctx, reqs); err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, r := range reqs {
		trx, replayed, err := r.answer()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("player %d/%d: %w", r.scope.Namespace, r.scope.PlayerID, err))
		case kind == writeExpireLots && r.plan.Writes(), kind == writeExpireHold && !replayed && trx.Status == coffer.StatusExpired:
			n++
		}
	}
	return n, errors.Join(errs...)
}

package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SweepHolds rolls back holds past their TTL (status expired), at most
// limit per shard per pass, and returns how many it rolled back. It is safe
// to run on every instance at once: each hold is re-checked under its
// player's lock, so a hold another sweeper (or a client) finished first is
// left alone.
func (s *Store) SweepHolds(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, limit, &s.holdSweeps,
		func(_ context.Context, _ *pgxpool.Pool, id coffer.ShardID, failed []coffer.Scope) (string, []any, error) {
			ns, players, emitters, keys := []int32{}, []int64{}, []int32{}, []string{}
			for _, sc := range failed {
				ns, players = append(ns, int32(sc.Namespace)), append(players, int64(sc.PlayerID))
				emitters, keys = append(emitters, int32(sc.Emitter)), append(keys, sc.IdempotencyKey)
			}
			return s.q(id).pending, []any{limit, ns, players, emitters, keys}, nil
		},
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID, &sc.Emitter, &sc.IdempotencyKey)
		},
		func(due []coffer.Scope) (int, []coffer.Scope, error) {
			return s.sweepWrites(ctx, due, func(sc coffer.Scope) coffer.Write { return coffer.Finish{Key: sc.Key(), Step: coffer.FinishExpire} },
				func(r *request) bool { return !r.plan.Replay && r.plan.Trx.Status == coffer.StatusExpired })
		}, nil)
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
// (less sweepOverlap), which the shard's expiry_sweep_N keeps: a lot
// that expired before then had its expiry recorded, and the write that
// gives such a lot an amount again (a hold's rollback or commit) records
// its expiry itself. A player whose write fails keeps the window where it
// is until a pass records it (sweep tries it again at every pass).
func (s *Store) SweepExpiredLots(ctx context.Context, limit int) (int, error) {
	seen := map[coffer.Scope]bool{}            // a player is listed once per due lot
	windows := map[coffer.ShardID]*time.Time{} // the window each shard was listed from (nil: none)
	return s.sweep(ctx, limit, &s.lotSweeps,
		func(ctx context.Context, pool *pgxpool.Pool, id coffer.ShardID, failed []coffer.Scope) (string, []any, error) {
			var since *time.Time
			if err := pool.QueryRow(ctx, s.q(id).sweptTo).Scan(&since); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return "", nil, err
			}
			windows[id] = since
			ns, players := []int32{}, []int64{}
			for _, sc := range failed {
				ns, players = append(ns, int32(sc.Namespace)), append(players, int64(sc.PlayerID))
			}
			return s.q(id).expiredPlayers, []any{limit, cmp.Or(since, &time.Time{}), ns, players}, nil
		},
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID)
		},
		func(due []coffer.Scope) (int, []coffer.Scope, error) {
			var players []coffer.Scope
			for _, sc := range due {
				if !seen[sc] {
					seen[sc] = true
					players = append(players, sc)
				}
			}
			return s.sweepWrites(ctx, players, func(coffer.Scope) coffer.Write { return coffer.ExpireLots{} },
				func(r *request) bool { return r.plan.Writes() })
		},
		func(ctx context.Context, pool *pgxpool.Pool, id coffer.ShardID, started time.Time) error {
			return s.lotsSwept(ctx, pool, id, windows[id], started)
		})
}

// lotsSwept moves the shard's window, as read before the pass listed its
// lots (since; nil if there was none), to the pass's start less
// sweepOverlap. Only from since: a window changed meanwhile was moved by
// another instance's pass, or cleared by an operator (docs/operations.md),
// and this pass, listed from the old one, must not set it back. The start
// is the database's clock less the time the pass took by this instance's,
// so that the window does not depend on the instances' clocks.
func (s *Store) lotsSwept(ctx context.Context, pool *pgxpool.Pool, id coffer.ShardID, since *time.Time, started time.Time) error {
	back := (time.Since(started) + sweepOverlap).Microseconds()
	var err error
	if since == nil {
		_, err = pool.Exec(ctx, s.q(id).sweptFirst, back)
	} else {
		_, err = pool.Exec(ctx, s.q(id).sweptNext, back, *since)
	}
	return err
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

// failedSweeps are, per shard, the candidates whose writes failed in a
// sweeper's last pass: the next pass tries them first, and lists the
// others without them. Listed with the rest, candidates that fail every
// time (the rows of a damaged player, which the audit reports) would
// come first pass after pass (the oldest due), and as many as limit of
// them would starve every other candidate of their shard. It is safe for
// concurrent use.
type failedSweeps struct {
	mu     sync.Mutex
	shards map[coffer.ShardID][]coffer.Scope
}

func (f *failedSweeps) of(id coffer.ShardID) []coffer.Scope {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.shards[id]
}

// set keeps shard id's failed candidates, at most limit of them: those
// beyond it are listed again with the others.
func (f *failedSweeps) set(id coffer.ShardID, failed []coffer.Scope, limit int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shards == nil {
		f.shards = map[coffer.ShardID][]coffer.Scope{}
	}
	f.shards[id] = failed[:min(len(failed), limit)]
}

// sweep runs one pass: on every shard it tries again the candidates that
// failed in the last pass (failed), lists at most limit others with the
// statement list gives, and acts on them all. A failing shard or
// candidate does not stop the pass; the errors are joined. complete, if
// set, hears of each shard whose candidates were all listed (fewer than
// limit) and acted on without an error, with the time its listing began;
// its error is joined too. It returns how many candidates act reported
// done.
func (s *Store) sweep(ctx context.Context, limit int, failed *failedSweeps,
	list func(context.Context, *pgxpool.Pool, coffer.ShardID, []coffer.Scope) (string, []any, error),
	scan pgx.RowToFunc[coffer.Scope], act func([]coffer.Scope) (int, []coffer.Scope, error),
	complete func(context.Context, *pgxpool.Pool, coffer.ShardID, time.Time) error) (int, error) {
	n := 0
	var errs []error
	for sh := 0; sh < s.router.Map().ShardCount(); sh++ {
		id := coffer.ShardID(sh)
		started := time.Now()
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		pool, err := s.pool(cctx, id)
		if err != nil {
			cancel()
			errs = append(errs, err)
			continue
		}
		retry := failed.of(id)
		var due []coffer.Scope
		sql, args, err := list(cctx, pool, id, retry)
		if err == nil {
			var rows pgx.Rows
			if rows, err = pool.Query(cctx, sql, args...); err == nil {
				due, err = pgx.CollectRows(rows, scan)
			}
		}
		cancel()
		if err != nil {
			errs = append(errs, s.fail(id, err))
			continue
		}
		done, failedNow, err := act(append(slices.Clip(retry), due...))
		failed.set(id, failedNow, limit)
		n += done
		if err != nil {
			errs = append(errs, err)
		}
		if complete != nil && err == nil && len(due) < limit {
			cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
			if err := complete(cctx, pool, id, started); err != nil {
				errs = append(errs, s.fail(id, err))
			}
			cancel()
		}
	}
	return n, errors.Join(errs...)
}

// sweepWrites runs a sweeper's writes of one shard, write(sc) for each
// due scope, as one job, through the batches that run the clients'
// writes (the same player locks, in the same order), and returns how many
// wrote (as wrote tells): a hold rolled back as expired,
// a player's expiries recorded. A write that finds nothing to do (a hold
// finished meanwhile, expiries another instance recorded) is not counted.
// It returns too the candidates whose writes failed (all of them, if the
// job failed as a whole).
func (s *Store) sweepWrites(ctx context.Context, due []coffer.Scope, write func(coffer.Scope) coffer.Write, wrote func(*request) bool) (int, []coffer.Scope, error) {
	if len(due) == 0 {
		return 0, nil, nil
	}
	reqs := make([]*request, len(due))
	for i, sc := range due {
		reqs[i] = &request{scope: sc, write: write(sc)}
	}
	s.write(ctx, reqs)
	n := 0
	var failed []coffer.Scope
	var errs []error
	for _, r := range reqs {
		if _, _, err := r.answer(); err != nil {
			failed = append(failed, r.scope)
			errs = append(errs, fmt.Errorf("player %d/%d: %w", r.scope.Namespace, r.scope.PlayerID, err))
		} else if wrote(r) {
			n++
		}
	}
	return n, failed, errors.Join(errs...)
}

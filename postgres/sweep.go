package postgres

import (
	"context"
	"errors"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
)

// SweepHolds rolls back holds past their TTL (status expired), at most
// limit per shard per pass, and returns how many it rolled back. It is safe
// to run on every instance at once: each hold is re-checked under its
// player's lock, so a hold another sweeper (or a client) finished first is
// left alone.
func (s *Store) SweepHolds(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, func(q *queries) string { return q.pendingHolds }, limit,
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID, &sc.Emitter, &sc.IdempotencyKey)
		},
		func(sc coffer.Scope) (bool, error) {
			trx, replayed, err := s.finishHold(ctx, sc, false, true)
			return err == nil && !replayed && trx.Status == coffer.StatusExpired, err
		})
}

// SweepExpiredLots records an expire op for every lot that expired with an
// amount left, at most limit players per shard per pass, and returns how
// many players it changed. Safe on many instances, like SweepHolds.
func (s *Store) SweepExpiredLots(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, func(q *queries) string { return q.expiredPlayers }, limit,
		func(r pgx.CollectableRow) (coffer.Scope, error) {
			var sc coffer.Scope
			return sc, r.Scan(&sc.Namespace, &sc.PlayerID)
		},
		func(sc coffer.Scope) (bool, error) { return s.expirePlayer(ctx, sc.Namespace, sc.PlayerID) })
}

// sweep runs one pass: on every shard it lists at most limit candidates
// with query (whose one argument is the limit) and acts on each. A failing
// shard or candidate does not stop the pass; the errors are joined. It
// returns how many candidates act reported done.
func (s *Store) sweep(ctx context.Context, query func(*queries) string, limit int,
	scan pgx.RowToFunc[coffer.Scope], act func(coffer.Scope) (bool, error)) (int, error) {
	n := 0
	var errs []error
	for sh := 0; sh < s.router.Map().ShardCount(); sh++ {
		id := coffer.ShardID(sh)
		pool, err := s.pool(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		rows, err := pool.Query(cctx, query(s.q(id)), limit)
		var due []coffer.Scope
		if err == nil {
			due, err = pgx.CollectRows(rows, scan)
		}
		cancel()
		if err != nil {
			errs = append(errs, s.fail(id, err))
			continue
		}
		for _, sc := range due {
			done, err := act(sc)
			if err != nil {
				errs = append(errs, err)
			}
			if done {
				n++
			}
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
		if err := t.start(ctx, b, 1); err != nil {
			return err
		}
		book.Now = t.now
		expired := book.Expire()
		if len(expired) == 0 {
			return nil // another sweeper or a write recorded them first
		}
		w := &pgx.Batch{}
		s.queueExpireTrx(w, t, expired, false)
		queueLotWrites(w, t, book, 0)
		if t.idErr != nil {
			return t.idErr
		}
		if err := t.finish(ctx, w); err != nil {
			return err
		}
		changed = true
		return nil
	})
	return changed, err
}

package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// movesSQL reads the moves a database records (the schema's V0003).
const movesSQL = `SELECT shard_id, epoch, source, target, state, COALESCE(pause_ms, 0) FROM shard_move`

// sqlstateUndefinedTable is what movesSQL gets on a database migrated
// before V0003: it records no move.
const sqlstateUndefinedTable = "42P01"

// movesRead is what the router read of each database's moves, and when.
type movesRead struct {
	// mu serialises refreshes; byDB and began are guarded by it.
	mu sync.Mutex
	// byDB are the moves each database recorded when last read; a
	// database that cannot be read keeps what it recorded before.
	byDB [][]Move
	// began is when the last refresh began.
	began time.Time
}

// refreshTimeout bounds the read of one database's moves.
const refreshTimeout = 2 * time.Second

// Refresh reads the moves every database records (one query each) and
// routes by the map they make (Map.WithMoves) from then on. It returns
// the databases it could not read, each error naming one; what they
// recorded when last read still counts. Calls that overlap are served by
// one read: a call returns once a read that began after it was made has
// ended.
func (r *Router) Refresh(ctx context.Context) error {
	asked := time.Now()
	r.moves.mu.Lock()
	defer r.moves.mu.Unlock()
	if r.moves.began.After(asked) {
		return nil
	}
	r.moves.began = time.Now()
	// The databases are read side by side: one that is down costs the
	// refresh refreshTimeout, not that many times.
	errs := make([]error, len(r.pools))
	var wg sync.WaitGroup
	for i, pool := range r.pools {
		wg.Go(func() {
			moves, err := ReadMoves(ctx, pool)
			if err != nil {
				errs[i] = fmt.Errorf("%s: read shard moves: %w", r.config.databases[i].Label(), err)
				return
			}
			r.moves.byDB[i] = moves
		})
	}
	wg.Wait()
	var all []Move
	for _, moves := range r.moves.byDB {
		all = append(all, moves...)
	}
	if m := r.config.WithMoves(all); !m.SameMoves(r.Map()) {
		r.m.Store(m)
	}
	return errors.Join(errs...)
}

// ReadMoves reads the moves one database records (q reaches it): the
// latest move of each shard it was the source or the target of.
func ReadMoves(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]Move, error) {
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	rows, _ := q.Query(ctx, movesSQL)
	var mv Move
	var pauseMs int64
	var moves []Move
	_, err := pgx.ForEachRow(rows, []any{&mv.Shard, &mv.Epoch, &mv.Source, &mv.Target, &mv.State, &pauseMs}, func() error {
		if !mv.State.Valid() {
			return fmt.Errorf("shard %d: unknown move state %q", mv.Shard, mv.State)
		}
		mv.Pause = time.Duration(pauseMs) * time.Millisecond
		moves = append(moves, mv)
		return nil
	})
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == sqlstateUndefinedTable {
		return nil, nil
	}
	return moves, err
}

// awaitPoll paces the refreshes of a call that waits for a shard being
// cut over: a cut-over takes a fraction of a second.
const awaitPoll = 50 * time.Millisecond

// Await returns the index of the database that serves shard s, waiting,
// while the shard is being cut over, for the map to place it (refreshing
// it every awaitPoll) until ctx ends. Errors: the shard's home is not in
// the config, or ctx ended first (wrapping ErrMoving).
func (r *Router) Await(ctx context.Context, s coffer.ShardID) (int, error) {
	for {
		m := r.Map()
		err := m.Unplaced(s)
		if err == nil {
			return m.dbOfShard[s], nil
		}
		if !errors.Is(err, ErrMoving) {
			return -1, err
		}
		select {
		case <-ctx.Done():
			return -1, err
		case <-time.After(awaitPoll):
		}
		_ = r.Refresh(ctx)
	}
}

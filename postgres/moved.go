package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5/pgconn"
)

// A shard's move (coffer shard move, docs/adr/0022-shard-moves.md) cuts
// it over from its old database to its new one while the store serves:
// from that instant the old copy is fenced, so a batch that reaches it
// fails as a whole, nothing written. The store then reads the moves
// again (shard.Router.Refresh) and sends the writes and reads of the
// moved shard to its new home, waiting while it is being cut over; the
// rest of the batch runs again where it was.

// hopsMax bounds how many times one write or read follows its shard to
// a new home: a shard moves again only once its last move is done.
const hopsMax = 3

// errMoved answers a write or read whose batch met its shard's fence:
// the store sends it to the shard's new home. It reaches a caller only
// when the hops ran out.
var errMoved = &coffer.Error{Code: coffer.CodeUnavailable, Message: "the player's shard moved to another database; retry with the same key"}

// fenced tells whether err is what a statement gets on a copy of a shard
// that is not, or not yet, the shard's home: a copy a move has cut over
// has its tables renamed, one a move is filling has a fence trigger.
func fenced(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == sqlstateUndefinedTable || pg.Code == sqlstateShardFence)
}

// leftBehind reads the moves again after a batch on database db met a
// fence, answers errMoved to the items whose shard is no longer served
// there, and returns the others, which may run there again. The fence is
// not a move's when it returns them all: the failure is the batch's.
func leftBehind[R any](s *Store, db int, kind string, items []R, shard func(R) coffer.ShardID, answer func(R)) []R {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	_ = s.router.Refresh(ctx) // a database not read keeps its moves read before
	var stay []R
	for _, it := range items {
		if s.router.DatabaseIndex(shard(it)) == db {
			stay = append(stay, it)
			continue
		}
		answer(it)
	}
	if moved := len(items) - len(stay); moved > 0 {
		s.opts.Observer.Fenced(s.writers[db].database, kind, moved)
	}
	return stay
}

// home is the index of the database that serves shard id, waiting while
// the shard is being cut over until ctx ends, and checking with check
// (Router.Available or Router.Writable) that requests may go there.
// Errors: shard_unavailable.
func (s *Store) home(ctx context.Context, id coffer.ShardID, check func(int) error) (int, error) {
	db, err := s.router.Await(ctx, id)
	if err == nil {
		err = check(db)
	}
	if err != nil {
		return -1, &coffer.Error{Code: coffer.CodeUnavailable, Message: fmt.Sprintf("shard %d is unavailable", id), Err: err}
	}
	return db, nil
}

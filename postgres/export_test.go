package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RevenueSQL is the revenue report's statement on shard id.
func RevenueSQL(id coffer.ShardID) string { return newQueries(id).revenue }

// BatchReads are the batch's read statements on shard id.
func BatchReads(id coffer.ShardID) map[string]string {
	q := batchStatements.forShard(id)
	return map[string]string{"lock": q.lock, "peek": q.peek, "lots": q.lots, "trx": q.trx, "orders": q.orders, "exchanges": q.exchanges, "balances": q.balances}
}

// OneRow is a batch statement's one-row form.
func OneRow(sql string) string { return oneRow(sql) }

// BatchStatementsPerShard bounds the statements a batch prepares per
// shard.
const BatchStatementsPerShard = batchStatementsPerShard

// BatchPool is the pool of database db's batches.
func (s *Store) BatchPool(db int) *pgxpool.Pool { return s.batchPools[db] }

// BatchWrite is the batch's write statement on shard id with every table.
func BatchWrite(id coffer.ShardID) string { return writeSQL(id, markPart<<1-1) }

// Lots are a player's lots holding something, as a batch loads them
// (loading.lots).
func (s *Store) Lots(ctx context.Context, id coffer.ShardID, ns coffer.Namespace, player coffer.PlayerID) ([]*coffer.BookLot, error) {
	pool, err := s.pool(ctx, id)
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, batchStatements.forShard(id).lots, []int32{int32(ns)}, []int64{int64(player)}, []int32{0})
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	p := &batchPlayer{key: playerKey{ns, player}}
	if err := (&loading{s: s, byKey: map[playerKey]*batchPlayer{p.key: p}}).lots(rows); err != nil {
		return nil, err
	}
	return p.state.Lots, nil
}

// SetMark is a statement that raises a committer's mark ($1) to a token
// ($2) as a batch's last write statement does.
var SetMark = "WITH " + markParts("$1", "$2") + " SELECT 1"

// LotsSwept moves shard id's lot sweeper window from since, as a pass
// listed from it and begun at started would.
func (s *Store) LotsSwept(ctx context.Context, id coffer.ShardID, since *time.Time, started time.Time) error {
	pool, err := s.pool(ctx, id)
	if err != nil {
		return err
	}
	return s.lotsSwept(ctx, pool, id, since, started)
}

// BatchWithBug runs changes as one job, so in one batch, with ex put at
// index at: ex is made valid, then given a rate of 0/0, which no catalog
// makes, so that planning it panics, as a bug would. It answers each
// write's error, in order.
func (s *Store) BatchWithBug(ctx context.Context, changes []coffer.ChangeRequest, ex coffer.ExchangeRequest, at int) ([]error, error) {
	var reqs []*request
	for _, c := range changes {
		v, err := s.catalog.ValidateChange(c)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, &request{scope: c.Scope, write: v})
	}
	v, err := s.catalog.ValidateExchange(ex)
	if err != nil {
		return nil, err
	}
	v.Rate = coffer.Rate{}
	reqs = slices.Insert(reqs, at, &request{scope: ex.Scope, write: v})
	s.write(ctx, reqs)
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		_, _, errs[i] = r.answer()
	}
	return errs, nil
}

package postgres

import (
	"context"
	"sync"

	"github.com/cofferhq/coffer"
)

// BatchChange applies a batch's changes through Change, each in its own
// transaction. The players of each database are shared among a bounded set
// of goroutines (batchWorkers); each player's changes run one after the
// other in request order (coffer.BatchPlayers). The batch is one call:
// the store's Timeout bounds all of it, and a change still waiting at
// the end answers shard_unavailable, as a single call would. Cost: what
// the changes cost alone; only the waits overlap.
func (s *Store) BatchChange(ctx context.Context, reqs []coffer.ChangeRequest) ([]coffer.ChangeResult, error) {
	if err := coffer.ValidateBatchSize(len(reqs)); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	out := make([]coffer.ChangeResult, len(reqs))
	byDatabase := map[int][][]int{}
	for _, player := range coffer.BatchPlayers(reqs) {
		db := s.router.DatabaseIndex(s.router.Map().ShardOf(reqs[player[0]].PlayerID))
		byDatabase[db] = append(byDatabase[db], player)
	}
	var wg sync.WaitGroup
	for db, players := range byDatabase {
		next := make(chan []int, len(players))
		for _, p := range players {
			next <- p
		}
		close(next)
		for range min(len(players), s.batchWorkers(db)) {
			wg.Go(func() {
				for player := range next {
					for _, i := range player {
						r := &out[i]
						r.Trx, r.Replay, r.Err = s.Change(ctx, reqs[i])
					}
				}
			})
		}
	}
	wg.Wait()
	return out, nil
}

// batchWorkers bounds the goroutines, and so the connections, one batch
// uses on database db: half its pool, so that single calls keep the other
// half while a batch runs.
func (s *Store) batchWorkers(db int) int {
	return max(1, int(s.router.Database(db).Config().MaxConns)/2)
}

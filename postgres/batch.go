package postgres

import (
	"context"
	"sync"

	"github.com/cofferhq/coffer"
)

// BatchChange applies a batch's changes as one job per database, in
// request order: each database's changes go into its next batch (settle),
// planned one after the other as if sent so, one transaction for all of
// them. The batch is one call: the store's Timeout bounds all of it, and a
// change still waiting at the end answers shard_unavailable, as a single
// call would. A change that credits a purchase claims its order first,
// in request order (claimPurchases), within half the Timeout: a claim's
// database that stalls fails the changes that claim after it
// (shard_unavailable), and the others keep time for their writes. Cost:
// two round trips and one commit per database (more when a batch is
// split), and a round trip per change that claims.
func (s *Store) BatchChange(ctx context.Context, reqs []coffer.ChangeRequest) ([]coffer.ChangeResult, error) {
	if err := coffer.ValidateBatchSize(len(reqs)); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	claims, cancelClaims := context.WithTimeout(ctx, s.opts.Timeout/2)
	defer cancelClaims()
	out := make([]coffer.ChangeResult, len(reqs))
	byDatabase := map[int][]*request{}
	at := map[*request]int{}
	for i, req := range reqs {
		v, err := s.catalog.ValidateChange(req)
		if err == nil {
			err = s.claimPurchases(claims, v)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		r := &request{scope: req.Scope, write: v}
		db := s.router.DatabaseIndex(s.shardOf(req.PlayerID)) // -1 for shards being cut over
		byDatabase[db], at[r] = append(byDatabase[db], r), i
	}
	var wg sync.WaitGroup
	for _, writes := range byDatabase {
		wg.Go(func() {
			s.write(ctx, writes)
			for _, r := range writes {
				res := &out[at[r]]
				res.Trx, res.Replay, res.Err = r.answer()
			}
		})
	}
	wg.Wait()
	return out, nil
}

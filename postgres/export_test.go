package postgres

import (
	"context"

	"github.com/cofferhq/coffer"
)

// PlanChange is Change without grantTrx: the service plans every change,
// so that tests can compare what the two write.
func (s *Store) PlanChange(ctx context.Context, req coffer.ChangeRequest) (coffer.Trx, bool, error) {
	v, err := s.catalog.ValidateChange(req)
	if err != nil {
		return coffer.Trx{}, false, err
	}
	if err := s.claimPurchases(ctx, v); err != nil {
		return coffer.Trx{}, false, err
	}
	return s.planChange(ctx, v)
}

// RevenueSQL is the revenue report's statement on shard id.
func RevenueSQL(id coffer.ShardID) string { return newQueries(id).revenue }

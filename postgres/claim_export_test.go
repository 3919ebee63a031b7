package postgres

import (
	"context"

	"github.com/cofferhq/coffer"
)

// ClaimOnly takes the claims of a change's purchases and stops there, as
// a crash between the claims and the credit leaves them.
func (s *Store) ClaimOnly(ctx context.Context, req coffer.ChangeRequest) error {
	v, err := s.catalog.ValidateChange(req)
	if err != nil {
		return err
	}
	return s.claimPurchases(ctx, v)
}

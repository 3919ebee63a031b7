package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimSQL claims a store order for a request and answers who holds the
// claim: the request if the insert took it, else the earlier claimant.
// In one statement the insert's row and the select's do not meet (they
// share a snapshot), so it answers one row, or none when the order was
// claimed by a request that committed after the statement began: the
// insert waited for it and did nothing, and the select could not see it;
// claimOwnerSQL, a statement of its own, then can.
const claimSQL = `WITH claimed AS (
		INSERT INTO purchase_claim_N (ns, store, order_id, player_id, emitter, idempotency_key, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp())
		ON CONFLICT (ns, store, order_id) DO NOTHING
		RETURNING player_id, emitter, idempotency_key)
	SELECT player_id, emitter, idempotency_key FROM claimed
	UNION ALL
	SELECT player_id, emitter, idempotency_key FROM purchase_claim_N WHERE ns = $1 AND store = $2 AND order_id = $3`

const claimOwnerSQL = `SELECT player_id, emitter, idempotency_key FROM purchase_claim_N
	WHERE ns = $1 AND store = $2 AND order_id = $3`

// claim is one order to claim and, once read, its claim's owner.
type claim struct {
	key   coffer.PurchaseKey
	shard coffer.ShardID
	owner *coffer.Scope
}

// claimPurchases claims the store orders a change credits, for the
// change's scope, before the player's write may credit them
// (coffer.PurchaseKey.Credit): each claim is committed on the shard
// that holds it (shard.Map.ShardOfPurchase) in a transaction of its own,
// so a credit never happens before its claim is durable. It returns nil
// when every claim is the request's, purchase_already_credited at the
// first held by another request (the orders on the databases after its
// are not claimed; those on its own database are, and stay the scope's),
// shard_unavailable when a claim's database cannot answer. A claim, once
// taken, stays: a retry with the same scope finds it and goes on.
//
// Cost: nothing for a change without a purchase; otherwise one round trip
// (an implicit transaction) per database holding its claims, one more on
// a database where a claim raced with another request's, and two more
// where a synchronous standby is required (claimsOnStandby).
func (s *Store) claimPurchases(ctx context.Context, v coffer.ValidChange) error {
	keys := v.Purchases()
	if len(keys) == 0 {
		return nil
	}
	var dbs []int // in the order they first hold a claim
	byDB := map[int][]*claim{}
	for _, k := range keys {
		c := &claim{key: k, shard: s.router.Map().ShardOfPurchase(k)}
		db, err := s.home(ctx, c.shard, s.router.Writable)
		if err != nil {
			return err
		}
		if byDB[db] == nil {
			dbs = append(dbs, db)
		}
		byDB[db] = append(byDB[db], c)
	}
	for _, db := range dbs {
		claims := byDB[db]
		if err := s.claimOn(ctx, s.router.Database(db), v.Scope, claims); err != nil {
			return s.fail(claims[0].shard, err)
		}
		if s.router.RequiresStandby(db) {
			if err := s.claimsOnStandby(ctx, db); err != nil {
				return s.fail(claims[0].shard, err)
			}
		}
		for _, c := range claims {
			if err := c.key.Credit(v.Scope, *c.owner); err != nil {
				return err
			}
		}
	}
	return nil
}

// claimOn takes claims, all held by pool's database, for sc in one implicit
// transaction, in their order (coffer.ValidChange.Purchases: every
// request takes them in that order, so no two wait on each other in a
// cycle), and reads each claim's owner.
func (s *Store) claimOn(ctx context.Context, pool *pgxpool.Pool, sc coffer.Scope, claims []*claim) error {
	b := &pgx.Batch{}
	for _, c := range claims {
		b.Queue(shard.Tables(claimSQL, c.shard), c.key.Namespace, c.key.Store, c.key.OrderID,
			sc.PlayerID, sc.Emitter, sc.IdempotencyKey).QueryRow(c.scanOwner)
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	b = &pgx.Batch{}
	for _, c := range claims {
		if c.owner == nil {
			b.Queue(shard.Tables(claimOwnerSQL, c.shard), c.key.Namespace, c.key.Store, c.key.OrderID).QueryRow(c.scanOwner)
		}
	}
	if b.Len() > 0 {
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	for _, c := range claims {
		if c.owner == nil {
			// Claims are never deleted: one the insert found is there.
			return fmt.Errorf("claim of store %q order %q not found after a conflict", c.key.Store, c.key.OrderID)
		}
	}
	return nil
}

// claimsOnStandby waits, within Timeout, until a physical synchronous
// standby of database db has the claims just taken or found there: a
// COMMIT may have been released by a logical walsender (ADR 0009), and
// one cut off while it waited for the standby is completed on the
// primary alone; a retry finds such a claim and commits nothing that
// would wait. Claims are one per purchase, so this reads the standbys
// every time rather than only under synchronous_standby_names '*', as
// batches do.
func (s *Store) claimsOnStandby(ctx context.Context, db int) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	conn, err := s.router.Database(db).Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var upTo string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&upTo); err != nil {
		return err
	}
	if err := awaitStandby(ctx, conn.Conn(), upTo); err != nil {
		return &coffer.Error{Code: coffer.CodeUnavailable, Message: "the purchase's claim is on no synchronous standby yet", Err: err}
	}
	return nil
}

// scanOwner reads a claim's owner, if the statement found one.
func (c *claim) scanOwner(row pgx.Row) error {
	owner := coffer.Scope{Namespace: c.key.Namespace}
	err := row.Scan(&owner.PlayerID, &owner.Emitter, &owner.IdempotencyKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err == nil {
		c.owner = &owner
	}
	return err
}

const orderClaimSQL = `SELECT player_id, emitter, idempotency_key, created_at FROM purchase_claim_N
	WHERE ns = $1 AND store = $2 AND order_id = $3`

// Order reads a store order's claim: one lookup by its primary key, on the
// shard the order's key hashes to.
func (s *Store) Order(ctx context.Context, k coffer.PurchaseKey) (coffer.OrderClaim, error) {
	if err := k.Validate(); err != nil {
		return coffer.OrderClaim{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	id := s.router.Map().ShardOfPurchase(k)
	pool, err := s.pool(ctx, id)
	if err != nil {
		return coffer.OrderClaim{}, err
	}
	o := coffer.OrderClaim{Namespace: k.Namespace, Store: k.Store, OrderID: k.OrderID}
	err = pool.QueryRow(ctx, shard.Tables(orderClaimSQL, id), k.Namespace, k.Store, k.OrderID).
		Scan(&o.PlayerID, &o.Emitter, &o.IdempotencyKey, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return coffer.OrderClaim{}, coffer.Errorf(coffer.CodeNotFound, "store %q order %q was never presented in namespace %d", k.Store, k.OrderID, k.Namespace)
	}
	if err != nil {
		return coffer.OrderClaim{}, s.fail(id, err)
	}
	o.CreatedAt = o.CreatedAt.UTC()
	return o, nil
}

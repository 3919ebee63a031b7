package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// a database where a claim raced with another request's.
func (s *Store) claimPurchases(ctx context.Context, v coffer.ValidChange) error {
	keys := v.Purchases()
	if len(keys) == 0 {
		return nil
	}
	var dbs []int // in the order they first hold a claim
	byDB := map[int][]*claim{}
	for _, k := range keys {
		c := &claim{key: k, shard: s.router.Map().ShardOfPurchase(k)}
		db := s.router.DatabaseIndex(c.shard)
		if byDB[db] == nil {
			dbs = append(dbs, db)
		}
		byDB[db] = append(byDB[db], c)
	}
	for _, db := range dbs {
		claims := byDB[db]
		if err := s.claimOn(ctx, v.Scope, claims); err != nil {
			return s.fail(claims[0].shard, err)
		}
		for _, c := range claims {
			if err := c.key.Credit(v.Scope, *c.owner); err != nil {
				return err
			}
		}
	}
	return nil
}

// claimOn takes claims, all held by one database, for sc in one implicit
// transaction, in their order (coffer.ValidChange.Purchases: every
// request takes them in that order, so no two wait on each other in a
// cycle), and reads each claim's owner.
func (s *Store) claimOn(ctx context.Context, sc coffer.Scope, claims []*claim) error {
	pool, err := s.writePool(claims[0].shard)
	if err != nil {
		return err
	}
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

// creditedPage is a page of a shard's grants of purchases with their
// trx's scope and time, after the op ($1, $2), in op key order.
const creditedPage = `SELECT o.trx_id, o.seq, o.ns, o.purchase->>'store', o.purchase->>'order_id',
		t.player_id, t.emitter, t.idempotency_key, t.created_at
	FROM op_N o JOIN trx_N t ON t.trx_id = o.trx_id AND t.ns = o.ns AND t.player_id = o.player_id
	WHERE o.kind = 'grant' AND o.purchase IS NOT NULL AND (o.trx_id, o.seq) > ($1, $2)
	ORDER BY o.trx_id, o.seq LIMIT $3`

// claimCreditedSQL claims orders, given as arrays, for the trx that
// credited them, where no claim exists, in the order requests claim them
// (coffer.ValidChange.Purchases: store, then order id, byte by byte), so
// that it never waits on a request's claims in a cycle; contestedSQL,
// after it, counts those whose claim names another scope.
const (
	claimCreditedSQL = `INSERT INTO purchase_claim_N (ns, store, order_id, player_id, emitter, idempotency_key, created_at)
		SELECT * FROM unnest($1::integer[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::timestamptz[])
			AS c(ns, store, order_id, player_id, emitter, idempotency_key, created_at)
		ORDER BY c.ns, c.store COLLATE "C", c.order_id COLLATE "C"
		ON CONFLICT (ns, store, order_id) DO NOTHING`
	contestedSQL = `SELECT count(*)
		FROM unnest($1::integer[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[])
			AS c(ns, store, order_id, player_id, emitter, idempotency_key)
		JOIN purchase_claim_N p ON p.ns = c.ns AND p.store = c.store AND p.order_id = c.order_id
		WHERE (p.player_id, p.emitter, p.idempotency_key) <> (c.player_id, c.emitter, c.idempotency_key)`
)

// claimedPageLen bounds the credits ClaimCredited reads, and holds, at
// once.
const claimedPageLen = 1000

// ClaimCredited claims every store order credited so far, for the trx
// that credited it, where its claim is missing: the orders credited
// before claims existed (before migration V0011, or by an instance of an
// older version still serving after it), so that they too are credited
// at most once from now on. An order with a claim is left as it is; run
// again, it claims nothing. contested counts credits whose order's claim
// names another trx: an order credited twice before claims, which
// `coffer audit` lists. Safe while the service runs. Cost: one read of
// each shard's grants of purchases, in pages, and per page one round trip
// per shard holding their claims.
func ClaimCredited(ctx context.Context, router *shard.Router) (claimed, contested int64, err error) {
	for sh := range router.Map().ShardCount() {
		id := coffer.ShardID(sh)
		var afterTrx, afterSeq int64
		for {
			page, lastTrx, lastSeq, err := creditedOn(ctx, router, id, afterTrx, afterSeq)
			if err != nil {
				return claimed, contested, fmt.Errorf("shard %d: %w", id, err)
			}
			for at, rows := range page {
				n, c, err := claimCredits(ctx, router, at, rows)
				if err != nil {
					return claimed, contested, fmt.Errorf("claims on shard %d: %w", at, err)
				}
				claimed, contested = claimed+n, contested+c
			}
			if lastTrx == 0 {
				break
			}
			afterTrx, afterSeq = lastTrx, lastSeq
		}
	}
	return claimed, contested, nil
}

// creditedRows are credits as the arrays of claimCreditedSQL.
type creditedRows struct {
	ns, emitters         []int32
	stores, orders, keys []string
	players              []int64
	at                   []time.Time
}

// creditedOn reads a page of shard id's credits after op (afterTrx,
// afterSeq), grouped by the shard holding their claims, and the key of
// the page's last op (0 when the page is empty).
func creditedOn(ctx context.Context, router *shard.Router, id coffer.ShardID, afterTrx, afterSeq int64) (map[coffer.ShardID]*creditedRows, int64, int64, error) {
	rows, err := router.Shard(id).Query(ctx, shard.Tables(creditedPage, id), afterTrx, afterSeq, claimedPageLen)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	page := map[coffer.ShardID]*creditedRows{}
	var lastTrx, lastSeq int64
	for rows.Next() {
		var k coffer.PurchaseKey
		var player int64
		var emitter int32
		var key string
		var at time.Time
		if err := rows.Scan(&lastTrx, &lastSeq, &k.Namespace, &k.Store, &k.OrderID, &player, &emitter, &key, &at); err != nil {
			return nil, 0, 0, err
		}
		sh := router.Map().ShardOfPurchase(k)
		r := page[sh]
		if r == nil {
			r = &creditedRows{}
			page[sh] = r
		}
		r.ns, r.stores, r.orders = append(r.ns, int32(k.Namespace)), append(r.stores, k.Store), append(r.orders, k.OrderID)
		r.players, r.emitters, r.keys, r.at = append(r.players, player), append(r.emitters, emitter), append(r.keys, key), append(r.at, at)
	}
	return page, lastTrx, lastSeq, rows.Err()
}

// claimCredits claims credits' orders on shard at where no claim exists,
// in one implicit transaction, and counts the claims taken and the
// credits contested.
func claimCredits(ctx context.Context, router *shard.Router, at coffer.ShardID, r *creditedRows) (claimed, contested int64, err error) {
	b := &pgx.Batch{}
	b.Queue(shard.Tables(claimCreditedSQL, at), r.ns, r.stores, r.orders, r.players, r.emitters, r.keys, r.at).Exec(func(tag pgconn.CommandTag) error {
		claimed = tag.RowsAffected()
		return nil
	})
	b.Queue(shard.Tables(contestedSQL, at), r.ns, r.stores, r.orders, r.players, r.emitters, r.keys).QueryRow(func(row pgx.Row) error {
		return row.Scan(&contested)
	})
	err = router.Shard(at).SendBatch(ctx, b).Close()
	return claimed, contested, err
}

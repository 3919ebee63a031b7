package audit

import (
	"context"
	"fmt"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
)

// The once-only credit of store orders (ADR 0011), checked from the rows:
// every grant that credits a purchase has its order's claim, on the shard
// the order's key places it, naming the grant's trx (its namespace,
// player, emitter and idempotency key: a scope has one trx); so no two
// trx, on any shards, credit one order. A claim is committed before its
// credit, so the check runs on a live ledger: a credit it reads has a
// claim it can read after.

// creditedTwice is the same property within one shard, read without the
// claims: no order is credited by two trx.
const creditedTwice = `SELECT ns, purchase->>'store', purchase->>'order_id', array_agg(DISTINCT trx_id)
	FROM op_N WHERE kind = 'grant' AND purchase IS NOT NULL
	GROUP BY 1, 2, 3 HAVING count(DISTINCT trx_id) > 1`

// creditsPage is a page of a shard's grants of purchases and their trx's
// scope, after the op ($1, $2), in op key order.
const creditsPage = `SELECT o.trx_id, o.seq, o.ns, o.purchase->>'store', o.purchase->>'order_id',
		t.player_id, t.emitter, t.idempotency_key
	FROM op_N o JOIN trx_N t ON t.trx_id = o.trx_id AND t.ns = o.ns AND t.player_id = o.player_id
	WHERE o.kind = 'grant' AND o.purchase IS NOT NULL AND (o.trx_id, o.seq) > ($1, $2)
	ORDER BY o.trx_id, o.seq LIMIT $3`

// unclaimed reads, of the credits given as arrays, those whose order's
// claim (on this shard) is missing or names another scope.
const unclaimed = `SELECT c.ns, c.store, c.order_id, c.player_id, c.trx_id,
		p.player_id, p.emitter, p.idempotency_key
	FROM unnest($1::integer[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::bigint[])
		AS c(ns, store, order_id, player_id, emitter, idempotency_key, trx_id)
	LEFT JOIN purchase_claim_N p ON p.ns = c.ns AND p.store = c.store AND p.order_id = c.order_id
	WHERE p.ns IS NULL OR (p.player_id, p.emitter, p.idempotency_key) <> (c.player_id, c.emitter, c.idempotency_key)`

// creditsPageLen bounds the credits read, and held, at once.
const creditsPageLen = 1000

// credit is one trx's credit of a store order.
type credit struct {
	key   coffer.PurchaseKey
	scope coffer.Scope
	trx   int64
}

// checkClaims checks the claims of the purchases credited on shard id.
func (c *Checker) checkClaims(ctx context.Context, id coffer.ShardID, r *Report) {
	name := "order credited twice"
	if err := c.collect(ctx, id, name, shard.Tables(creditedTwice, id), r); err != nil {
		r.Failures = append(r.Failures, Failure{Shard: id, Check: name, Error: err.Error()})
	}
	name = "purchase without its claim"
	var afterTrx, afterSeq int64
	budget := violationsMax
	for budget > 0 {
		page, lastTrx, lastSeq, err := c.credits(ctx, id, afterTrx, afterSeq)
		if err == nil {
			err = c.checkCredits(ctx, id, page, r, &budget)
		}
		if err != nil {
			r.Failures = append(r.Failures, Failure{Shard: id, Check: name, Error: err.Error()})
			return
		}
		if lastTrx == 0 {
			return
		}
		afterTrx, afterSeq = lastTrx, lastSeq
	}
}

// credits reads a page of shard id's credits after op (afterTrx,
// afterSeq), grouped by the shard holding their claims, one per trx and
// order, and the key of the page's last op (0 if the page is empty).
func (c *Checker) credits(ctx context.Context, id coffer.ShardID, afterTrx, afterSeq int64) (map[coffer.ShardID][]credit, int64, int64, error) {
	rows, err := c.query(ctx, id, shard.Tables(creditsPage, id), afterTrx, afterSeq, creditsPageLen)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	page := map[coffer.ShardID][]credit{}
	seen := map[credit]bool{} // a bundle: one order on several grants of a trx
	var lastTrx, lastSeq int64
	for rows.Next() {
		var cr credit
		if err := rows.Scan(&lastTrx, &lastSeq, &cr.key.Namespace, &cr.key.Store, &cr.key.OrderID,
			&cr.scope.PlayerID, &cr.scope.Emitter, &cr.scope.IdempotencyKey); err != nil {
			return nil, 0, 0, err
		}
		cr.trx, cr.scope.Namespace = lastTrx, cr.key.Namespace
		if !seen[cr] {
			seen[cr] = true
			at := c.Router.Map().ShardOfPurchase(cr.key)
			page[at] = append(page[at], cr)
		}
	}
	return page, lastTrx, lastSeq, rows.Err()
}

// checkCredits looks up the claims of a page of shard id's credits on the
// shards that hold them; a credit whose claim is missing or names another
// scope is a violation of shard id, up to budget of them.
func (c *Checker) checkCredits(ctx context.Context, id coffer.ShardID, page map[coffer.ShardID][]credit, r *Report, budget *int) error {
	for at, credits := range page {
		var ns, emitters []int32
		var stores, orders, keys []string
		var players, trxs []int64
		for _, cr := range credits {
			ns, stores, orders = append(ns, int32(cr.key.Namespace)), append(stores, cr.key.Store), append(orders, cr.key.OrderID)
			players, emitters, keys = append(players, int64(cr.scope.PlayerID)), append(emitters, int32(cr.scope.Emitter)), append(keys, cr.scope.IdempotencyKey)
			trxs = append(trxs, cr.trx)
		}
		rows, err := c.query(ctx, at, shard.Tables(unclaimed, at),
			ns, stores, orders, players, emitters, keys, trxs)
		if err != nil {
			return fmt.Errorf("claims on shard %d: %w", at, err)
		}
		for rows.Next() {
			var k coffer.PurchaseKey
			var player, trx int64
			var owner, ownerEmitter *int64
			var ownerKey *string
			if err := rows.Scan(&k.Namespace, &k.Store, &k.OrderID, &player, &trx, &owner, &ownerEmitter, &ownerKey); err != nil {
				rows.Close()
				return err
			}
			detail := fmt.Sprintf("ns %d store %q order %q credited by trx %d of player %d: ", k.Namespace, k.Store, k.OrderID, trx, player)
			if owner == nil {
				detail += fmt.Sprintf("no claim on shard %d", at)
			} else {
				detail += fmt.Sprintf("the claim on shard %d names player %d emitter %d key %q", at, *owner, *ownerEmitter, *ownerKey)
			}
			if *budget > 0 {
				*budget--
				r.Violations = append(r.Violations, Violation{Shard: id, Check: "purchase without its claim", Detail: detail})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

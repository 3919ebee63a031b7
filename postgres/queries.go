package postgres

import (
	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
)

// queries are the statements of one shard. Table names carry the shard
// number, so each shard has its own text (and prepared statements).
type queries struct {
	nextIDs, trxByKey              string
	balancesAt                     string
	finlogAsc, finlogDesc          string
	expiredPlayers, pending        string
	sweptTo, sweptFirst, sweptNext string
	revenue                        string
	// batch are the statements of a batch of writes or balance reads.
	batch batchSQL
}

// lotColumns are read by scanLot, in this order.
const lotColumns = `l.lot_id, l.currency, l.paid, l.amount, l.reserved, l.expires_at, l.priority, l.created_at,
	COALESCE(l.store, ''), COALESCE(l.order_id, ''), COALESCE(l.fiat, ''), l.value, l.value_reserved, l.owed, l.exchanged, l.trx_id`

// trxColumns are read by scanTrx, in this order; ops come as a JSON array.
const trxColumns = `t.trx_id, t.emitter, t.idempotency_key, t.kind, t.status, t.reason, t.meta, t.created_at,
	t.hold_expires_at, t.pending_grants, t.request_hash, t.version, t.begin_version, t.pos, t.refund, COALESCE(t.finished_by, 0),
	COALESCE((SELECT json_agg(json_build_object('c', o.currency, 'a', o.amount, 'k', o.kind, 'p', o.paid,
		'l', o.lot_id, 'b', o.balance_after, 'q', o.paid_after, 'u', o.purchase, 'z', o.cause, 'x', o.fiat, 'v', o.value,
		'f', o.created_at = COALESCE(t.finished_at, t.created_at)) ORDER BY o.seq)
		FROM op_N o WHERE o.trx_id = t.trx_id), '[]')`

func newQueries(id coffer.ShardID) *queries {
	n := func(sql string) string { return shard.Tables(sql, id) }
	return &queries{
		// Ids a batch needs beyond those its lock drew (batchSQL.lock).
		nextIDs: n(`SELECT nextval('id_seq_N') FROM generate_series(1, $1)`),
		trxByKey: n(`SELECT ` + trxColumns + ` FROM trx_N t
			WHERE t.ns = $1 AND t.player_id = $2 AND t.emitter = $3 AND t.idempotency_key = $4`),
		batch: batchStatements.forShard(id),
		// Per currency, index lookups in op_N_at and the lot key: the
		// balance after the last op at or before $3; the lots with coins
		// whose expiry had come by $3; and the ops of the first write
		// after $3 on such lots, with their expiries (coffer.PastBalance:
		// the domain says what counts; only those ops can). Once, in the
		// trx key and trx_N_finished: the player's last trx and last hold
		// finish at or before $3 (coffer.PastVersion).
		balancesAt: n(`SELECT c.currency, COALESCE(o.balance_after, 0), COALESCE(o.paid_after, 0),
				x.amounts, x.paid, x.expires, y.amounts, y.paid, y.expires,
				t.created_at, t.version, t.begin_version, f.finished_at, f.version
			FROM unnest($4::int[]) AS c(currency)
			LEFT JOIN (SELECT created_at, version, begin_version FROM trx_N
				WHERE ns = $1 AND player_id = $2 AND created_at <= $3 ORDER BY created_at DESC, pos DESC LIMIT 1) t ON true
			LEFT JOIN (SELECT finished_at, version FROM trx_N
				WHERE ns = $1 AND player_id = $2 AND finished_at IS NOT NULL AND finished_at <= $3 ORDER BY finished_at DESC LIMIT 1) f ON true
			LEFT JOIN LATERAL (SELECT balance_after, paid_after FROM op_N
				WHERE ns = $1 AND player_id = $2 AND currency = c.currency AND created_at <= $3
				ORDER BY created_at DESC, pos DESC LIMIT 1) o ON true
			LEFT JOIN LATERAL (SELECT array_agg(amount) AS amounts, array_agg(paid) AS paid, array_agg(expires_at) AS expires FROM lot_N
				WHERE ns = $1 AND player_id = $2 AND currency = c.currency AND amount > 0 AND expires_at <= $3) x ON true
			LEFT JOIN LATERAL (SELECT array_agg(n.amount) AS amounts, array_agg(n.paid) AS paid, array_agg(l.expires_at) AS expires
				FROM op_N n JOIN lot_N l ON l.ns = n.ns AND l.player_id = n.player_id AND l.currency = n.currency AND l.lot_id = n.lot_id
					AND l.expires_at <= $3
				WHERE n.ns = $1 AND n.player_id = $2 AND n.currency = c.currency
					AND n.created_at = (SELECT min(created_at) FROM op_N
						WHERE ns = $1 AND player_id = $2 AND currency = c.currency AND created_at > $3)) y ON true`),
		finlogAsc:  n(finlogSQL(false)),
		finlogDesc: n(finlogSQL(true)),
		// Not DISTINCT: that reads every due lot before the first row;
		// the sweeper skips a player it has seen instead.
		// Neither lists the candidates whose writes failed in the last
		// pass ($3 …), which the sweeper tries again anyway (sweep).
		expiredPlayers: n(`SELECT ns, player_id FROM lot_N
			WHERE expires_at <= now() AND expires_at > $2 AND amount > 0
				AND (ns, player_id) NOT IN (SELECT unnest($3::int[]), unnest($4::bigint[])) LIMIT $1`),
		// The lot sweeper's window: read, set the first time, moved on
		// from what was read ($2) to the database's now less $1 µs.
		sweptTo:    n(`SELECT swept_to FROM expiry_sweep_N`),
		sweptFirst: n(`INSERT INTO expiry_sweep_N (swept_to) VALUES (now() - $1 * interval '1 microsecond') ON CONFLICT DO NOTHING`),
		sweptNext: n(`UPDATE expiry_sweep_N SET swept_to = GREATEST(swept_to, now() - $1 * interval '1 microsecond')
			WHERE swept_to = $2`),
		pending: n(`SELECT ns, player_id, emitter, idempotency_key FROM trx_N
			WHERE status = 'pending' AND hold_expires_at <= now()
				AND (ns, player_id, emitter, idempotency_key) NOT IN
					(SELECT unnest($2::int[]), unnest($3::bigint[]), unnest($4::int[]), unnest($5::text[]))
			ORDER BY hold_expires_at LIMIT $1`),
		revenue: n(revenueSQL),
	}
}

// finlogSQL pages a player's trx in the order of the trx primary key,
// (created_at, pos), which is position order: one index range scan, from
// past ($3, $4) to $5, of at most $9 trx. Of those, the ones that pass the
// filters (reason $6, currency $7, kind $10, status $11, idempotency key
// $12; each NULL for none) (hit) are the page, and the scan stops at $8 of them; so a
// filter that few trx pass bounds the rows a page reads, not only those
// it answers. When the scan reaches its bound, its last trx comes too
// (the edge): where the next page starts if this one is not full. The
// range starts at a row comparison, never a NULL test, so that a generic
// plan keeps it in the index condition. The currency test is a scalar
// subquery, not EXISTS, which the planner may make a hash of the whole
// shard's ops of that currency: it looks at each scanned trx's ops.
func finlogSQL(desc bool) string {
	cmp, end, dir := ">", "<", "ASC"
	if desc {
		cmp, end, dir = "<", ">=", "DESC"
	}
	order := `t.created_at ` + dir + `, t.pos ` + dir
	return `SELECT t.hit, t.n = $9, ` + trxColumns + ` FROM (
		SELECT t.*, row_number() OVER (ORDER BY ` + order + `) AS n,
			($6::text IS NULL OR t.reason = $6)
			AND ($10::text IS NULL OR t.kind::text = $10) AND ($11::text IS NULL OR t.status::text = $11)
			AND ($12::text IS NULL OR t.idempotency_key = $12)
			AND ($7::int IS NULL OR COALESCE((SELECT true FROM op_N o WHERE o.trx_id = t.trx_id AND o.currency = $7 LIMIT 1), false)) AS hit
		FROM trx_N t
		WHERE t.ns = $1 AND t.player_id = $2 AND (t.created_at, t.pos) ` + cmp + ` ($3, $4) AND t.created_at ` + end + ` $5
		ORDER BY ` + order + ` LIMIT $9) t
		WHERE t.hit OR t.n = $9
		ORDER BY ` + order + ` LIMIT $8`
}

// revenueSQL sums, for the revenue report of a namespace ($1) over
// [$2, $3) on one shard, what coffer.RevenueSum says, per currency and
// fiat (which figures each sum makes is coffer.RevenueReport's to say):
//
//   - the namespace's paid ops up to $3 by kind, cause and whether they
//     are in the period, in op_N_revenue (an index-only scan: the
//     deferred figure needs all of them since the first);
//   - the paid consumes of the holds pending at some time in [$2, $3],
//     in trx_N_holds, by whether pending at $2 and at $3;
//   - the shortfalls of the period's refunds (coins and the value the
//     refund recorded), in trx_N_refunds, each under the fiat of its
//     order's grant in that currency (op_N_order).
const revenueSQL = `SELECT currency, fiat, reserved, shortfall, kind, cause, within, at_from, at_to, sum(amount), sum(value)
	FROM (SELECT currency, COALESCE(fiat, '') AS fiat, false AS reserved, false AS shortfall, kind::text AS kind, cause::text AS cause, amount,
			COALESCE(value, 0) AS value, created_at >= $2 AS within, false AS at_from, false AS at_to
		FROM op_N WHERE ns = $1 AND paid AND created_at < $3
	UNION ALL
	SELECT o.currency, COALESCE(o.fiat, ''), true, false, '', '', -o.amount, -COALESCE(o.value, 0), false,
			t.created_at < $2 AND COALESCE(t.finished_at, 'infinity'::timestamptz) >= $2, COALESCE(t.finished_at, 'infinity'::timestamptz) >= $3
		FROM trx_N t JOIN op_N o ON o.trx_id = t.trx_id
		WHERE t.ns = $1 AND t.kind = 'hold' AND COALESCE(t.finished_at, 'infinity'::timestamptz) >= $2 AND t.created_at < $3
			AND o.kind = 'consume' AND o.cause = 'change' AND o.paid
	UNION ALL
	SELECT (s->>'currency')::int, COALESCE((SELECT g.fiat FROM op_N g WHERE g.ns = t.ns AND g.player_id = t.player_id
				AND g.purchase IS NOT NULL AND g.purchase->>'store' = t.refund->>'store' AND g.purchase->>'order_id' = t.refund->>'order_id'
				AND g.kind = 'grant' AND g.currency = (s->>'currency')::int LIMIT 1), ''),
			false, true, '', '', (s->>'amount')::bigint, COALESCE((s->>'value')::bigint, 0), true, false, false
		FROM trx_N t CROSS JOIN jsonb_array_elements(t.refund->'shortfall') s
		WHERE t.ns = $1 AND t.refund IS NOT NULL AND t.created_at >= $2 AND t.created_at < $3) x
	GROUP BY currency, fiat, reserved, shortfall, kind, cause, within, at_from, at_to`

package postgres

import (
	"github.com/cofferhq/coffer"
)

// queries are the statements of one shard. Table names carry the shard
// number, so each shard has its own text (and prepared statements).
type queries struct {
	nextIDs, trxByKey       string
	balancesAt              string
	finlogAsc, finlogDesc   string
	expiredPlayers, pending string
	revenue                 string
	// batch are the statements of a batch of writes or balance reads.
	batch batchSQL
}

// lotColumns are read by scanLot, in this order.
const lotColumns = `l.lot_id, l.currency, l.paid, l.amount, l.reserved, l.expires_at, l.priority, l.created_at,
	COALESCE(l.store, ''), COALESCE(l.order_id, ''), COALESCE(l.fiat, ''), l.value, l.value_reserved`

// trxColumns are read by scanTrx, in this order; ops come as a JSON array.
// meta is canonical text; meta_jsonb what an earlier coffer stored (V0010).
const trxColumns = `t.trx_id, t.emitter, t.idempotency_key, t.kind, t.status, t.reason, t.meta, t.meta_jsonb, t.created_at,
	t.hold_expires_at, t.pending_grants, t.request_hash, t.version, t.pos, t.refund,
	COALESCE((SELECT json_agg(json_build_object('c', o.currency, 'a', o.amount, 'k', o.kind, 'p', o.paid,
		'l', o.lot_id, 'b', o.balance_after, 'q', o.paid_after, 'u', o.purchase, 'z', o.cause, 'x', o.fiat, 'v', o.value,
		'f', o.created_at = COALESCE(t.finished_at, t.created_at)) ORDER BY o.seq)
		FROM op_N o WHERE o.trx_id = t.trx_id), '[]')`

func newQueries(id coffer.ShardID) *queries {
	n := func(sql string) string { return shardSQL(sql, id) }
	return &queries{
		// Ids a batch needs beyond those its lock drew (batchQueries.lock).
		nextIDs: n(`SELECT nextval('id_seq_N') FROM generate_series(1, $1)`),
		trxByKey: n(`SELECT ` + trxColumns + ` FROM trx_N t
			WHERE t.ns = $1 AND t.player_id = $2 AND t.emitter = $3 AND t.idempotency_key = $4`),
		batch: batchStatements.forShard(id),
		// One index lookup per currency in op_N_at, in position order
		// (times never go back as positions grow); expiries not yet
		// recorded by the sweeper are subtracted from lots (they are not
		// in the op chain yet, and their lots still hold the amount).
		balancesAt: n(`SELECT c.currency, COALESCE(o.balance_after, 0) - COALESCE(x.total, 0), COALESCE(o.paid_after, 0) - COALESCE(x.paid, 0),
				(SELECT t.version FROM trx_N t WHERE t.ns = $1 AND t.player_id = $2 AND t.created_at <= $3
					ORDER BY t.created_at DESC, t.pos DESC LIMIT 1)
			FROM unnest($4::int[]) AS c(currency)
			LEFT JOIN LATERAL (SELECT balance_after, paid_after FROM op_N
				WHERE ns = $1 AND player_id = $2 AND currency = c.currency AND created_at <= $3
				ORDER BY created_at DESC, pos DESC LIMIT 1) o ON true
			LEFT JOIN LATERAL (SELECT sum(amount) AS total, sum(amount) FILTER (WHERE paid) AS paid FROM lot_N
				WHERE ns = $1 AND player_id = $2 AND currency = c.currency AND amount > 0 AND expires_at <= $3) x ON true`),
		finlogAsc:  n(finlogSQL(false)),
		finlogDesc: n(finlogSQL(true)),
		// Not DISTINCT: that reads every due lot before the first row;
		// the sweeper skips a player it has seen instead.
		expiredPlayers: n(`SELECT ns, player_id FROM lot_N
			WHERE expires_at <= now() AND expires_at > $2 AND amount > 0 LIMIT $1`),
		pending: n(`SELECT ns, player_id, emitter, idempotency_key FROM trx_N
			WHERE status = 'pending' AND hold_expires_at <= now() ORDER BY hold_expires_at LIMIT $1`),
		revenue: n(`SELECT currency,
				COALESCE(sum(amount) FILTER (WHERE kind = 'grant' AND cause = 'change' AND created_at >= $2), 0),
				COALESCE(sum(-amount) FILTER (WHERE kind = 'consume' AND cause = 'change' AND created_at >= $2), 0)
					- COALESCE(sum(amount) FILTER (WHERE kind = 'grant' AND cause = 'release' AND created_at >= $2), 0),
				COALESCE(sum(amount) FILTER (WHERE kind = 'grant' AND cause = 'exchange' AND created_at >= $2), 0),
				COALESCE(sum(-amount) FILTER (WHERE kind = 'consume' AND cause = 'exchange' AND created_at >= $2), 0),
				COALESCE(sum(-amount) FILTER (WHERE kind = 'expire' AND created_at >= $2), 0),
				COALESCE(sum(-amount) FILTER (WHERE kind = 'consume' AND cause = 'refund' AND created_at >= $2), 0),
				COALESCE(sum(amount), 0)
			FROM op_N WHERE ns = $1 AND paid AND created_at < $3 GROUP BY currency`),
	}
}

// finlogSQL pages a player's trx in the order of the trx primary key,
// (created_at, pos), which is position order, so that each page is one
// index range scan.
func finlogSQL(desc bool) string {
	cmp, dir := ">", "ASC"
	if desc {
		cmp, dir = "<", "DESC"
	}
	return `SELECT ` + trxColumns + ` FROM trx_N t
		WHERE t.ns = $1 AND t.player_id = $2
		AND t.created_at >= $3 AND t.created_at < $4
		AND ($5::text IS NULL OR t.reason = $5)
		AND ($6::int IS NULL OR EXISTS (SELECT 1 FROM op_N o WHERE o.trx_id = t.trx_id AND o.currency = $6))
		AND ($7::timestamptz IS NULL OR (t.created_at, t.pos) ` + cmp + ` ($7, $8))
		ORDER BY t.created_at ` + dir + `, t.pos ` + dir + `
		LIMIT $9`
}

package postgres

import (
	"github.com/cofferhq/coffer"
)

// queries are the statements of one shard. Table names carry the shard
// number, so each shard has its own text (and prepared statements).
type queries struct {
	lockPlayer, nextIDs, setPos            string
	lots, lotsIn, trxByKey                 string
	insertTrx, finishHold, grantTrx        string
	insertOps, insertLots                  string
	updateLots, balancesNow, balancesAt    string
	insertOp, insertLot, updateLot         string
	finlogAsc, finlogDesc                  string
	expiredPlayers, pendingHolds           string
	lockPlayerSkip, revenue, trxOpsColumns string
	// idempotencyIndex names the unique index of trx keys.
	idempotencyIndex string
}

// lotColumns are read by scanLots, in this order.
const lotColumns = `lot_id, currency, paid, amount, reserved, expires_at, priority, created_at`

// trxColumns are read by scanTrx, in this order; ops come as a JSON array.
// meta is canonical text; meta_jsonb what an earlier coffer stored (V0010).
const trxColumns = `t.trx_id, t.idempotency_key, t.kind, t.status, t.reason, t.meta, t.meta_jsonb, t.created_at,
	t.hold_expires_at, t.pending_grants, t.request_hash, t.version, t.pos,
	COALESCE((SELECT json_agg(json_build_object('c', o.currency, 'a', o.amount, 'k', o.kind, 'p', o.paid,
		'l', o.lot_id, 'b', o.balance_after, 'q', o.paid_after, 'u', o.purchase, 'z', o.cause,
		'f', o.created_at = COALESCE(t.finished_at, t.created_at)) ORDER BY o.seq)
		FROM op_N o WHERE o.trx_id = t.trx_id), '[]')`

func newQueries(id coffer.ShardID) *queries {
	n := func(sql string) string { return shardSQL(sql, id) }
	return &queries{
		// Every write locks the player first and bumps the version; the
		// timestamp never goes back for a player, so times never go back
		// as positions grow. It returns the last position handed out
		// (the write hands out the next ones and stores the last with
		// setPos). The same statement draws the trx's ids ($3 of them):
		// one statement fewer per write.
		lockPlayer: n(`INSERT INTO balance_N AS b (ns, player_id, version, updated_at)
			VALUES ($1, $2, 1, clock_timestamp())
			ON CONFLICT (ns, player_id) DO UPDATE
			SET version = b.version + 1, updated_at = greatest(clock_timestamp(), b.updated_at + interval '1 microsecond')
			RETURNING version, updated_at, pos, ARRAY(SELECT nextval('id_seq_N') FROM generate_series(1, $3))`),
		setPos:         n(`UPDATE balance_N SET pos = $3 WHERE ns = $1 AND player_id = $2`),
		lockPlayerSkip: n(`SELECT 1 FROM balance_N WHERE ns = $1 AND player_id = $2 FOR UPDATE SKIP LOCKED`),
		nextIDs:        n(`SELECT nextval('id_seq_N') FROM generate_series(1, $1)`),
		// A write reads the held lots: those with an amount, and those
		// a pending hold reserves from, which its rollback returns to.
		lots: n(`SELECT ` + lotColumns + ` FROM lot_N
			WHERE ns = $1 AND player_id = $2 AND (amount > 0 OR reserved > 0)`),
		// A write reads only the currencies it touches (the lot key leads
		// with them): reading every lot made its cost grow with each
		// currency the player ever held.
		lotsIn: n(`SELECT ` + lotColumns + ` FROM lot_N
			WHERE ns = $1 AND player_id = $2 AND currency = ANY($3) AND (amount > 0 OR reserved > 0)`),
		trxByKey: n(`SELECT ` + trxColumns + ` FROM trx_N t
			WHERE t.ns = $1 AND t.player_id = $2 AND t.emitter = $3 AND t.idempotency_key = $4`),
		trxOpsColumns:    n(trxColumns),
		idempotencyIndex: n(`trx_N_idempotency`),
		insertTrx: n(`INSERT INTO trx_N (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash,
			kind, status, reason, meta, hold_expires_at, pending_grants, version, pos)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`),
		grantTrx: n(`SELECT * FROM grant_trx_N($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`),
		finishHold: n(`UPDATE trx_N SET status = $5, version = $6, finished_at = $7
			WHERE ns = $1 AND player_id = $2 AND created_at = $3 AND trx_id = $4`),
		// A trx of one op moving one lot is the common case: single-row
		// statements for it, since unnest costs PostgreSQL more than the
		// row itself (an op: 13–18 µs as VALUES, 23–27 µs through unnest,
		// docs/benchmarks.md).
		insertOp: n(`INSERT INTO op_N (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid,
			balance_after, paid_after, created_at, purchase, pos)
			VALUES ($4, $5, $1, $2, $6, $7, $8, $9, $10, $11, $12, $13, $3, $14, $15)`),
		insertLot: n(`INSERT INTO lot_N (ns, player_id, lot_id, currency, paid, amount, expires_at, priority, created_at, trx_id)
			VALUES ($1, $2, $5, $6, $7, $8, $9, $10, $3, $4)`),
		updateLot: n(`UPDATE lot_N SET amount = $5, reserved = $6 WHERE ns = $1 AND player_id = $2 AND currency = $3 AND lot_id = $4`),
		insertOps: n(`INSERT INTO op_N (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid,
			balance_after, paid_after, created_at, purchase, pos)
			SELECT u.trx_id, u.seq, $1, $2, u.currency, u.lot_id, u.kind::op_kind, u.cause::op_cause, u.amount, u.paid,
				u.balance_after, u.paid_after, $3, u.purchase, u.pos
			FROM unnest($4::bigint[], $5::int[], $6::int[], $7::bigint[], $8::text[], $9::text[],
				$10::bigint[], $11::bool[], $12::bigint[], $13::bigint[], $14::jsonb[], $15::bigint[])
				AS u(trx_id, seq, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, purchase, pos)`),
		insertLots: n(`INSERT INTO lot_N (ns, player_id, lot_id, currency, paid, amount, expires_at, priority, created_at, trx_id)
			SELECT $1, $2, u.lot_id, u.currency, u.paid, u.amount, u.expires_at, u.priority, $3, $4
			FROM unnest($5::bigint[], $6::int[], $7::bool[], $8::bigint[], $9::timestamptz[], $10::int[])
				AS u(lot_id, currency, paid, amount, expires_at, priority)`),
		updateLots: n(`UPDATE lot_N l SET amount = u.amount, reserved = u.reserved
			FROM unnest($3::int[], $4::bigint[], $5::bigint[], $6::bigint[]) AS u(currency, lot_id, amount, reserved)
			WHERE l.ns = $1 AND l.player_id = $2 AND l.currency = u.currency AND l.lot_id = u.lot_id`),
		// One snapshot for the version and the lots: a cached balance is
		// never paired with another version.
		balancesNow: n(`SELECT b.version, l.lot_id, l.currency, l.paid, l.amount, l.expires_at, l.priority, l.created_at
			FROM balance_N b LEFT JOIN lot_N l ON l.ns = b.ns AND l.player_id = b.player_id
				AND l.amount > 0 AND (l.expires_at IS NULL OR l.expires_at > now())
			WHERE b.ns = $1 AND b.player_id = $2`),
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
		pendingHolds: n(`SELECT ns, player_id, emitter, idempotency_key FROM trx_N
			WHERE status = 'pending' AND hold_expires_at <= now() ORDER BY hold_expires_at LIMIT $1`),
		revenue: n(`SELECT currency,
				COALESCE(sum(amount) FILTER (WHERE kind = 'grant' AND cause = 'change' AND created_at >= $2), 0),
				COALESCE(sum(-amount) FILTER (WHERE kind = 'consume' AND cause = 'change' AND created_at >= $2), 0)
					- COALESCE(sum(amount) FILTER (WHERE kind = 'grant' AND cause = 'release' AND created_at >= $2), 0),
				COALESCE(sum(amount) FILTER (WHERE kind = 'grant' AND cause = 'exchange' AND created_at >= $2), 0),
				COALESCE(sum(-amount) FILTER (WHERE kind = 'consume' AND cause = 'exchange' AND created_at >= $2), 0),
				COALESCE(sum(-amount) FILTER (WHERE kind = 'expire' AND created_at >= $2), 0),
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

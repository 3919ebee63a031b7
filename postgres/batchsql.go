package postgres

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/cofferhq/coffer"
)

// The statements of a batch on one shard: a batch sends them for every
// shard its writes (or reads) touch, in shard order, all in the same round
// trip, each with the rows of that shard in arrays (unnest): three to read
// (the locks, the lots, the trx) and one to write (writeSQL). A statement
// over every shard of a database, a data-modifying WITH per shard, was
// tried first: PostgreSQL opens every table it names and its indexes,
// touched or not, and each branch cost about what a statement of its own
// costs (docs/adr/0012-group-commit.md).

// keyedJoins is sent first in every batch's transaction. The batch
// statements join arrays of keys (unnest) to the shard tables, prepared
// once per connection. Left to itself PostgreSQL plans them again at
// every execution (a custom plan: it guesses the rows of unnest better
// from the values, so the cached plan looks costlier), and planning a
// statement of four data-modifying parts cost more CPU than running it:
// coffer bench measured 1.1 ms of PostgreSQL CPU per write against 0.58
// with the cached plan. The cached (generic) plan guesses ten rows from
// unnest and, on a table of a few thousand rows, prefers a hash join over
// a sequential scan of the whole table (1 ms at a thousand rows) to ten
// index probes. Every batch statement is a lookup by key, so nested loops
// over the indexes are right at any size. Set for the transaction only,
// so other queries on the connection plan as usual.
const keyedJoins = `SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// batchSQL are the statements of a batch on one shard, written for shard
// N (shardSQL names the tables).
type batchSQL struct {
	lock, lots, trx, orders, exchanges, balances string
}

var batchStatements = batchSQL{
	// The players' locks, in one order: (ns, player_id) in a shard, and
	// shard after shard in the batch, so that two batches (or a batch and
	// a sweeper, which goes through batches too) never wait for each other
	// in a cycle. A player without a row gets one (version 0, which no trx
	// has). The update changes nothing: it takes the lock; the batch
	// stores the version, position and time its writes leave
	// (updateBalances). It returns the stored row, the time of the
	// player's next write (after its last: times never go back for a
	// player) and the ids the batch asked for ($3).
	lock: `WITH locked AS (INSERT INTO balance_N AS b (ns, player_id, version, updated_at, pos)
		SELECT ns, player_id, 0, clock_timestamp(), 0 FROM unnest($1::int[], $2::bigint[]) AS u(ns, player_id) ORDER BY ns, player_id
		ON CONFLICT (ns, player_id) DO UPDATE SET version = b.version
		RETURNING b.ns, b.player_id, b.version, b.pos, b.updated_at)
	SELECT l.ns, l.player_id, l.version, l.pos, l.updated_at, greatest(clock_timestamp(), l.updated_at + interval '1 microsecond'),
		ARRAY(SELECT nextval('id_seq_N') FROM generate_series(1, u.ids))
	FROM locked l JOIN unnest($1::int[], $2::bigint[], $3::int[]) AS u(ns, player_id, ids) ON u.ns = l.ns AND u.player_id = l.player_id`,
	// The held lots (with an amount, or a reservation a rollback may
	// return to them) of the currencies each player's writes touch: a row
	// per (player, currency), the lot key's leading columns, so that a
	// write's cost does not grow with every currency the player ever held;
	// currency 0 asks for all of them (a hold's commit or rollback, the
	// lot sweeper).
	lots: `SELECT l.ns, l.player_id, ` + lotColumns + `
		FROM unnest($1::int[], $2::bigint[], $3::int[]) AS u(ns, player_id, currency)
		JOIN lot_N l ON l.ns = u.ns AND l.player_id = u.player_id AND l.currency = u.currency
		WHERE u.currency <> 0 AND (l.amount > 0 OR l.reserved > 0)
	UNION ALL
	SELECT l.ns, l.player_id, ` + lotColumns + `
		FROM unnest($1::int[], $2::bigint[], $3::int[]) AS u(ns, player_id, currency)
		JOIN lot_N l ON l.ns = u.ns AND l.player_id = u.player_id
		WHERE u.currency = 0 AND (l.amount > 0 OR l.reserved > 0)`,
	// The stored trx under the keys the batch's writes name, with the
	// time a hold was finished at (attempt.applied).
	trx: `SELECT t.ns, t.player_id, t.finished_at, ` + trxColumns + `
		FROM unnest($1::int[], $2::bigint[], $3::int[], $4::text[]) AS u(ns, player_id, emitter, idempotency_key)
		JOIN trx_N t ON t.ns = u.ns AND t.player_id = u.player_id AND t.emitter = u.emitter AND t.idempotency_key = u.idempotency_key`,
	// The orders the players' refunds name: the lots their grants created
	// and what each grant cost (op_N_order), in the order of the grants,
	// and the trx that refunded
	// each, if any (trx_N_refund; a row with refunded_by > 0).
	orders: `SELECT u.ns, u.player_id, u.store, u.order_id, o.lot_id, o.currency, o.amount, COALESCE(o.value, 0), 0::bigint AS refunded_by, o.pos
		FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[]) AS u(ns, player_id, store, order_id)
		JOIN op_N o ON o.ns = u.ns AND o.player_id = u.player_id AND o.purchase IS NOT NULL
			AND o.purchase->>'store' = u.store AND o.purchase->>'order_id' = u.order_id AND o.kind = 'grant'
	UNION ALL
	SELECT u.ns, u.player_id, u.store, u.order_id, 0, 0, 0, 0, t.trx_id, t.pos
		FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[]) AS u(ns, player_id, store, order_id)
		JOIN trx_N t ON t.ns = u.ns AND t.player_id = u.player_id AND t.refund IS NOT NULL
			AND t.refund->>'store' = u.store AND t.refund->>'order_id' = u.order_id
	ORDER BY pos`,
	// The exchanges that made lots of the orders the players' refunds
	// name: the lots carrying an order (lot_N_order), the trx that
	// created each, and of those trx the paid ops with the cause exchange
	// (by the op key), which pair the lots an exchange consumed with
	// those it made (coffer.OrderState.Exchanges). A purchase's own lot
	// was created by its credit, which has no such op. In the player's
	// order, each trx's ops together.
	exchanges: `SELECT u.ns, u.player_id, u.store, u.order_id, o.trx_id, o.lot_id, o.currency, o.kind::text, o.cause::text, o.paid, o.amount
		FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[]) AS u(ns, player_id, store, order_id)
		JOIN LATERAL (SELECT DISTINCT l.trx_id FROM lot_N l
			WHERE l.ns = u.ns AND l.player_id = u.player_id AND l.store = u.store AND l.order_id = u.order_id) x ON true
		JOIN op_N o ON o.trx_id = x.trx_id AND o.ns = u.ns AND o.player_id = u.player_id AND o.paid AND o.cause = 'exchange'
	ORDER BY o.pos`,
	// Current balances of many players in one snapshot: each player's
	// version with its live lots, under the index of its read in the
	// batch ($3; a player read twice is answered twice).
	balances: `SELECT u.i, b.version, l.lot_id, l.currency, l.paid, l.amount, l.expires_at, l.priority, l.created_at
	FROM unnest($1::int[], $2::bigint[], $3::int[]) AS u(ns, player_id, i)
	JOIN balance_N b ON b.ns = u.ns AND b.player_id = u.player_id
	LEFT JOIN lot_N l ON l.ns = b.ns AND l.player_id = b.player_id AND l.amount > 0 AND (l.expires_at IS NULL OR l.expires_at > now())`,
}

// forShard is the statements with shard id's table names.
func (b batchSQL) forShard(id coffer.ShardID) batchSQL {
	n := func(sql string) string { return shardSQL(sql, id) }
	return batchSQL{lock: n(b.lock), lots: n(b.lots), trx: n(b.trx), orders: n(b.orders), exchanges: n(b.exchanges), balances: n(b.balances)}
}

// writeBranches are the parts of a batch's write on one shard, in the
// order the batch's rows bind to them: each inserts or updates the rows
// of one table, from its own arrays ($1 … of its own; writeSQL numbers
// them on). cols is how many arrays it takes.
var writeBranches = []struct {
	name, sql string
	cols      int
}{
	// A hold begun and finished in one batch is inserted finished: one
	// statement sees one snapshot and may not change a row twice.
	{"trx", `INSERT INTO trx_N (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash,
		kind, status, reason, meta, hold_expires_at, pending_grants, version, pos, finished_at, refund)
	SELECT ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash,
		kind::trx_kind, status::trx_status, reason, meta, hold_expires_at, pending_grants, version, pos, finished_at, refund
	FROM unnest($1::int[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::int[], $6::text[], $7::bytea[],
		$8::text[], $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::jsonb[], $14::bigint[], $15::bigint[], $16::timestamptz[],
		$17::jsonb[])
		AS u(ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status, reason, meta,
			hold_expires_at, pending_grants, version, pos, finished_at, refund)`, 17},
	// An op of a lot without a value (fiat NULL) stores no value.
	{"ops", `INSERT INTO op_N (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid,
		balance_after, paid_after, created_at, purchase, pos, fiat, value)
	SELECT trx_id, seq, ns, player_id, currency, lot_id, kind::op_kind, cause::op_cause, amount, paid,
		balance_after, paid_after, created_at, purchase, pos, NULLIF(fiat, ''), CASE WHEN fiat <> '' THEN value END
	FROM unnest($1::int[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::int[], $6::int[], $7::bigint[], $8::text[],
		$9::text[], $10::bigint[], $11::bool[], $12::bigint[], $13::bigint[], $14::jsonb[], $15::bigint[], $16::text[], $17::bigint[])
		AS u(ns, player_id, created_at, trx_id, seq, currency, lot_id, kind, cause, amount, paid,
			balance_after, paid_after, purchase, pos, fiat, value)`, 17},
	{"new_lots", `INSERT INTO lot_N (ns, player_id, lot_id, currency, paid, amount, reserved, expires_at, priority, created_at, trx_id,
		store, order_id, fiat, value, value_reserved)
	SELECT ns, player_id, lot_id, currency, paid, amount, reserved, expires_at, priority, created_at, trx_id,
		NULLIF(store, ''), NULLIF(order_id, ''), NULLIF(fiat, ''), value, value_reserved
	FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::int[], $5::bool[], $6::bigint[], $7::bigint[],
		$8::timestamptz[], $9::int[], $10::timestamptz[], $11::bigint[], $12::text[], $13::text[], $14::text[], $15::bigint[], $16::bigint[])
		AS u(ns, player_id, lot_id, currency, paid, amount, reserved, expires_at, priority, created_at, trx_id,
			store, order_id, fiat, value, value_reserved)`, 16},
	{"lots", `UPDATE lot_N l SET amount = u.amount, reserved = u.reserved, value = u.value, value_reserved = u.value_reserved
	FROM unnest($1::int[], $2::bigint[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
		AS u(ns, player_id, currency, lot_id, amount, reserved, value, value_reserved)
	WHERE l.ns = u.ns AND l.player_id = u.player_id AND l.currency = u.currency AND l.lot_id = u.lot_id`, 8},
	{"finished", `UPDATE trx_N t SET status = u.status::trx_status, version = u.version, finished_at = u.finished_at
	FROM unnest($1::int[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::text[], $6::bigint[], $7::timestamptz[])
		AS u(ns, player_id, created_at, trx_id, status, version, finished_at)
	WHERE t.ns = u.ns AND t.player_id = u.player_id AND t.created_at = u.created_at AND t.trx_id = u.trx_id`, 7},
	{"players", `UPDATE balance_N b SET version = u.version, pos = u.pos, updated_at = u.updated_at
	FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::bigint[], $5::timestamptz[]) AS u(ns, player_id, version, pos, updated_at)
	WHERE b.ns = u.ns AND b.player_id = u.player_id`, 5},
}

var param = regexp.MustCompile(`\$([0-9]+)`)

// writeSQL is the one statement that writes a batch's rows on shard id:
// a data-modifying WITH per table that has rows (bit i of parts for
// writeBranches[i]), none touching a row another touches.
func writeSQL(id coffer.ShardID, parts uint) string {
	var with []string
	offset := 0
	for i, br := range writeBranches {
		if parts&(1<<i) == 0 {
			continue
		}
		sql := param.ReplaceAllStringFunc(br.sql, func(p string) string {
			n, _ := strconv.Atoi(p[1:])
			return "$" + strconv.Itoa(n+offset)
		})
		with = append(with, br.name+" AS ("+sql+")")
		offset += br.cols
	}
	return shardSQL("WITH "+strings.Join(with, ",\n")+"\nSELECT 1", id)
}

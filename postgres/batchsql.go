package postgres

import (
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
)

// The statements of a batch on one shard: a batch sends them for every
// shard its writes (or reads) touch, in shard order, all in the same round
// trip, each with the rows of that shard in arrays (unnest): to read (the
// locks, the lots, the trx, a refund's orders and their exchanges) and
// one to write (writeSQL). A statement
// over every shard of a database, a data-modifying WITH per shard, was
// tried first: PostgreSQL opens every table it names and its indexes,
// touched or not, and each branch cost about what a statement of its own
// costs (docs/adr/0012-group-commit.md).
//
// The rows come as one array per column, unnested side by side in a
// select list (writeTable.from says why); a statement whose rows are one
// (a lone write's) takes its one-row form, the values themselves
// (oneRow, Store.bind).

// batchSession are the settings every connection of a store's batches
// starts with (Store.batchPools): sent in the connection's startup
// message (pgx RuntimeParams), so that no batch sends a statement for
// them, and a connection the pool makes anew has them too. Only the
// batches use those connections; the pool of the router, on which
// claims, reports, the finlog and the sweepers' listings run, keeps the
// server's settings.
//
// The batch statements join arrays of keys (unnest) to the shard tables,
// prepared once per connection. Left to itself PostgreSQL plans them
// again at every execution (a custom plan: it guesses the rows of unnest
// better from the values, so the cached plan looks costlier), and
// planning a statement of four data-modifying parts cost more CPU than
// running it (docs/adr/0012-group-commit.md). The cached (generic) plan
// guesses ten rows from unnest and, on a table of a few thousand rows,
// prefers a hash join over a sequential scan of the whole table to ten
// index probes. Every batch statement is a lookup by key, so nested loops
// over the indexes are right at any size: hash and merge joins off, and
// the generic plan forced.
//
// lock_timeout is LockTimeout. idle_in_transaction_session_timeout is
// Timeout, the longest a batch runs: it ends on the server a batch's
// transaction whose coffer is gone without a word (a network partition:
// no FIN arrives), instead of leaving it holding its players' locks and
// its committer's mark until TCP gives up, hours later.
func batchSession(o Options) map[string]string {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
	return map[string]string{
		"enable_hashjoin": "off", "enable_mergejoin": "off", "plan_cache_mode": "force_generic_plan",
		"lock_timeout": ms(o.LockTimeout), "idle_in_transaction_session_timeout": ms(o.Timeout),
	}
}

// batchSQL are the statements of a batch on one shard, written for shard
// N (shard.Tables names the tables).
type batchSQL struct {
	lock, peek, lots, trx, orders, exchanges, balances string
}

var batchStatements = batchSQL{
	// The players' locks, in one order: (ns, player_id) in a shard, and
	// shard after shard in the batch, so that two batches (or a batch and
	// a sweeper, which goes through batches too) never wait for each other
	// in a cycle. A player without a row gets one (version 0, which no trx
	// has). The update changes nothing: it takes the lock; the batch
	// stores the version, position and time its writes leave
	// (writeParts, playerTable). It returns the stored version, position
	// and time of the player's last write, the database's time (which
	// of the two the next write takes is coffer.NewPlayer's to say) and
	// the ids the batch asked for ($3).
	lock: `WITH locked AS (INSERT INTO balance_N AS b (ns, player_id, version, updated_at, pos)
		SELECT ns, player_id, 0, clock_timestamp(), 0 FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id) AS u ORDER BY ns, player_id
		ON CONFLICT (ns, player_id) DO UPDATE SET version = b.version
		RETURNING b.ns, b.player_id, b.version, b.pos, b.updated_at)
	SELECT l.ns, l.player_id, l.version, l.pos, l.updated_at, clock_timestamp(),
		ARRAY(SELECT nextval('id_seq_N') FROM generate_series(1, u.ids))
	FROM locked l JOIN (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::int[]) AS ids) AS u ON u.ns = l.ns AND u.player_id = l.player_id`,
	// The players' rows without their locks, as a batch that is not
	// careful reads them at its snapshot (docs/adr/0026-batch-snapshot.md):
	// the writes' statement takes the locks, and fails if another
	// transaction changed a row since. Such a batch waits for no lock
	// either: from here to its end, a lock held elsewhere fails it within
	// a millisecond (lock_timeout), and it runs again careful, waiting
	// as the lock's batch does. A player without a row is at version 0
	// and position 0, its last write at the epoch. Otherwise as lock.
	peek: `SELECT u.ns, u.player_id, COALESCE(b.version, 0), COALESCE(b.pos, 0), COALESCE(b.updated_at, 'epoch'), clock_timestamp(),
		ARRAY(SELECT nextval('id_seq_N') FROM generate_series(1, u.ids))
	FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::int[]) AS ids) AS u
	LEFT JOIN balance_N b ON b.ns = u.ns AND b.player_id = u.player_id
	CROSS JOIN (SELECT set_config('lock_timeout', '1ms', true)) AS nowait`,
	// The held lots (with an amount, or a reservation a rollback may
	// return to them) of the currencies each player's writes touch: a row
	// per (player, currency), the lot key's leading columns, so that a
	// write's cost does not grow with every currency the player ever held;
	// currency 0 asks for all of them (a hold's commit or rollback, the
	// lot sweeper).
	lots: `SELECT l.ns, l.player_id, ` + lotColumns + `
		FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::int[]) AS currency) AS u
		JOIN lot_N l ON l.ns = u.ns AND l.player_id = u.player_id AND l.currency = u.currency
		WHERE u.currency <> 0 AND (l.amount > 0 OR l.reserved > 0)
	UNION ALL
	SELECT l.ns, l.player_id, ` + lotColumns + `
		FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::int[]) AS currency) AS u
		JOIN lot_N l ON l.ns = u.ns AND l.player_id = u.player_id
		WHERE u.currency = 0 AND (l.amount > 0 OR l.reserved > 0)`,
	// The stored trx under the keys the batch's writes name.
	trx: `SELECT t.ns, t.player_id, ` + trxColumns + `
		FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::int[]) AS emitter, unnest($4::text[]) AS idempotency_key) AS u
		JOIN trx_N t ON t.ns = u.ns AND t.player_id = u.player_id AND t.emitter = u.emitter AND t.idempotency_key = u.idempotency_key`,
	// The orders the players' refunds name: the lots their grants created
	// and what each grant cost (op_N_order), in the order of the grants,
	// and the trx that refunded each, if any (trx_N_refund; a row with
	// refunded_by > 0).
	orders: `SELECT u.ns, u.player_id, u.store, u.order_id, o.lot_id, o.currency, o.amount, COALESCE(o.value, 0), 0::bigint AS refunded_by, o.pos
		FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::text[]) AS store, unnest($4::text[]) AS order_id) AS u
		JOIN op_N o ON o.ns = u.ns AND o.player_id = u.player_id AND o.purchase IS NOT NULL
			AND o.purchase->>'store' = u.store AND o.purchase->>'order_id' = u.order_id AND o.kind = 'grant'
	UNION ALL
	SELECT u.ns, u.player_id, u.store, u.order_id, 0, 0, 0, 0, t.trx_id, t.pos
		FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::text[]) AS store, unnest($4::text[]) AS order_id) AS u
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
		FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::text[]) AS store, unnest($4::text[]) AS order_id) AS u
		JOIN LATERAL (SELECT DISTINCT l.trx_id FROM lot_N l
			WHERE l.ns = u.ns AND l.player_id = u.player_id AND l.store = u.store AND l.order_id = u.order_id) x ON true
		JOIN op_N o ON o.trx_id = x.trx_id AND o.ns = u.ns AND o.player_id = u.player_id AND o.paid AND o.cause = 'exchange'
	ORDER BY o.pos`,
	// Current balances of many players in one snapshot: each player's
	// version, the snapshot's time and its lots with coins (which of them
	// count is coffer.Catalog.CurrentBalances's to say), under the index
	// of its read in the batch ($3; a player read twice is answered
	// twice).
	balances: `SELECT u.i, b.version, now(), l.lot_id, l.currency, l.paid, l.amount, l.expires_at, l.priority, l.created_at
	FROM (SELECT unnest($1::int[]) AS ns, unnest($2::bigint[]) AS player_id, unnest($3::int[]) AS i) AS u
	JOIN balance_N b ON b.ns = u.ns AND b.player_id = u.player_id
	LEFT JOIN lot_N l ON l.ns = b.ns AND l.player_id = b.player_id AND l.amount > 0`,
}

// players is the statement that reads a batch's players' rows: taking
// their locks when the batch is careful.
func (b *batchSQL) players(careful bool) string {
	if careful {
		return b.lock
	}
	return b.peek
}

// forShard is the statements with shard id's table names.
func (b batchSQL) forShard(id coffer.ShardID) batchSQL {
	n := func(sql string) string { return shard.Tables(sql, id) }
	return batchSQL{lock: n(b.lock), peek: n(b.peek), lots: n(b.lots), trx: n(b.trx), orders: n(b.orders), exchanges: n(b.exchanges), balances: n(b.balances)}
}

// Statements on a committer's mark (batchTx.persist, batchTx.load,
// Store.SweepMarks). markParts only raises the token: a transaction given
// up on (its outcome unread) that commits after a later batch of its
// committer must not put its older token back. It updates first and
// inserts only the committer's first row: an upsert (ON CONFLICT DO
// UPDATE) writes a lock record besides the update, 134 bytes of WAL per
// batch against 82. staleMarks tests marked_at again on the row it
// deletes: a row its committer sets while the DELETE waits for it is
// rechecked there, not in the IN list.
//
// readMark, in the attempt after one whose COMMIT was cut off, takes the
// mark's lock as it reads the token, and the attempt commits it
// (Store.attempt): a cut attempt that read at its snapshot (ADR 0026)
// holds no player's lock before its last write statement, which sets the
// mark first. So either that statement holds the mark, and readMark waits
// for its end, or it has not run yet, and, running after, it finds the
// mark changed since its snapshot (or locked) and fails, nothing
// written. Written anew where the committer has none.
const (
	readMark = `INSERT INTO batch_mark AS m (committer, token, marked_at) VALUES ($1, 0, now())
		ON CONFLICT (committer) DO UPDATE SET marked_at = now() RETURNING m.token`
	staleMarks = `DELETE FROM batch_mark WHERE committer IN
		(SELECT committer FROM batch_mark WHERE marked_at < now() - interval '1 day' LIMIT $1)
		AND marked_at < now() - interval '1 day'`
)

// markParts are the WITH parts that set a committer's mark ($c, the
// committer; $t, the token), in a batch's last write statement
// (writeSQL) rather than a statement of their own: a batch of one write
// sends one statement less.
func markParts(committer, token string) string {
	return strings.NewReplacer("$c", committer, "$t", token).Replace(
		`raised AS (UPDATE batch_mark SET token = $t, marked_at = now() WHERE committer = $c AND token < $t RETURNING 1),
	marked AS (INSERT INTO batch_mark (committer, token, marked_at) SELECT $c, $t, now() WHERE NOT EXISTS (SELECT FROM raised)
		ON CONFLICT (committer) DO NOTHING)`)
}

// batchStatementsPerShard bounds the statements a batch may prepare per
// shard: its reads (batchSQL), the ids it lacks, and its write statement
// in each combination of tables with rows it meets (writeSQL; a workload
// meets a few), each in its array and one-row forms (oneRow).
const batchStatementsPerShard = 18

// batchStatementsMax is the prepared statements a connection of the
// batches keeps (pgx's statement cache) for a database of shards shards:
// those of every shard, and BEGIN, COMMIT and the mark's. A cache smaller
// than the statements the batches use is worse than none: batches cycle
// through the shards, so the least recently used statement is the next
// one needed, and every statement is prepared again and planned while the
// batch runs. Only the statements run are prepared, so a larger bound
// costs nothing by itself; each costs the backend its generic plan
// (docs/adr/0023-batch-sessions.md gives the memory measured).
func batchStatementsMax(shards int) int { return max(512, batchStatementsPerShard*shards+64) }

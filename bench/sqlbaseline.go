package bench

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// Baseline is the raw-SQL reference the benchmark compares coffer with: the
// same logical operations written as a production-like pgbench script
// would, statement by statement, on tables of its own (bench_*_N) beside
// coffer's. It is safe for concurrent use.
type Baseline struct {
	router *shard.Router
}

// NewBaseline returns the baseline on router's databases.
func NewBaseline(router *shard.Router) *Baseline { return &Baseline{router: router} }

// baselineSchema is one shard's baseline tables: a trx with its
// idempotency key, its op, the player's version, the player's balance.
const baselineSchema = `
CREATE TABLE IF NOT EXISTS bench_trx_N (ns integer NOT NULL, player_id bigint NOT NULL, created_at timestamptz NOT NULL,
	trx_id bigserial NOT NULL, idempotency_key text NOT NULL, amount bigint NOT NULL, PRIMARY KEY (ns, player_id, created_at, trx_id));
CREATE UNIQUE INDEX IF NOT EXISTS bench_trx_N_key ON bench_trx_N (ns, player_id, idempotency_key);
CREATE TABLE IF NOT EXISTS bench_op_N (trx_id bigint NOT NULL, ns integer NOT NULL, player_id bigint NOT NULL,
	currency integer NOT NULL, amount bigint NOT NULL, balance_after bigint NOT NULL, PRIMARY KEY (trx_id));
CREATE TABLE IF NOT EXISTS bench_version_N (ns integer NOT NULL, player_id bigint NOT NULL, version bigint NOT NULL,
	PRIMARY KEY (ns, player_id)) WITH (fillfactor = 80);
CREATE TABLE IF NOT EXISTS bench_balance_N (ns integer NOT NULL, player_id bigint NOT NULL, currency integer NOT NULL,
	amount bigint NOT NULL, PRIMARY KEY (ns, player_id, currency)) WITH (fillfactor = 80);`

// Setup creates the baseline tables on every shard.
func (b *Baseline) Setup(ctx context.Context) error {
	return b.eachShard(ctx, baselineSchema)
}

func (b *Baseline) eachShard(ctx context.Context, sql string) error {
	for s := 0; s < b.router.Map().ShardCount(); s++ {
		id := coffer.ShardID(s)
		if _, err := b.router.Shard(id).Exec(ctx, shard.Tables(sql, id)); err != nil {
			return fmt.Errorf("baseline: shard %d: %w", s, err)
		}
	}
	return nil
}

// grantSteps are the statements of a baseline write after the trx insert:
// insert the op, upsert the version, upsert the balance. They are written
// once, with the :name parameters of a pgbench script (pgbenchTransaction);
// Write sends them with $n ones.
var grantSteps = []string{
	`INSERT INTO bench_op_N (trx_id, ns, player_id, currency, amount, balance_after)
	VALUES (:trx_id, :ns, :player_id, :currency, :amount, :amount)`,
	`INSERT INTO bench_version_N AS v (ns, player_id, version) VALUES (:ns, :player_id, 1)
	ON CONFLICT (ns, player_id) DO UPDATE SET version = v.version + 1`,
	`INSERT INTO bench_balance_N AS b (ns, player_id, currency, amount) VALUES (:ns, :player_id, :currency, :amount)
	ON CONFLICT (ns, player_id, currency) DO UPDATE SET amount = b.amount + EXCLUDED.amount`,
}

// positionalSteps are grantSteps with $n parameters, each with the names
// of its parameters in order.
var positionalSteps = func() []positionalSQL {
	out := make([]positionalSQL, len(grantSteps))
	for i, sql := range grantSteps {
		out[i] = positional(sql)
	}
	return out
}()

// positionalSQL is a statement with $n parameters and their names.
type positionalSQL struct {
	sql   string
	names []string
}

var namedParam = regexp.MustCompile(`:([a-z_]+)`)

// positional numbers the :name parameters of sql in the order they first
// appear.
func positional(sql string) positionalSQL {
	var p positionalSQL
	p.sql = namedParam.ReplaceAllStringFunc(sql, func(m string) string {
		i := slices.Index(p.names, m[1:])
		if i < 0 {
			i = len(p.names)
			p.names = append(p.names, m[1:])
		}
		return "$" + strconv.Itoa(i+1)
	})
	return p
}

// Write grants amount of currency to a player: BEGIN, insert the trx,
// insert the op, upsert the version, upsert the balance, COMMIT — six
// round trips, as pgbench runs a script.
func (b *Baseline) Write(ctx context.Context, ns coffer.Namespace, player coffer.PlayerID, currency coffer.CurrencyID, amount coffer.Amount, key string) error {
	id := b.router.Map().ShardOf(player)
	q := shard.Tables
	return pgx.BeginFunc(ctx, b.router.Shard(id), func(tx pgx.Tx) error {
		var trxID int64
		if err := tx.QueryRow(ctx, q(`INSERT INTO bench_trx_N (ns, player_id, created_at, idempotency_key, amount)
			VALUES ($1, $2, now(), $3, $4) RETURNING trx_id`, id), ns, player, key, amount).Scan(&trxID); err != nil {
			return err
		}
		vals := map[string]any{"trx_id": trxID, "ns": ns, "player_id": player, "currency": currency, "amount": amount}
		for _, st := range positionalSteps {
			args := make([]any, len(st.names))
			for i, name := range st.names {
				args[i] = vals[name]
			}
			if _, err := tx.Exec(ctx, q(st.sql, id), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// Read reads a player's balances from coffer's own tables with the plain
// SQL of a balance read: the version and the live lots, one round trip.
func (b *Baseline) Read(ctx context.Context, ns coffer.Namespace, player coffer.PlayerID) error {
	id := b.router.Map().ShardOf(player)
	rows, err := b.router.Shard(id).Query(ctx, shard.Tables(`SELECT b.version, l.currency, l.paid, l.amount
		FROM balance_N b LEFT JOIN lot_N l ON l.ns = b.ns AND l.player_id = b.player_id
			AND l.amount > 0 AND (l.expires_at IS NULL OR l.expires_at > now())
		WHERE b.ns = $1 AND b.player_id = $2`, id), ns, player)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	return rows.Err()
}

// serverStats are the counters the benchmark reads before and after a run.
type serverStats struct {
	// WALBytes is pg_current_wal_lsn() in bytes, summed over the servers.
	WALBytes int64
	// SizeBytes is the size of the databases.
	SizeBytes int64
	// LotUpdates and LotHOTUpdates count updates of coffer's lot tables.
	LotUpdates, LotHOTUpdates int64
	// Trx counts the rows of coffer's trx tables.
	Trx int64
	// Transactions counts the transaction ids the servers assigned: one
	// per transaction that wrote (committed or rolled back), each a WAL
	// flush at its commit. Unlike pg_stat_database, which a backend may
	// update up to 10 seconds late, it is exact at once.
	Transactions int64
}

// readServerStats reads the counters of every database of router. WAL is
// per server, so it is read once per distinct address.
func readServerStats(ctx context.Context, router *shard.Router) (serverStats, error) {
	var st serverStats
	servers := map[string]bool{}
	for i, db := range router.Map().Databases() {
		pool := router.Database(i)
		if !servers[db.Server()] {
			servers[db.Server()] = true
			var lsn, xids int64
			if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0', pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&lsn, &xids); err != nil {
				return st, err
			}
			st.WALBytes += lsn
			st.Transactions += xids
		}
		var size, upd, hot int64
		if err := pool.QueryRow(ctx, `SELECT pg_database_size(current_database()),
			COALESCE(sum(n_tup_upd), 0), COALESCE(sum(n_tup_hot_upd), 0)
			FROM pg_stat_user_tables WHERE relname ~ '^lot_[0-9]+$'`).Scan(&size, &upd, &hot); err != nil {
			return st, err
		}
		st.SizeBytes += size
		st.LotUpdates += upd
		st.LotHOTUpdates += hot
		for _, s := range db.Shards {
			var n int64
			if err := pool.QueryRow(ctx, shard.Tables(`SELECT count(*) FROM trx_N`, s)).Scan(&n); err != nil {
				return st, err
			}
			st.Trx += n
		}
	}
	return st, nil
}

package move

import (
	"context"
	"fmt"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// Holding is what one database says of the shards and their moves: the
// fault suite checks that the databases agree (coffer torture).
type Holding struct {
	// Listed are the shards its sharding state lists; Tabled those whose
	// tables (<kind>_N) it holds; both ascending.
	Listed, Tabled []coffer.ShardID
	// Moves are the moves it records (shard.ReadMoves).
	Moves []shard.Move
	// Traces are what moves left there that only a move in progress, or
	// one not cleaned up, needs: their publications, subscriptions,
	// replication slots (a subscription's table-sync slots too), fences
	// and old copies.
	Traces []string
}

const (
	listedSQL = `SELECT COALESCE(array_agg(x::int ORDER BY x::int), '{}') FROM _sdbmigrate_sharding_state, json_array_elements_text(shard_ids) x WHERE id = 0`
	tabledSQL = `SELECT COALESCE(array_agg(DISTINCT substring(c.relname FROM '_([0-9]+)$')::int ORDER BY substring(c.relname FROM '_([0-9]+)$')::int), '{}') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname ~ '^[a-z][a-z_]*_[0-9]+$'`
	tracesSQL = `SELECT 'publication ' || pubname FROM pg_publication WHERE pubname LIKE 'coffer\_move\_%'
		UNION ALL SELECT 'subscription ' || subname FROM pg_subscription
			WHERE subname LIKE 'coffer\_move\_%' AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		UNION ALL SELECT 'replication slot ' || slot_name FROM pg_replication_slots
			WHERE database = current_database() AND (slot_name LIKE 'coffer\_move\_%' OR slot_name LIKE 'pg\_%\_sync\_%')
		UNION ALL SELECT 'fence on ' || tgrelid::regclass::text FROM pg_trigger WHERE tgname = 'shard_move_fence'
		UNION ALL SELECT 'old copy ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relname LIKE '%\_moved'
		ORDER BY 1`
)

// Inspect reads what the database conn reaches holds of the shards.
func Inspect(ctx context.Context, conn *pgx.Conn) (Holding, error) {
	var h Holding
	if err := conn.QueryRow(ctx, listedSQL).Scan(&h.Listed); err != nil {
		return h, fmt.Errorf("sharding state: %w", err)
	}
	if err := conn.QueryRow(ctx, tabledSQL).Scan(&h.Tabled); err != nil {
		return h, fmt.Errorf("shard tables: %w", err)
	}
	var err error
	if h.Moves, err = shard.ReadMoves(ctx, conn); err != nil {
		return h, err
	}
	rows, _ := conn.Query(ctx, tracesSQL)
	h.Traces, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return h, err
}

package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// pgbenchPlayersSchema numbers one shard's players for pgbench, which
// cannot compute the jump hash that places a player: bench_player_N lists
// the shard's players as i = 0 … count-1.
const pgbenchPlayersSchema = `DROP TABLE IF EXISTS bench_player_N;
CREATE TABLE bench_player_N (i integer PRIMARY KEY, player_id bigint NOT NULL)`

// setupPgbench creates the baseline tables and numbers, in every shard,
// its players among 1 … players, for pgbenchTransaction. It returns how
// many players each shard holds, by shard id.
func (b *Baseline) setupPgbench(ctx context.Context, players int64) ([]int64, error) {
	if err := b.Setup(ctx); err != nil {
		return nil, err
	}
	m := b.router.Map()
	byShard := make([][]any, m.ShardCount())
	for p := int64(1); p <= players; p++ {
		s := m.ShardOf(coffer.PlayerID(p))
		byShard[s] = append(byShard[s], p)
	}
	counts := make([]int64, len(byShard))
	for s, ps := range byShard {
		id := coffer.ShardID(s)
		pool := b.router.Shard(id)
		if _, err := pool.Exec(ctx, shard.Tables(pgbenchPlayersSchema, id)); err != nil {
			return nil, fmt.Errorf("pgbench players: shard %d: %w", s, err)
		}
		_, err := pool.CopyFrom(ctx, pgx.Identifier{shard.Tables("bench_player_N", id)}, []string{"i", "player_id"},
			pgx.CopyFromSlice(len(ps), func(i int) ([]any, error) { return []any{int32(i), ps[i]}, nil }))
		if err != nil {
			return nil, fmt.Errorf("pgbench players: shard %d: %w", s, err)
		}
		counts[s] = int64(len(ps))
	}
	return counts, nil
}

// pgbenchTransaction is a baseline write on shard id as pgbench script
// lines: BEGIN; insert the trx; then Write's statements (grantSteps);
// END. It reads the pgbench variables ns, currency, amount, i (the
// player's number in bench_player_N) and n (the client's count of its
// transactions); the idempotency key is keyPrefix, the client id and n.
// The one difference from Write: the trx insert reads the player from
// bench_player_N, an index lookup in a table of a few thousand rows.
func pgbenchTransaction(id coffer.ShardID, keyPrefix string) string {
	key := "'" + strings.ReplaceAll(keyPrefix, "'", "''") + "' || :client_id || '-' || :n"
	lines := []string{"BEGIN;",
		`INSERT INTO bench_trx_N (ns, player_id, created_at, idempotency_key, amount)
	SELECT :ns, player_id, now(), ` + key + `, :amount FROM bench_player_N WHERE i = :i
	RETURNING trx_id, player_id \gset`}
	for _, st := range grantSteps {
		lines = append(lines, st+";")
	}
	lines = append(lines, "END;")
	// pgbench reads a statement up to its semicolon, over line ends.
	return shard.Tables(strings.Join(lines, "\n"), id) + "\n"
}

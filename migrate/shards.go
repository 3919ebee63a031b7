package migrate

import (
	"context"
	"fmt"
	"slices"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
)

// A shard move (coffer shard move) creates the moved shard's tables on
// its target with the migrations that made every shard's, and records
// the shard among the target's, then no longer among the source's.

// Applied are the versions of the migrations applied on the database
// conn reaches, ascending; none on a database never migrated.
func (e *Engine) Applied(ctx context.Context, conn *pgx.Conn) ([]int64, error) {
	st, err := e.readState(ctx, conn)
	if err != nil {
		return nil, err
	}
	var versions []int64
	for _, a := range st.applied {
		versions = append(versions, a.version)
	}
	return versions, nil
}

// AddShard creates shard id's tables on the database conn reaches, as its
// migrations made every shard's: it runs, for id alone, each SHARD
// migration the database has applied, a TRX one in a transaction, and
// then records id among the database's shards. The database must hold
// coffer's schema (Applied) and no table of id.
func (e *Engine) AddShard(ctx context.Context, conn *pgx.Conn, id coffer.ShardID) error {
	st, err := e.readState(ctx, conn)
	if err != nil {
		return err
	}
	for _, a := range st.applied {
		i := slices.IndexFunc(e.Migrations, func(m Migration) bool { return m.Version == a.version })
		if i < 0 {
			return fmt.Errorf("migration %s is applied but not among the migrations here", a.name)
		}
		m := e.Migrations[i]
		if !m.Shard {
			continue
		}
		run := func(ex execer) error {
			for _, s := range Split(e.render(m.SQL, id)) {
				if _, err := ex.Exec(ctx, s.SQL); err != nil {
					return fmt.Errorf("%s: shard %d, statement at line %d: %w", m.Name, id, s.Line, err)
				}
			}
			return nil
		}
		if m.Trx {
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return run(tx) })
		} else {
			err = run(conn)
		}
		if err != nil {
			return err
		}
	}
	return e.SetShard(ctx, conn, id, true)
}

// SetShard records in the sharding state of the database ex reaches that
// it holds shard id, or no longer does; on a transaction, it commits
// with it.
func (e *Engine) SetShard(ctx context.Context, ex execer, id coffer.ShardID, held bool) error {
	_, err := ex.Exec(ctx, `UPDATE `+e.table("_sdbmigrate_sharding_state")+` SET updated = now(), shard_ids = (
		SELECT COALESCE(json_agg(s ORDER BY s), '[]'::json) FROM (
			SELECT x::int AS s FROM json_array_elements_text(shard_ids) x WHERE x::int <> $1
			UNION SELECT $1 WHERE $2) ids)
		WHERE id = 0`, int(id), held)
	return err
}

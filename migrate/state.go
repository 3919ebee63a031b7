package migrate

import (
	"context"
	"encoding/json"

	"github.com/cofferhq/coffer"

	"github.com/jackc/pgx/v5"
)

// stateTables are sdbmigrate's state tables, created exactly as sdbmigrate
// creates them, plus coffer's checksum table, which sdbmigrate ignores.
var stateTables = []struct{ name, columns string }{
	{"_sdbmigrate_migrations", `(
		version BIGINT NOT NULL PRIMARY KEY,
		migration_name TEXT NOT NULL,
		applied TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW())`},
	{"_sdbmigrate_sharding_state", `(
		id INTEGER NOT NULL PRIMARY KEY,
		shard_count INTEGER NOT NULL,
		shard_ids JSON NOT NULL,
		created TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW(),
		updated TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW())`},
	{"_sdbmigrate_env", `(
		key varchar(128) PRIMARY KEY,
		value TEXT NOT NULL,
		type varchar(128) NOT NULL DEFAULT 'str',
		created TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW(),
		updated TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW())`},
	{"_coffer_migration_checksums", `(
		version BIGINT NOT NULL PRIMARY KEY,
		checksum TEXT NOT NULL)`},
}

// writeState creates the state tables, records the shard layout and env on
// first use (env again with --force-update-env), and records checksums of
// applied migrations that have none (applied by sdbmigrate).
func (e *Engine) writeState(ctx context.Context, tx pgx.Tx, s *session, opts Options) error {
	if e.StateSchema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{e.StateSchema}.Sanitize()); err != nil {
			return err
		}
	}
	for _, t := range stateTables {
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+e.table(t.name)+" "+t.columns); err != nil {
			return err
		}
	}
	if !s.state.initialized {
		ids, _ := json.Marshal(append([]coffer.ShardID{}, s.db.Shards...))
		if _, err := tx.Exec(ctx, "INSERT INTO "+e.table("_sdbmigrate_sharding_state")+" (id, shard_count, shard_ids) VALUES (0, $1, $2)", e.Map.ShardCount(), string(ids)); err != nil {
			return err
		}
	}
	if len(s.state.env) == 0 || opts.ForceUpdateEnv {
		if err := e.writeEnv(ctx, tx); err != nil {
			return err
		}
	}
	for _, a := range s.state.applied {
		if s.state.checksums[a.version] != "" {
			continue
		}
		for _, m := range e.Migrations {
			if m.Version == a.version {
				if _, err := tx.Exec(ctx, "INSERT INTO "+e.table("_coffer_migration_checksums")+" (version, checksum) VALUES ($1, $2) ON CONFLICT DO NOTHING", m.Version, m.Checksum); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (e *Engine) writeEnv(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "DELETE FROM "+e.table("_sdbmigrate_env")+" WHERE NOT (key = ANY($1))", e.Env.Keys()); err != nil {
		return err
	}
	for _, k := range e.Env.Keys() {
		v := e.Env[k]
		_, err := tx.Exec(ctx, "INSERT INTO "+e.table("_sdbmigrate_env")+` (key, value, type) VALUES ($1, $2, $3)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, type = EXCLUDED.type, updated = now()`, k, v.Text(), v.typeName())
		if err != nil {
			return err
		}
	}
	return nil
}

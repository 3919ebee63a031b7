package migrate

import (
	"embed"
	"io/fs"

	"github.com/cofferhq/coffer/shard"
)

//go:embed schema/*.sql
var schemaFiles embed.FS

// Schema is coffer's own schema, in sdbmigrate's format: the 1.0 baseline
// (V0001, V0002) and the migrations after it.
func Schema() fs.FS {
	sub, err := fs.Sub(schemaFiles, "schema")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sub
}

// SchemaEnv are the env variables coffer's schema uses and their defaults;
// a config's env overrides them (e.g. access_method: orioledb).
var SchemaEnv = Env{
	"access_method":      {Type: "str", Value: "heap"},
	"storage_params":     {Type: "str", Value: "fillfactor=100"},
	"hot_storage_params": {Type: "str", Value: "fillfactor=80"},
}

// schemaRetired is the first migration of the chain that built coffer's
// schema before 1.0, which the baseline replaced: no release had that
// schema, so a database that applied it (a developer's, a test's) has no
// upgrade and is refused.
var schemaRetired = map[string]string{
	"V0001__TRX_SHARD__ledger.sql": "this database holds a pre-1.0 schema of coffer (its first migration is V0001__TRX_SHARD__ledger.sql " +
		"of the chain 1.0 replaced with one baseline); no release had that schema and there is no upgrade from it: " +
		"migrate a new, empty database (for a coffer dev stack, remove its data directory), see docs/migrations.md",
}

// SchemaEngine is an Engine of coffer's own schema on m's databases, with
// env over the schema's defaults (SchemaEnv), that refuses a database of
// a pre-1.0 schema (schemaRetired).
func SchemaEngine(m *shard.Map, env Env) (*Engine, error) {
	ms, err := Load(Schema(), "(coffer's schema)")
	if err != nil {
		return nil, err
	}
	return &Engine{Map: m, Env: env.With(SchemaEnv), Migrations: ms, Retired: schemaRetired}, nil
}

package migrate

import (
	"embed"
	"io/fs"
)

//go:embed schema/*.sql
var schemaFiles embed.FS

// Schema is coffer's own schema, in sdbmigrate's format.
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

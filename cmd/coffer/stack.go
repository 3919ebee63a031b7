package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"
)

// localStack is one local PostgreSQL server holding several coffer
// databases, migrated, with the config that describes it written to disk.
// `coffer dev` runs one; so can the benchmark.
type localStack struct {
	dir        string
	server     *pgserver.Server
	config     *Config
	configPath string
}

// startLocalStack starts (or, if dir holds one, restarts) the server under
// dir/pg, creates databases coffer_0 … coffer_{databases-1}, spreads
// cfg.ShardCount shards over them, writes cfg to dir/coffer.yaml and
// applies coffer's schema. The server keeps fsync on; settings are added to
// its postgresql.conf. Its superuser has a random password, kept in
// dir/pg/password and in the config. Progress goes to out.
func startLocalStack(ctx context.Context, dir string, cfg *Config, databases int, settings map[string]string, out io.Writer) (*localStack, error) {
	onEach, err := shardsOnEach(cfg.ShardCount, databases)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	server, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(dir, "pg"), Durable: true, Settings: settings, RandomPassword: true})
	if err != nil {
		return nil, err
	}
	st := &localStack{dir: dir, server: server, configPath: filepath.Join(dir, "coffer.yaml")}
	st.config = cfg
	cfg.DistributionMode, cfg.ShardOnDB, cfg.Databases = "auto", onEach, nil
	for i := 0; i < databases; i++ {
		name := fmt.Sprintf("coffer_%d", i)
		if err := createDatabase(ctx, server, name); err != nil {
			server.Stop()
			return nil, err
		}
		st.config.Databases = append(st.config.Databases, shard.DatabaseConfig{
			Name: name, Host: "127.0.0.1", Port: server.Port(), Type: "postgres",
			User: pgserver.Superuser, Password: server.Password(),
		})
	}
	if err := st.writeConfig(); err != nil {
		server.Stop()
		return nil, err
	}
	if err := st.migrate(ctx, out); err != nil {
		server.Stop()
		return nil, err
	}
	return st, nil
}

// shardsOnEach is how many of count shards each of a local stack's
// databases holds: the stack spreads them evenly (shard_on_db), so
// databases must divide count.
func shardsOnEach(count, databases int) (int, error) {
	if databases < 1 || count < databases || count%databases != 0 {
		return 0, fmt.Errorf("%d shards do not spread evenly over %d databases", count, databases)
	}
	return count / databases, nil
}

func createDatabase(ctx context.Context, server *pgserver.Server, name string) error {
	return createDatabaseAt(ctx, server.DSN("postgres"), name)
}

// createDatabaseAt creates database name, unless it exists, on the server
// that dsn reaches.
func createDatabaseAt(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

func (st *localStack) writeConfig() error { return writeConfigFile(st.configPath, st.config) }

func (st *localStack) migrate(ctx context.Context, out io.Writer) error {
	m, err := st.shardMap()
	if err != nil {
		return err
	}
	return applySchema(ctx, m, st.config.Env, out)
}

// writeConfigFile writes a config coffer made for a stack of its own.
func writeConfigFile(path string, cfg *Config) error {
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	header := "# Written by coffer for its local stack; rewritten at every start.\n"
	return os.WriteFile(path, append([]byte(header), raw...), 0o600)
}

// applySchema migrates every database of m to coffer's schema, with env
// over the schema's defaults, as `coffer migrate` does.
func applySchema(ctx context.Context, m *shard.Map, env migrate.Env, out io.Writer) error {
	e, err := migrate.SchemaEngine(m, env)
	if err != nil {
		return err
	}
	e.Out = out
	return e.Apply(ctx, migrate.Options{TargetVersion: -1})
}

// stop shuts the server down cleanly.
func (st *localStack) stop() error { return st.server.Stop() }

// shardMap is the map of the stack's config.
func (st *localStack) shardMap() (*shard.Map, error) { return shard.NewMap(st.config.Config) }

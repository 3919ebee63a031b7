package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"
)

// localStack is local PostgreSQL servers holding coffer databases,
// migrated, with the config that describes them written to disk. `coffer
// dev` runs one; so does the benchmark.
type localStack struct {
	dir        string
	servers    []*pgserver.Server
	config     *Config
	configPath string
}

// stackLayout is how many PostgreSQL servers a local stack runs and how
// many of its databases each holds.
type stackLayout struct{ servers, databasesEach int }

// databases is how many databases the stack holds in all.
func (l stackLayout) databases() int { return l.servers * l.databasesEach }

// startLocalStack starts (or, if dir holds them, restarts) the servers,
// the first under dir/pg and server i under dir/pg<i>, creates databases
// coffer_0 … coffer_{n-1} (consecutive ones on the same server), spreads
// cfg.ShardCount shards over them, writes cfg to dir/coffer.yaml and
// applies coffer's schema. The servers keep fsync on; settings are added
// to their postgresql.conf. Each superuser has a random password, kept in
// the server's directory and in the config. Progress goes to out.
func startLocalStack(ctx context.Context, dir string, cfg *Config, layout stackLayout, settings map[string]string, out io.Writer) (*localStack, error) {
	onEach, err := shardsOnEach(cfg.ShardCount, layout.databases())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	st := &localStack{dir: dir, config: cfg, configPath: filepath.Join(dir, "coffer.yaml")}
	cfg.DistributionMode, cfg.ShardOnDB, cfg.Databases = "auto", onEach, nil
	for i := 0; i < layout.servers; i++ {
		server, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(dir, serverDir(i)), Durable: true, Settings: settings, RandomPassword: true})
		if err != nil {
			st.stop()
			return nil, err
		}
		st.servers = append(st.servers, server)
		for j := 0; j < layout.databasesEach; j++ {
			name := fmt.Sprintf("coffer_%d", len(cfg.Databases))
			if err := createDatabase(ctx, server, name); err != nil {
				st.stop()
				return nil, err
			}
			cfg.Databases = append(cfg.Databases, shard.DatabaseConfig{
				Name: name, Host: "127.0.0.1", Port: server.Port(), Type: "postgres",
				User: pgserver.Superuser, Password: server.Password(),
			})
		}
	}
	if err := st.writeConfig(); err != nil {
		st.stop()
		return nil, err
	}
	if err := st.migrate(ctx, out); err != nil {
		st.stop()
		return nil, err
	}
	return st, nil
}

// serverDir is the directory of a stack's server i, under the stack's.
func serverDir(i int) string {
	if i == 0 {
		return "pg"
	}
	return "pg" + strconv.Itoa(i)
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

// stop shuts the servers down cleanly.
func (st *localStack) stop() error {
	var errs []error
	for _, server := range st.servers {
		errs = append(errs, server.Stop())
	}
	return errors.Join(errs...)
}

// postgresPIDs lists the processes of every server, for measuring their
// CPU.
func (st *localStack) postgresPIDs() []int {
	var pids []int
	for _, server := range st.servers {
		pids = append(pids, server.PIDs()...)
	}
	return pids
}

// shardMap is the map of the stack's config.
func (st *localStack) shardMap() (*shard.Map, error) { return shard.NewMap(st.config.Config) }

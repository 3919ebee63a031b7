package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/cofferhq/coffer/migrate"
)

// migrateFlags are sdbmigrate's flags, with its short and long names.
type migrateFlags struct {
	config, dir, action, template, name, stateSchema, logLevel string
	dryRun, forceUpdateEnv                                     bool
	target                                                     int64
}

func parseMigrateFlags(args []string, stderr io.Writer) (*migrateFlags, error) {
	f := &migrateFlags{}
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, n := range []string{"c", "config-file"} {
		fs.StringVar(&f.config, n, "", "config file (sdbmigrate keys: shard_count, databases, env, ...)")
	}
	for _, n := range []string{"d", "migrations-dir"} {
		fs.StringVar(&f.dir, n, "", "directory of V{version}__{TRX|NOTRX}_{PLAIN|SHARD}__{name}.sql files (default: coffer's own schema)")
	}
	for _, n := range []string{"a", "action"} {
		fs.StringVar(&f.action, n, "apply", "apply, status or generate")
	}
	for _, n := range []string{"t", "target-schema-version"} {
		fs.Int64Var(&f.target, n, -1, "stop after this version")
	}
	for _, n := range []string{"g", "generate-template"} {
		fs.StringVar(&f.template, n, "trx_plain_sql", "generate: trx_plain_sql, trx_shard_sql, notrx_plain_sql or notrx_shard_sql")
	}
	for _, n := range []string{"l", "log-level"} {
		fs.StringVar(&f.logLevel, n, "info", "accepted for sdbmigrate compatibility; error prints failures only")
	}
	fs.StringVar(&f.name, "name", "new_migration", "generate: the new migration's name (lowercase letters, digits, _)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "run TRX migrations and roll back; print NOTRX ones")
	fs.BoolVar(&f.forceUpdateEnv, "force-update-env", false, "store the config's env even if it differs from the frozen one")
	fs.StringVar(&f.stateSchema, "migrate-state-schema", "", "schema of the state tables (default public)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return f, nil
}

// runMigrate is `coffer migrate`: sdbmigrate's command line over coffer's
// engine. Without -d it applies coffer's own embedded schema.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	f, err := parseMigrateFlags(args, stderr)
	if err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "coffer migrate:", err)
		return 1
	}
	if f.action == "generate" {
		if f.dir == "" {
			return fail(fmt.Errorf("generate needs -d DIR, the migrations directory to add to"))
		}
		path, err := migrate.Generate(f.dir, f.template, f.name)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, "generated", path)
		return 0
	}
	if f.action != "apply" && f.action != "status" {
		return fail(fmt.Errorf("-a %q: must be apply, status or generate", f.action))
	}
	if f.config == "" {
		return fail(fmt.Errorf("-c CONFIG is required"))
	}
	if f.stateSchema != "" && f.dir == "" {
		return fail(fmt.Errorf("--migrate-state-schema is for your own migrations (-d DIR): coffer's own schema keeps its state in public, where coffer serve reads it"))
	}
	engine, err := newEngine(f, stderr)
	if err != nil {
		return fail(err)
	}
	if f.logLevel != "error" {
		engine.Out = stdout
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if f.action == "status" {
		statuses, err := engine.Status(ctx)
		if err != nil {
			return fail(err)
		}
		code := 0
		for _, s := range statuses {
			fmt.Fprintln(stdout, s)
			if s.Problem != "" {
				code = 1
			}
		}
		return code
	}
	if err := engine.Apply(ctx, migrate.Options{DryRun: f.dryRun, TargetVersion: f.target, ForceUpdateEnv: f.forceUpdateEnv}); err != nil {
		return fail(err)
	}
	return 0
}

// newEngine is the engine of f's migrations on the shard map now: the
// config's placement and the shards' moves (warn is told of a database
// whose moves cannot be read).
func newEngine(f *migrateFlags, warn io.Writer) (*migrate.Engine, error) {
	cfg, m, err := loadConfig(f.config)
	if err != nil {
		return nil, err
	}
	if m, err = currentMap(cfg, m, warn); err != nil {
		return nil, err
	}
	if f.dir == "" {
		return migrate.SchemaEngine(m, cfg.Env)
	}
	if _, err := os.Stat(f.dir); err != nil {
		return nil, fmt.Errorf("migrations dir: %w", err)
	}
	ms, err := migrate.Load(os.DirFS(f.dir), f.dir)
	if err != nil {
		return nil, err
	}
	return &migrate.Engine{Map: m, Env: cfg.Env, Migrations: ms, StateSchema: f.stateSchema}, nil
}

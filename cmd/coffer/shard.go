package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shard/move"
	"gopkg.in/yaml.v3"
)

// runShard is `coffer shard`: the shard, and with -c the database now
// holding it, of player ids; `coffer shard move` moves a shard to
// another database; `coffer shard export-sdbmigrate` prints the config
// of the placement now.
func runShard(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "move":
			return runShardMove(args[1:], stdout, stderr)
		case "export-sdbmigrate":
			return runShardExport(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("shard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	count := fs.Int("count", 0, "shard_count (not needed with -c)")
	configPath := configFlag(fs, "config file: also print the database holding each shard now")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var m *shard.Map
	if *configPath != "" {
		cfg, configured, err := loadConfig(*configPath)
		if err == nil {
			m, err = currentMap(cfg, configured, stderr)
		}
		if err != nil {
			fmt.Fprintln(stderr, "coffer shard:", err)
			return 1
		}
		*count = m.ShardCount()
	}
	if *count < 1 || *count > shard.ShardCountMax || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "coffer shard: usage: coffer shard --count N ID... (N in 1…2^31) or coffer shard -c CONFIG ID...; "+
			"coffer shard move -c CONFIG --shard N --to DATABASE; coffer shard export-sdbmigrate -c CONFIG")
		return 2
	}
	for _, arg := range fs.Args() {
		id, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || id < 0 {
			fmt.Fprintf(stderr, "coffer shard: %q is not a player id (an integer ≥ 0)\n", arg)
			return 1
		}
		s := shard.Jump(uint64(id), int64(*count))
		if m == nil {
			fmt.Fprintf(stdout, "%d %d\n", id, s)
			continue
		}
		fmt.Fprintf(stdout, "%d %d %s\n", id, s, home(m, coffer.ShardID(s)))
	}
	return 0
}

// home names the database holding shard s now: its dbname, or why none
// of the config's does.
func home(m *shard.Map, s coffer.ShardID) string {
	if i := m.DatabaseIndex(s); i >= 0 {
		return m.Databases()[i].Config.Name
	}
	mv, _ := m.Move(s)
	if mv.State == shard.MoveCut {
		return "(being cut over to " + mv.Target + ")"
	}
	return "(moved to " + mv.Home() + ", not in the config)"
}

func configFlag(fs *flag.FlagSet, usage string) *string {
	var path string
	fs.StringVar(&path, "c", "", usage)
	fs.StringVar(&path, "config-file", "", "same as -c")
	return &path
}

// currentMap is the config's map m with the shards' moves read from its
// databases (shard.Router.Refresh); a database that cannot be read is
// warned of on warn.
func currentMap(cfg *Config, m *shard.Map, warn io.Writer) (*shard.Map, error) {
	r, err := openRouter(context.Background(), m, cfg.Pool, warn)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Map(), nil
}

// openRouter opens the pools of m's databases and reads the shards'
// moves, so that the command routes by the map every instance agrees
// on. A database whose moves cannot be read is warned of on warn: what
// it recorded is not known.
func openRouter(ctx context.Context, m *shard.Map, pc shard.PoolConfig, warn io.Writer) (*shard.Router, error) {
	r, err := shard.Open(m, pc)
	if err != nil {
		return nil, err
	}
	if err := r.Refresh(ctx); err != nil {
		fmt.Fprintln(warn, "coffer: warning: the shards' moves may be missing:", err)
	}
	return r, nil
}

// runShardMove is `coffer shard move`: moves a shard (move.Mover), or
// aborts or cleans up its move.
func runShardMove(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shard move", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := configFlag(fs, "config file")
	id := fs.Int("shard", -1, "the shard to move")
	to := fs.String("to", "", "the database to move it to: its name as /v1/status gives it (host:port/dbname), its dbname, or its index in the config")
	abort := fs.Bool("abort", false, "undo the shard's move that has not cut over")
	cleanup := fs.Bool("cleanup", false, "drop the old copy of the shard's verified move")
	unverified := fs.Bool("unverified", false, "with --cleanup: drop it though the move could not be verified")
	lockTimeout := fs.Duration("lock-timeout", time.Second, "how long the cut-over waits for the shard's tables (its writes wait as long) before it tries again")
	catchUp := fs.Duration("catch-up-timeout", time.Minute, "how long to wait for the target to apply the source's changes, before the cut-over and during it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	steps := 0
	for _, b := range []bool{*to != "", *abort, *cleanup} {
		if b {
			steps++
		}
	}
	if *configPath == "" || *id < 0 || steps != 1 || fs.NArg() > 0 || *unverified && !*cleanup {
		fmt.Fprintln(stderr, "coffer shard move: usage: coffer shard move -c CONFIG --shard N (--to DATABASE | --abort | --cleanup [--unverified])")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "coffer shard move:", err)
		return 1
	}
	cfg, m, err := loadConfig(*configPath)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	router, err := shard.Open(m, cfg.Pool)
	if err != nil {
		return fail(err)
	}
	defer router.Close()
	engine, err := migrate.SchemaEngine(m, cfg.Env)
	if err != nil {
		return fail(err)
	}
	mover := &move.Mover{Router: router, Engine: engine, Out: stdout, ConnectTimeout: cfg.Pool.ConnectTimeout,
		LockTimeout: *lockTimeout, CatchUpTimeout: *catchUp}
	switch {
	case *abort:
		err = mover.Abort(ctx, coffer.ShardID(*id))
	case *cleanup:
		err = mover.Cleanup(ctx, coffer.ShardID(*id), *unverified)
	default:
		err = moveAndReport(ctx, mover, coffer.ShardID(*id), *to, stdout)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

func moveAndReport(ctx context.Context, mover *move.Mover, id coffer.ShardID, to string, stdout io.Writer) error {
	rep, err := mover.Move(ctx, id, to)
	if err != nil {
		return err
	}
	for _, c := range rep.Tables {
		fmt.Fprintf(stdout, "shard %d: %s: %d rows, checksum %s, the same on both\n", id, c.Table, c.Rows, c.Sum)
	}
	switch {
	case rep.Unverified:
		fmt.Fprintf(stdout, "shard %d is on %s; its copy could not be verified: compare by hand, then coffer shard move --shard %d --cleanup --unverified\n", id, rep.Move.Target, id)
	case rep.Move.State == shard.MoveVerified:
		fmt.Fprintf(stdout, "shard %d is on %s, verified; the old copy stays on %s until coffer shard move --shard %d --cleanup\n", id, rep.Move.Target, rep.Move.Source, id)
	default:
		return fmt.Errorf("shard %d: the move stopped at %s", id, rep.Move.State)
	}
	return nil
}

// sdbmigrateConfig is what export-sdbmigrate prints: the keys sdbmigrate
// reads.
type sdbmigrateConfig struct {
	shard.Config `yaml:",inline"`
	Env          migrate.Env `yaml:"env,omitempty"`
}

// runShardExport is `coffer shard export-sdbmigrate -c CONFIG`: the
// config's shard keys with manual ranges where the shards are now, for
// sdbmigrate to apply later migrations to each shard where it lives, or
// for coffer's config itself.
func runShardExport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shard export-sdbmigrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := configFlag(fs, "config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *configPath == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "coffer shard export-sdbmigrate: usage: coffer shard export-sdbmigrate -c CONFIG")
		return 2
	}
	cfg, m, err := loadConfig(*configPath)
	if err == nil {
		if m, err = currentMap(cfg, m, stderr); err == nil {
			err = exportSdbmigrate(stdout, cfg, m)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "coffer shard export-sdbmigrate:", err)
		return 1
	}
	return 0
}

// exportSdbmigrate writes cfg's shard keys and env with each database's
// shards as m places them now, in manual mode.
func exportSdbmigrate(w io.Writer, cfg *Config, m *shard.Map) error {
	if moving := m.InProgress(); len(moving) > 0 {
		return fmt.Errorf("shard %d is being moved: export once its move is done or aborted", moving[0].Shard)
	}
	out := sdbmigrateConfig{Config: shard.Config{ShardCount: m.ShardCount(), DistributionMode: "manual"}, Env: cfg.Env}
	placed := 0
	for _, db := range m.Databases() {
		c := db.Config
		c.Shards = []shard.Range{}
		for _, r := range shardRanges(db.Shards) {
			c.Shards = append(c.Shards, shard.Range{Min: int(r.Min), Max: int(r.Max)})
		}
		placed += len(db.Shards)
		out.Databases = append(out.Databases, c)
	}
	if placed != m.ShardCount() {
		return errors.New("some shards moved to databases this config does not list: add them to the config")
	}
	fmt.Fprintln(w, "# Written by coffer shard export-sdbmigrate: where every shard is now.")
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	return enc.Encode(out)
}

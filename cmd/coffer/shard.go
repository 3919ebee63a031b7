package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
)

// runShard prints the shard of each player id: `coffer shard --count N ID…`,
// or with -c CONFIG also the database holding it.
func runShard(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	count := fs.Int("count", 0, "shard_count (not needed with -c)")
	var configPath string
	fs.StringVar(&configPath, "c", "", "config file: also print the database of each shard")
	fs.StringVar(&configPath, "config-file", "", "same as -c")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var m *shard.Map
	if configPath != "" {
		var err error
		if _, m, err = loadConfig(configPath); err != nil {
			fmt.Fprintln(stderr, "coffer shard:", err)
			return 1
		}
		*count = m.ShardCount()
	}
	if *count < 1 || *count > shard.ShardCountMax || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "coffer shard: usage: coffer shard --count N ID... (N in 1…2^31) or coffer shard -c CONFIG ID...")
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
		db := m.DatabaseOf(coffer.ShardID(s))
		fmt.Fprintf(stdout, "%d %d %s\n", id, s, db.Config.Name)
	}
	return 0
}

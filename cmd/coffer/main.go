// Command coffer is the coffer service and its tools, one binary with
// subcommands. main only dispatches; each subcommand lives in its own file.
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one subcommand: it parses its own flags and returns the exit
// code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"audit":   {"check the ledger invariants on every shard", runAudit},
	"bench":   {"measure throughput, latency and cost per operation (--self or --target)", runBench},
	"dev":     {"start a local stack: PostgreSQL, schema and the API, with a dev key", runDev},
	"feed":    {"relay every committed trx to NATS JetStream and webhooks (feed tail: watch the events)", runFeed},
	"serve":   {"serve the API (HTTP/JSON and gRPC) with a config file", runServe},
	"keygen":  {"make a new API key and the hash to put in the config", runKeygen},
	"migrate": {"apply, check or generate schema migrations (sdbmigrate-compatible)", runMigrate},
	"shard":   {"print the shard (and database) of player ids", runShard},
	"torture": {"fault-injection run: kills, freezes and cuts databases and instances under load, then checks no currency was created or lost", runTortureCmd},
}

var commandOrder = []string{"dev", "serve", "feed", "migrate", "audit", "bench", "torture", "shard", "keygen"}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "coffer: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "coffer stores in-game currency. Usage: coffer COMMAND [flags]; coffer COMMAND -h for its flags.")
	fmt.Fprintln(w, "\nCommands:")
	for _, name := range commandOrder {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
}

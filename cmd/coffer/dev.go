package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// runDev is `coffer dev`: a local stack under --data-dir that runs until
// Ctrl-C. A second run reuses the data.
func runDev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", ".coffer", "where the database and the config live")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "coffer dev: starting PostgreSQL under %s/pg ...\n", *dataDir)
	st, err := startLocalStack(ctx, *dataDir, 2, 16, true, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "coffer dev:", err)
		return 1
	}
	fmt.Fprintf(stdout, `
coffer dev is up:
  PostgreSQL  127.0.0.1:%d (user %s, databases coffer_0 and coffer_1; log %s)
  shards      16, 8 per database, coffer's schema applied
  config      %s
  try         coffer shard -c %s 42
              psql "%s"
Press Ctrl-C to stop.
`, st.server.Port(), "coffer", st.server.LogPath(), st.configPath, st.configPath, st.server.DSN("coffer_0"))
	<-ctx.Done()
	fmt.Fprintln(stdout, "\ncoffer dev: stopping PostgreSQL ...")
	if err := st.stop(); err != nil {
		fmt.Fprintln(stderr, "coffer dev:", err)
		return 1
	}
	fmt.Fprintln(stdout, "coffer dev: stopped")
	return 0
}

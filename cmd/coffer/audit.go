package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/signal"
	"sort"
	"time"

	"github.com/cofferhq/coffer/audit"
)

// runAudit is `coffer audit -c CONFIG`: checks the ledger invariants on
// every shard, all of them whatever it finds. Exit 1 if any is broken, 2 on
// bad usage or, with nothing broken, if a check could not run on a shard.
func runAudit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configPath string
	fs.StringVar(&configPath, "c", "", "config file")
	fs.StringVar(&configPath, "config-file", "", "same as -c")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	grace := fs.Duration("hold-grace", 5*time.Minute, "how long past its TTL a pending hold may stay")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if configPath == "" {
		fmt.Fprintln(stderr, "coffer audit: -c CONFIG is required")
		return 2
	}
	cfg, m, err := loadConfig(configPath)
	if err != nil {
		fmt.Fprintln(stderr, "coffer audit:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	router, err := openRouter(ctx, m, cfg.Pool, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "coffer audit:", err)
		return 2
	}
	defer router.Close()
	checker := &audit.Checker{Router: router, HoldGrace: *grace}
	if !*asJSON {
		checker.Progress = stderr
	}
	report, err := checker.Check(ctx)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report)
	} else {
		printReport(stdout, report)
	}
	switch {
	case len(report.Violations) > 0:
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "coffer audit: some checks could not run; the ledger is not fully checked")
		return 2
	}
	return 0
}

func printReport(w io.Writer, r audit.Report) {
	for _, v := range r.Violations {
		fmt.Fprintf(w, "VIOLATION shard %d: %s: %s\n", v.Shard, v.Check, v.Detail)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "NOT CHECKED shard %d: %s: %s\n", f.Shard, f.Check, f.Error)
	}
	keys := make([]string, 0, len(r.Totals))
	for k := range r.Totals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		reserved := r.Reserved[k]
		if reserved == nil {
			reserved = new(big.Int)
		}
		fmt.Fprintf(w, "total ns/currency %s: %d (reserved by pending holds: %d)\n", k, r.Totals[k], reserved)
	}
	fmt.Fprintf(w, "%d shards checked, %d violations", r.Shards, len(r.Violations))
	if len(r.Failures) > 0 {
		fmt.Fprintf(w, ", %d checks could not run", len(r.Failures))
	}
	fmt.Fprintln(w)
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cofferhq/coffer"
)

// runDev is `coffer dev`: a local stack under --data-dir (PostgreSQL with
// two databases and 16 shards, migrated) and the service on --listen with
// the dev config, until Ctrl-C. A second run reuses the data.
func runDev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", ".coffer", "where the database, the config and the log live")
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP address of the API")
	grpcListen := fs.String("grpc-listen", "127.0.0.1:9090", "gRPC address of the API (empty: no gRPC)")
	opsListen := fs.String("ops-listen", "127.0.0.1:8081", "address of the operations listener: /metrics and /debug/pprof/ (empty: none)")
	consoleListen := fs.String("console-listen", "127.0.0.1:8083", "address of the support console (empty: none)")
	apiKey := fs.String("api-key", "", "the development API key (default: a new random key, printed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *apiKey == "" {
		*apiKey = newAPIKey()
	}
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "coffer dev: starting PostgreSQL under %s/pg ...\n", *dataDir)
	cfg := devConfig(*listen, *grpcListen, *apiKey)
	cfg.Listen.Ops, cfg.Listen.Console = *opsListen, *consoleListen
	st, err := startLocalStack(ctx, *dataDir, cfg, stackLayout{servers: 1, databasesEach: 2}, nil, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "coffer dev:", err)
		return 1
	}
	defer st.stop()
	m, err := st.shardMap()
	if err != nil {
		fmt.Fprintln(stderr, "coffer dev:", err)
		return 1
	}
	logFile, err := openPrivate(st.dir + "/coffer.log")
	if err != nil {
		fmt.Fprintln(stderr, "coffer dev:", err)
		return 1
	}
	defer logFile.Close()
	svc := &Main{Config: cfg, Map: m, Logger: newLogger(logFile, "debug")}
	if err := svc.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "coffer dev:", err)
		return 1
	}
	printDevBanner(stdout, st, svc, *apiKey)
	<-ctx.Done()
	fmt.Fprintln(stdout, "\ncoffer dev: stopping ...")
	if code := shutdown(svc, stderr); code != 0 {
		return code
	}
	if err := st.stop(); err != nil {
		fmt.Fprintln(stderr, "coffer dev:", err)
		return 1
	}
	fmt.Fprintln(stdout, "coffer dev: stopped")
	return 0
}

// openPrivate opens a log for appending, readable by its owner only (also
// one made before with a wider mode): a log line may quote a request's
// data.
func openPrivate(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// devConfig is the dev stack's config (README, "What `make run` gives
// you"): namespaces 1 and 2; gold and silver (can be bought) and credits
// (free only); gold→silver at 1:100 and silver→credits at 10:1; one
// client with the dev key, which may also read the instance's status
// (ops), and one for the support console (devSupportKey). No operations
// or console listener: `coffer dev` adds its own.
func devConfig(listen, grpcListen, apiKey string) *Config {
	cfg := DefaultConfig()
	cfg.ShardCount = 16
	cfg.Listen = ListenConfig{HTTP: listen, GRPC: grpcListen}
	cfg.Log.Level = "debug"
	cfg.Currencies = []CurrencyConfig{{ID: 1, Code: "gold", Paid: true}, {ID: 2, Code: "silver", Paid: true}, {ID: 3, Code: "credits"}}
	exchanges := []ExchangeConfig{{From: "gold", To: "silver", Rate: "1:100"}, {From: "silver", To: "credits", Rate: "10:1"}}
	cfg.Namespaces = []NamespaceConfig{{ID: 1, Name: "dev-1", Exchanges: exchanges}, {ID: 2, Name: "dev-2", Exchanges: exchanges}}
	h := coffer.HashKey(apiKey)
	hs := coffer.HashKey(devSupportKey(apiKey))
	// The support client's emitter is apart from the dev client's and
	// from those the tests add (2–5).
	cfg.Clients = []ClientConfig{{Name: "dev", Emitter: 1, KeySHA256: []string{hex.EncodeToString(h[:])},
		Namespaces: []int32{1, 2}, Permissions: []string{"read", "write", "admin", "ops"}},
		{Name: "dev-support", Emitter: 9, KeySHA256: []string{hex.EncodeToString(hs[:])},
			Namespaces: []int32{1, 2}, Permissions: []string{"support", "support_write"}}}
	return cfg
}

// devSupportKey is the key of the dev stack's support client: the dev
// key and a suffix, so that --api-key gives a script both. A support
// client may not write as a game does (coffer.NewClients), hence a
// client of its own.
func devSupportKey(apiKey string) string { return apiKey + "-support" }

// newAPIKey is a random key: 192 bits, URL-safe.
func newAPIKey() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "coffer_" + base64.RawURLEncoding.EncodeToString(b[:])
}

func opsURL(svc *Main) string {
	if svc.OpsAddr == "" {
		return "off"
	}
	return "http://" + svc.OpsAddr
}

// consoleURL is where the console's pages are, or "off".
func consoleURL(svc *Main) string {
	if svc.ConsoleAddr == "" {
		return "off"
	}
	return "http://" + svc.ConsoleAddr + "/console/"
}

func printDevBanner(w io.Writer, st *localStack, svc *Main, key string) {
	base := "http://" + svc.HTTPAddr
	fmt.Fprintf(w, `
coffer dev is up.
  API         %s  (gRPC %s; OpenAPI %s/openapi.json)
  operations  %s  (/metrics, /debug/pprof/)
  console     %s  (sign in with the support key %s)
  API key     %s
  PostgreSQL  127.0.0.1:%d, databases coffer_0 and coffer_1, 16 shards (superuser coffer, password in %s)
  config      %s   (coffer audit -c %s)
  log         %s/coffer.log

Grant 100 gold to player 42, then read the balance:

curl -s -X POST %s/v1/namespaces/1/players/42/transactions -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{"idempotency_key": "welcome-42", "ops": [{"currency": "gold", "amount": 100}], "reason": "welcome"}'
curl -s %s/v1/namespaces/1/players/42/balances -H 'Authorization: Bearer %s'

Press Ctrl-C to stop.
`, base, svc.GRPCAddr, base, opsURL(svc), consoleURL(svc), devSupportKey(key), key, st.servers[0].Port(), st.configPath, st.configPath, st.configPath, st.dir, base, key, base, key)
}

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
)

// TestServeAndMigrateRefuseADatabaseNotUTF8: a database in another
// encoding would make coffer's bounds and the database's disagree, so
// `coffer serve` and `coffer migrate` refuse it at start, naming it and
// its encoding.
func TestServeAndMigrateRefuseADatabaseNotUTF8(t *testing.T) {
	d := pgtest.NewDBEncoded(t, pgtest.Server(t, 0), "LATIN1")
	cfg := writeFile(t, t.TempDir(), "coffer.yaml", fmt.Sprintf(`shard_count: 4
shard_distribution_mode: auto
shard_on_db: 4
databases:
  - {name: %s, host: 127.0.0.1, port: %d, type: postgres, user: %s, password: %s}
listen: {http: "127.0.0.1:0", grpc: "127.0.0.1:0"}
currencies: [{id: 1, code: gold}]
namespaces: [{id: 1}]
clients: [{name: a, emitter: 1, key_sha256: ["%s"], namespaces: [1], permissions: [read]}]
`, d.Name, d.Server.Port(), pgserver.Superuser, pgserver.Password, strings.Repeat("ab", 32)))
	want := fmt.Sprintf(`database #0 %q (127.0.0.1:%d): the database's encoding is LATIN1; coffer needs UTF8`, d.Name, d.Server.Port())
	// serve first: were the refusal missing, migrate would make the
	// schema, and serve then serve.
	for _, cmd := range []string{"serve", "migrate"} {
		if code, _, errOut := run(t, cmd, "-c", cfg); code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("%s: code %d: %s", cmd, code, errOut)
		}
	}
}

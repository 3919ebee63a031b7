package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/migrate"
)

// TestMain starts the test servers. When a test runs `coffer serve`,
// `coffer shard` or `coffer feed` as a child process from inside this binary (bench,
// torture), os.Executable is the test binary: it then acts as coffer
// itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "shard" || os.Args[1] == "feed") {
		os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) == 2 && os.Args[1] == ownImageReplace {
		os.Exit(replaceOwnFile())
	}
	if len(os.Args) == 2 && os.Args[1] == ownImageChild {
		fmt.Println("the parent's build")
		os.Exit(0)
	}
	code := pgtest.Run(m, 2)
	if binary.path != "" {
		os.RemoveAll(filepath.Dir(binary.path))
	}
	os.Exit(code)
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = dispatch(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestShardCommand(t *testing.T) {
	code, out, _ := run(t, "shard", "--count", "16", "0", "42", "9223372036854775807")
	want, err := os.ReadFile("testdata/shard_count16.golden")
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || out != string(want) {
		t.Fatalf("code %d, output:\n%s\nwant:\n%s", code, out, want)
	}
	if code, _, errOut := run(t, "shard", "--count", "16", "--", "-5"); code == 0 || !strings.Contains(errOut, "not a player id") {
		t.Fatalf("negative id: code %d, %s", code, errOut)
	}
}

// dbConfig is a config for two databases on the test server, shards split
// in auto mode.
func dbConfig(t *testing.T, extra string) string {
	t.Helper()
	a, b := pgtest.NewDB(t, 0), pgtest.NewDB(t, 0)
	body := fmt.Sprintf(`shard_count: 4
shard_distribution_mode: auto
shard_on_db: 2
databases:
  - {name: %s, host: 127.0.0.1, port: %d, type: postgres, user: %s, password: %s}
  - {name: %s, host: 127.0.0.1, port: %d, type: postgres, user: %s, password: %s}
%s`, a.Name, a.Server.Port(), pgserver.Superuser, pgserver.Password, b.Name, b.Server.Port(), pgserver.Superuser, pgserver.Password, extra)
	return writeFile(t, t.TempDir(), "coffer.yaml", body)
}

// configDBs are the databases a dbConfig file lists, in its order.
func configDBs(t *testing.T, cfg string) []pgtest.DB {
	t.Helper()
	raw, err := os.ReadFile(cfg)
	must(t, err)
	var dbs []pgtest.DB
	for _, part := range strings.Split(string(raw), "name: ")[1:] {
		dbs = append(dbs, pgtest.DB{Server: pgtest.Server(t, 0), Name: strings.TrimSuffix(strings.Fields(part)[0], ",")})
	}
	return dbs
}

func TestMigrateEmbeddedSchemaAndShardDatabase(t *testing.T) {
	cfg := dbConfig(t, "")
	code, out, errOut := run(t, "migrate", "-c", cfg)
	if code != 0 {
		t.Fatalf("code %d\n%s%s", code, out, errOut)
	}
	files, err := fs.ReadDir(migrate.Schema(), ".")
	must(t, err)
	for _, f := range files {
		if strings.Count(out, f.Name()+" applied") != 2 {
			t.Fatalf("%s not applied to both databases:\n%s", f.Name(), out)
		}
	}
	code, out, _ = run(t, "migrate", "--config-file", cfg, "--action", "status")
	if code != 0 || strings.Count(out, fmt.Sprintf("version %d, %d applied, 0 pending", len(files), len(files))) != 2 {
		t.Fatalf("status: code %d\n%s", code, out)
	}
	code, out, _ = run(t, "shard", "-c", cfg, "42")
	if code != 0 || !strings.HasPrefix(out, "42 2 ") {
		t.Fatalf("shard -c: code %d %q", code, out)
	}
}

func TestMigrateBadInput(t *testing.T) {
	dir := t.TempDir()
	good := dbConfig(t, "")
	migrations := filepath.Join(dir, "m")
	_ = os.Mkdir(migrations, 0o755)
	writeFile(t, migrations, "V0001__TRX_PLAIN__a.sql", "SELECT 1;")
	writeFile(t, migrations, "V0001__TRX_PLAIN__b.sql", "SELECT 2;")
	badName := filepath.Join(dir, "bad")
	_ = os.Mkdir(badName, 0o755)
	writeFile(t, badName, "001_init.sql", "SELECT 1;")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"malformed yaml", []string{"-c", writeFile(t, dir, "bad.yaml", "shard_count: [1\n")}, "config "},
		{"unknown key", []string{"-c", writeFile(t, dir, "unknown.yaml", "shard_count: 1\nshard_cuont: 2\n")}, "unknown key shard_cuont"},
		{"empty", []string{"-c", writeFile(t, dir, "empty.yaml", "")}, "the file is empty"},
		{"missing config", []string{"-c", filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"mysql", []string{"-c", writeFile(t, dir, "mysql.yaml", "shard_count: 1\nshard_distribution_mode: auto\nshard_on_db: 1\ndatabases:\n  - {name: a, host: h, port: 3306, type: mysql, user: u, password: p}\n")}, "mysql is not supported"},
		{"missing dir", []string{"-c", good, "-d", filepath.Join(dir, "nodir")}, "migrations dir"},
		{"duplicate versions", []string{"-c", good, "-d", migrations}, "have the same version 1"},
		{"bad file name", []string{"-c", good, "-d", badName}, "001_init.sql: file name does not match"},
		{"bad action", []string{"-c", good, "-a", "explode"}, "must be apply, status or generate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := run(t, append([]string{"migrate"}, c.args...)...)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Fatalf("code %d, stderr %q, want it to contain %q", code, errOut, c.want)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("error is not one line: %q", errOut)
			}
		})
	}
}

func TestMigrateMissingDatabase(t *testing.T) {
	cfg := dbConfig(t, "")
	raw, _ := os.ReadFile(cfg)
	broken := strings.Replace(string(raw), "name: t", "name: missing_t", 1)
	_ = os.WriteFile(cfg, []byte(broken), 0o644)
	code, _, errOut := run(t, "migrate", "-c", cfg)
	if code == 0 || !strings.Contains(errOut, `database #0 "missing_t`) || !strings.Contains(errOut, "cannot connect") {
		t.Fatalf("code %d: %s", code, errOut)
	}
}

func TestAuditCommand(t *testing.T) {
	cfg := dbConfig(t, "")
	if code, out, errOut := run(t, "migrate", "-c", cfg); code != 0 {
		t.Fatalf("migrate: %s%s", out, errOut)
	}
	code, out, _ := run(t, "audit", "-c", cfg)
	if code != 0 || !strings.Contains(out, "4 shards checked, 0 violations") {
		t.Fatalf("clean audit: code %d\n%s", code, out)
	}
	db := configDBs(t, cfg)[0]
	db.Exec(t, "INSERT INTO lot_0 VALUES (1, 1, 1, 1, false, 10, NULL, 0, now(), 1)")
	code, out, _ = run(t, "audit", "-c", cfg, "--json")
	if code != 1 || !strings.Contains(out, `"check": "lot differs from its ops"`) {
		t.Fatalf("damaged audit: code %d\n%s", code, out)
	}
}

// TestMigrateStateSchemaIsForOwnMigrations: coffer serve reads the state
// of coffer's own schema in public, so a run of that schema with its state
// elsewhere would leave serve refusing every database; it is refused
// before any change.
func TestMigrateStateSchemaIsForOwnMigrations(t *testing.T) {
	cfg := dbConfig(t, "")
	code, _, errOut := run(t, "migrate", "-c", cfg, "--migrate-state-schema", "ops")
	if code != 1 || !strings.Contains(errOut, "--migrate-state-schema is for your own migrations (-d DIR)") {
		t.Fatalf("code %d: %s", code, errOut)
	}
	db := configDBs(t, cfg)[0]
	var n int
	if err := db.Conn(t).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = 'ops'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema ops: %d (%v), want none", n, err)
	}
}

// TestAuditGoesOnPastAWrappedBalance: a balance that wrapped past int64 on
// one shard is a violation like any other, in numeric sums, and the audit
// goes on to the shards after it; it stopped at the first sum that did
// not fit a bigint, so the later shards went unchecked.
func TestAuditGoesOnPastAWrappedBalance(t *testing.T) {
	cfg := dbConfig(t, "")
	if code, out, errOut := run(t, "migrate", "-c", cfg); code != 0 {
		t.Fatalf("migrate: %s%s", out, errOut)
	}
	dbs := configDBs(t, cfg) // shards 0–1, then 2–3
	db := dbs[0]
	db.Exec(t, `INSERT INTO lot_0 VALUES (1, 1, 1, 1, false, 9223372036854775807, NULL, 0, now(), 1),
		(1, 1, 2, 1, false, 10, NULL, 0, now(), 1)`)
	db.Exec(t, `INSERT INTO op_0 (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid,
			balance_after, paid_after, created_at, pos)
		VALUES (1, 0, 1, 1, 1, 1, 'grant', 'change', 9223372036854775807, false, 9223372036854775807, 0, now(), 1),
			(1, 1, 1, 1, 1, 2, 'grant', 'change', 10, false, -9223372036854775799, 0, now(), 2)`)
	dbs[1].Exec(t, "INSERT INTO lot_3 VALUES (1, 3, 1, 1, false, 10, NULL, 0, now(), 1)")
	code, out, errOut := run(t, "audit", "-c", cfg)
	for _, want := range []string{"VIOLATION shard 0: balance_after chain broken: 1 1 1 1 1 9223372036854775807 10 -9223372036854775799",
		"VIOLATION shard 0: balance above its bound", "VIOLATION shard 3: lot differs from its ops",
		"total ns/currency 1/1: 9223372036854775827 ", "4 shards checked"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if code != 1 || strings.Contains(out, "NOT CHECKED") {
		t.Fatalf("audit: code %d, want 1 with every check run\n%s%s", code, out, errOut)
	}
}

func TestMigrateGenerate(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "migrate", "-a", "generate", "-d", dir, "-g", "trx_shard_sql", "--name", "add_notes")
	if code != 0 || !strings.Contains(out, "V0000__TRX_SHARD__add_notes.sql") {
		t.Fatalf("code %d: %s%s", code, out, errOut)
	}
	if code, _, errOut := run(t, "migrate", "-a", "generate", "-g", "trx_shard_sql"); code == 0 || !strings.Contains(errOut, "generate needs -d") {
		t.Fatalf("generate without -d: code %d %s", code, errOut)
	}
}

package migrate

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

// cluster is two fresh databases on two servers with shardCount shards.
type cluster struct {
	dbs []pgtest.DB
	cfg shard.Config
}

func newCluster(t *testing.T, shardCount int) *cluster {
	t.Helper()
	c := &cluster{cfg: shard.Config{ShardCount: shardCount, DistributionMode: "auto", ShardOnDB: shardCount / 2}}
	for i := 0; i < 2; i++ {
		d := pgtest.NewDB(t, i)
		c.dbs = append(c.dbs, d)
		c.cfg.Databases = append(c.cfg.Databases, shard.DatabaseConfig{
			Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(), Type: "postgres",
			User: pgserver.Superuser, Password: pgserver.Password,
		})
	}
	return c
}

func (c *cluster) engine(t *testing.T, files map[string]string, env Env) (*Engine, *bytes.Buffer) {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, body := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(body)}
	}
	ms, err := Load(fsys, "test")
	if err != nil {
		t.Fatal(err)
	}
	m, err := shard.NewMap(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := &bytes.Buffer{}
	return &Engine{Map: m, Env: env, Migrations: ms, Out: out}, out
}

// count returns the result of a count(*) query on database i.
func (c *cluster) count(t *testing.T, i int, sql string) int {
	t.Helper()
	var n int
	if err := c.dbs[i].Conn(t).QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (c *cluster) tables(t *testing.T, i int, like string) int {
	return c.count(t, i, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE '"+like+"'")
}

var all = Options{TargetVersion: -1}

var basic = map[string]string{
	"V0000__TRX_PLAIN__types.sql":   "CREATE TABLE plain_t (id int);",
	"V0001__TRX_SHARD__tables.sql":  "CREATE TABLE item_<shard_id> (id bigint, region text DEFAULT '<region>');\nINSERT INTO item_<shard_id> VALUES (<shard_id>);",
	"V0002__NOTRX_SHARD__index.sql": "CREATE INDEX CONCURRENTLY item_<shard_id>_id ON item_<shard_id> (id);",
}

var regionEnv = Env{"region": {Type: "str", Value: "eu"}}

func TestApplyAndReapply(t *testing.T) {
	c := newCluster(t, 8)
	e, out := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if n := c.tables(t, i, "item_%"); n != 4 {
			t.Errorf("db %d: %d shard tables, want 4", i, n)
		}
		if n := c.count(t, i, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'item_%_id'"); n != 4 {
			t.Errorf("db %d: %d concurrent indexes, want 4", i, n)
		}
		if n := c.count(t, i, "SELECT count(*) FROM _sdbmigrate_migrations"); n != 3 {
			t.Errorf("db %d: %d migrations recorded, want 3", i, n)
		}
	}
	// Shard 5 is on the second database (auto: 4 per database); its row
	// carries the env value.
	if n := c.count(t, 1, "SELECT count(*) FROM item_5 WHERE id = 5 AND region = 'eu'"); n != 1 {
		t.Errorf("item_5 lacks its substituted row")
	}
	if !strings.Contains(out.String(), "V0001__TRX_SHARD__tables.sql applied to shards 0-3") {
		t.Errorf("progress output lacks a per-migration line:\n%s", out)
	}

	out.Reset()
	if err := e.Apply(context.Background(), all); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if strings.Count(out.String(), "up to date at version 2") != 2 {
		t.Errorf("second apply was not a no-op:\n%s", out)
	}
	if n := c.count(t, 0, "SELECT count(*) FROM item_0"); n != 1 {
		t.Errorf("second apply ran the migration again: %d rows", n)
	}
}

func TestStateTablesInSdbmigrateFormat(t *testing.T) {
	c := newCluster(t, 8)
	e, _ := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	var ids, value, typ string
	var count int
	conn := c.dbs[1].Conn(t)
	ctx := context.Background()
	if err := conn.QueryRow(ctx, "SELECT shard_count, shard_ids::text FROM _sdbmigrate_sharding_state WHERE id = 0").Scan(&count, &ids); err != nil {
		t.Fatal(err)
	}
	if count != 8 || ids != "[4,5,6,7]" {
		t.Errorf("sharding state = %d %s, want 8 [4,5,6,7]", count, ids)
	}
	if err := conn.QueryRow(ctx, "SELECT value, type FROM _sdbmigrate_env WHERE key = 'region'").Scan(&value, &typ); err != nil || value != "eu" || typ != "str" {
		t.Errorf("env = %q %q %v", value, typ, err)
	}
	// The column types sdbmigrate declares.
	want := map[string]string{
		"_sdbmigrate_migrations.version":        "bigint",
		"_sdbmigrate_migrations.migration_name": "text",
		"_sdbmigrate_migrations.applied":        "timestamp without time zone",
		"_sdbmigrate_sharding_state.shard_ids":  "json",
		"_sdbmigrate_env.key":                   "character varying",
	}
	for col, wantType := range want {
		parts := strings.Split(col, ".")
		var got string
		if err := conn.QueryRow(ctx, "SELECT data_type FROM information_schema.columns WHERE table_name = $1 AND column_name = $2", parts[0], parts[1]).Scan(&got); err != nil || got != wantType {
			t.Errorf("%s is %q (%v), want %q", col, got, err, wantType)
		}
	}
}

// TestContinuesAnSdbmigrateDatabase writes the state as sdbmigrate leaves it
// (no checksum table) and checks that coffer applies only what is new.
func TestContinuesAnSdbmigrateDatabase(t *testing.T) {
	c := newCluster(t, 8)
	for i, d := range c.dbs {
		// As sdbmigrate records them: in the order of the config's
		// ranges, which need not be ascending.
		ids := []string{"[0, 1, 2, 3]", "[6, 7, 4, 5]"}[i]
		d.Exec(t, `CREATE TABLE _sdbmigrate_migrations (version BIGINT NOT NULL PRIMARY KEY, migration_name TEXT NOT NULL, applied TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW());
			CREATE TABLE _sdbmigrate_sharding_state (id INTEGER NOT NULL PRIMARY KEY, shard_count INTEGER NOT NULL, shard_ids JSON NOT NULL, created TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW(), updated TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW());
			CREATE TABLE _sdbmigrate_env (key varchar(128) PRIMARY KEY, value TEXT NOT NULL, type varchar(128) NOT NULL DEFAULT 'str', created TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW(), updated TIMESTAMP WITHOUT TIME ZONE DEFAULT NOW());
			INSERT INTO _sdbmigrate_sharding_state (id, shard_count, shard_ids) VALUES (0, 8, '`+ids+`');
			INSERT INTO _sdbmigrate_env (key, value, type) VALUES ('region', 'eu', 'str');
			CREATE TABLE plain_t (id int);
			INSERT INTO _sdbmigrate_migrations (version, migration_name) VALUES (0, 'V0000__TRX_PLAIN__types.sql');`)
	}
	e, _ := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	if n := c.tables(t, 0, "item_%"); n != 4 {
		t.Errorf("%d shard tables, want 4", n)
	}
	if n := c.count(t, 0, "SELECT count(*) FROM _coffer_migration_checksums"); n != 3 {
		t.Errorf("%d checksums recorded, want 3 (one for the sdbmigrate-applied migration)", n)
	}
}

func TestDryRunLeavesNothing(t *testing.T) {
	c := newCluster(t, 8)
	e, out := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), Options{DryRun: true, TargetVersion: -1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if n := c.tables(t, i, "%"); n != 0 {
			t.Errorf("db %d: dry run left %d tables", i, n)
		}
	}
	if !strings.Contains(out.String(), "CREATE INDEX CONCURRENTLY item_0_id") {
		t.Errorf("dry run did not print the NOTRX statements:\n%s", out)
	}
}

func TestFailedTrxMigrationRollsBack(t *testing.T) {
	c := newCluster(t, 8)
	files := map[string]string{
		"V0000__TRX_PLAIN__types.sql":  "CREATE TABLE plain_t (id int);",
		"V0001__TRX_SHARD__tables.sql": "CREATE TABLE item_<shard_id> (id bigint);\n\nSELECT no_such_column FROM item_<shard_id>;",
	}
	e, _ := c.engine(t, files, nil)
	err := e.Apply(context.Background(), all)
	if err == nil || !strings.Contains(err.Error(), "V0001__TRX_SHARD__tables.sql: shard 0, statement at line 3") || !strings.Contains(err.Error(), "stays at version 0") {
		t.Fatalf("err = %v", err)
	}
	if n := c.tables(t, 0, "item_%"); n != 0 {
		t.Errorf("failed migration left %d tables", n)
	}
	if n := c.count(t, 0, "SELECT count(*) FROM _sdbmigrate_migrations"); n != 1 {
		t.Errorf("%d migrations recorded, want 1", n)
	}
}

func TestTargetVersion(t *testing.T) {
	c := newCluster(t, 8)
	e, _ := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), Options{TargetVersion: 1}); err != nil {
		t.Fatal(err)
	}
	if n := c.count(t, 0, "SELECT max(version) FROM _sdbmigrate_migrations"); n != 1 {
		t.Errorf("version %d, want 1", n)
	}
	if n := c.count(t, 0, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'item_%_id'"); n != 0 {
		t.Errorf("migration past the target was applied")
	}
}

func TestEnvFrozenUnlessForced(t *testing.T) {
	c := newCluster(t, 8)
	e, _ := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	changed := map[string]string{"V0003__TRX_PLAIN__more.sql": "CREATE TABLE more_t (region text DEFAULT '<region>');"}
	for k, v := range basic {
		changed[k] = v
	}
	e, _ = c.engine(t, changed, Env{"region": {Value: "us"}})
	err := e.Apply(context.Background(), all)
	if err == nil || !strings.Contains(err.Error(), `env.region is "eu" (str) in the database but "us" (str) in the config`) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("err = %v", err)
	}
	if n := c.tables(t, 0, "more_t"); n != 0 {
		t.Fatal("a refused run applied a migration")
	}
	if err := e.Apply(context.Background(), Options{TargetVersion: -1, ForceUpdateEnv: true}); err != nil {
		t.Fatal(err)
	}
	if n := c.count(t, 0, "SELECT count(*) FROM _sdbmigrate_env WHERE key = 'region' AND value = 'us'"); n != 1 {
		t.Error("forced env not stored")
	}
	if n := c.count(t, 0, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'more_t' AND column_default LIKE '%us%'"); n != 1 {
		t.Error("new migration did not get the new env value")
	}
}

func TestEditedMigrationRefused(t *testing.T) {
	c := newCluster(t, 8)
	e, _ := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), Options{TargetVersion: 1}); err != nil {
		t.Fatal(err)
	}
	edited := map[string]string{}
	for k, v := range basic {
		edited[k] = v
	}
	edited["V0000__TRX_PLAIN__types.sql"] = "CREATE TABLE plain_t (id bigint);"
	e, _ = c.engine(t, edited, regionEnv)
	err := e.Apply(context.Background(), all)
	if err == nil || !strings.Contains(err.Error(), "V0000__TRX_PLAIN__types.sql was edited after it was applied") {
		t.Fatalf("err = %v", err)
	}
	if n := c.count(t, 0, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'item_%_id'"); n != 0 {
		t.Error("the pending migration ran despite the refusal")
	}
}

func TestShardCountChangeRefused(t *testing.T) {
	c := newCluster(t, 8)
	e, _ := c.engine(t, basic, regionEnv)
	if err := e.Apply(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	c.cfg.ShardCount, c.cfg.ShardOnDB = 16, 8
	e, _ = c.engine(t, basic, regionEnv)
	err := e.Apply(context.Background(), all)
	if err == nil || !strings.Contains(err.Error(), "shard_count is 8 in the database but 16 in the config") {
		t.Fatalf("err = %v", err)
	}
}

func TestOutOfOrderMigrationRefused(t *testing.T) {
	c := newCluster(t, 8)
	e, _ := c.engine(t, map[string]string{"V0002__TRX_PLAIN__b.sql": "SELECT 1"}, nil)
	if err := e.Apply(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	e, _ = c.engine(t, map[string]string{"V0001__TRX_PLAIN__a.sql": "SELECT 1", "V0002__TRX_PLAIN__b.sql": "SELECT 1"}, nil)
	if err := e.Apply(context.Background(), all); err == nil || !strings.Contains(err.Error(), "V0001__TRX_PLAIN__a.sql is not applied but the database is already at version 2") {
		t.Fatalf("err = %v", err)
	}
}

func TestWrongCredentialsNamed(t *testing.T) {
	c := newCluster(t, 8)
	c.cfg.Databases[1].Password = "wrong"
	e, _ := c.engine(t, basic, regionEnv)
	err := e.Apply(context.Background(), all)
	if err == nil || !strings.Contains(err.Error(), "database #1") || !strings.Contains(err.Error(), "cannot connect") {
		t.Fatalf("err = %v", err)
	}
	if n := c.tables(t, 0, "%"); n != 0 {
		t.Errorf("database #0 was changed although #1 was unreachable")
	}
}

func TestLoadRejects(t *testing.T) {
	cases := map[string]fstest.MapFS{
		"does not match":       {"V1_TRX_PLAIN_x.sql": {}},
		"same version 1":       {"V0001__TRX_PLAIN__a.sql": {}, "V0001__TRX_SHARD__b.sql": {}},
		"Python migrations":    {"V0001__TRX_PLAIN__a.py": {}},
		"must be TRX or NOTRX": {"V0001__TX_PLAIN__a.sql": {}},
	}
	for want, fsys := range cases {
		if _, err := Load(fsys, "dir"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load = %v, want %q", err, want)
		}
	}
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "V0007__TRX_PLAIN__a.sql"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path, err := Generate(dir, "notrx_shard_sql", "add_index")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "V0008__NOTRX_SHARD__add_index.sql" {
		t.Fatalf("generated %s", path)
	}
	if _, err := Load(os.DirFS(dir), dir); err != nil {
		t.Fatalf("generated file does not load: %v", err)
	}
}

// TestCofferSchema applies coffer's embedded schema to 16 shards on two
// servers, twice.
func TestCofferSchema(t *testing.T) {
	c := newCluster(t, 16)
	m, _ := shard.NewMap(c.cfg)
	e, err := SchemaEngine(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for run := 0; run < 2; run++ {
		if err := e.Apply(context.Background(), all); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	for i := 0; i < 2; i++ {
		for _, table := range []string{"trx_%", "op_%", "lot_%", "balance_%"} {
			if n := c.tables(t, i, table); n != 8 {
				t.Errorf("db %d: %d %s tables, want 8", i, n, table)
			}
		}
	}
	if n := c.count(t, 0, "SELECT count(*) FROM pg_class WHERE relname = 'lot_3' AND reloptions::text LIKE '%fillfactor=80%'"); n != 1 {
		t.Error("lot table lacks the fillfactor of hot_storage_params")
	}
}

func TestFailedNotrxMigrationKeepsEarlierStatements(t *testing.T) {
	c := newCluster(t, 8)
	files := map[string]string{
		"V0000__TRX_PLAIN__t.sql":   "CREATE TABLE t (id int);",
		"V0001__NOTRX_PLAIN__i.sql": "CREATE INDEX CONCURRENTLY t_id ON t (id);\nCREATE INDEX CONCURRENTLY t_x ON t (no_such_column);",
	}
	e, _ := c.engine(t, files, nil)
	err := e.Apply(context.Background(), all)
	if err == nil || !strings.Contains(err.Error(), "V0001__NOTRX_PLAIN__i.sql: statement at line 2") || !strings.Contains(err.Error(), "NOTRX migration") {
		t.Fatalf("err = %v", err)
	}
	if n := c.count(t, 0, "SELECT count(*) FROM pg_indexes WHERE indexname = 't_id'"); n != 1 {
		t.Error("the statement before the failing one was not kept")
	}
	if n := c.count(t, 0, "SELECT max(version) FROM _sdbmigrate_migrations"); n != 0 {
		t.Errorf("failed NOTRX migration recorded as applied (version %d)", n)
	}
}

// Two instances starting together both migrate: the second waits for the
// first, then finds nothing left to do. A run waiting inside
// pg_advisory_lock would hold a snapshot the first run's CREATE INDEX
// CONCURRENTLY waits for, and PostgreSQL would end one as a deadlock.
func TestConcurrentAppliesBothSucceed(t *testing.T) {
	c := newCluster(t, 8)
	files := map[string]string{
		"V0000__TRX_PLAIN__t.sql":         "CREATE TABLE t (id int);",
		"V0001__NOTRX_PLAIN__slow.sql":    "SELECT pg_sleep(1.5);",
		"V0002__NOTRX_SHARD__index.sql":   "CREATE TABLE item_<shard_id> (id bigint);\nCREATE INDEX CONCURRENTLY item_<shard_id>_id ON item_<shard_id> (id);",
		"V0003__NOTRX_PLAIN__t_index.sql": "CREATE INDEX CONCURRENTLY t_id ON t (id);",
	}
	errs := make(chan error, 2)
	outs := make([]*bytes.Buffer, 2)
	for i := range outs {
		e, out := c.engine(t, files, nil)
		outs[i] = out
		go func() { errs <- e.Apply(context.Background(), all) }()
	}
	for range outs {
		if err := <-errs; err != nil {
			t.Errorf("apply: %v", err)
		}
	}
	waited := 0
	for _, out := range outs {
		if strings.Contains(out.String(), "waiting for another coffer migrate to finish (backend pid ") {
			waited++
		}
	}
	if waited == 0 {
		t.Errorf("neither run waited for the other:\n%s\n%s", outs[0], outs[1])
	}
	for i := 0; i < 2; i++ {
		if n := c.count(t, i, "SELECT count(*) FROM _sdbmigrate_migrations"); n != 4 {
			t.Errorf("db %d: %d migrations recorded, want 4", i, n)
		}
	}
}

// Status answers at once while another run holds the migration lock, and
// says so.
func TestStatusDoesNotWaitForARunningMigrate(t *testing.T) {
	c := newCluster(t, 8)
	e, _ := c.engine(t, basic, regionEnv)
	holder := c.dbs[0].Conn(t)
	if _, err := holder.Exec(context.Background(), "SELECT pg_advisory_lock($1)", advisoryLockKey); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st[0].Busy || st[1].Busy {
		t.Errorf("busy = %v, %v; want true, false", st[0].Busy, st[1].Busy)
	}
	if !strings.Contains(st[0].String(), "another coffer migrate is running here") {
		t.Errorf("status does not say a migrate is running:\n%s", st[0])
	}
}

// TestEnvRejects: keys the engine cannot substitute, or substitutes
// itself, and values not of their type are refused before any change. A
// key named shard_id would replace <shard_id> with one value, so a SHARD
// migration would run the same SQL on every shard.
func TestEnvRejects(t *testing.T) {
	cases := map[string]Env{
		`key "shard_id" is reserved`:  {"shard_id": {Type: "int", Value: "1"}},
		`key "db_schema" is reserved`: {"db_schema": {Type: "str", Value: "x"}},
		"cannot be used as <key>":     {"a<b": {Type: "str", Value: "x"}},
		"is not an int":               {"n": {Type: "int", Value: "x"}},
	}
	for want, env := range cases {
		if err := env.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
}

// TestDatabaseListedTwiceIsRefused: two entries of the config that name
// the same database, spelt otherwise (127.0.0.1, then localhost), would
// have the run wait for its own migration lock forever; it is refused,
// before any change.
func TestDatabaseListedTwiceIsRefused(t *testing.T) {
	c := newCluster(t, 8)
	twice := c.cfg.Databases[0]
	twice.Host = "localhost"
	c.cfg.Databases[1] = twice
	e, _ := c.engine(t, basic, regionEnv)
	tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.Apply(tctx, all)
	if err == nil || !strings.Contains(err.Error(), "the config lists this database twice") {
		t.Fatalf("err = %v", err)
	}
	if n := c.tables(t, 0, "item_%"); n != 0 {
		t.Errorf("%d shard tables made before the refusal", n)
	}
}

// TestDatabaseNotUTF8IsRefused: a database in another encoding is refused
// by name, with its encoding, before any change: by a migration (and its
// other databases are left as they were) and by a server's check.
func TestDatabaseNotUTF8IsRefused(t *testing.T) {
	for _, enc := range []string{"LATIN1", "SQL_ASCII"} {
		c := newCluster(t, 8)
		d := pgtest.NewDBEncoded(t, c.dbs[1].Server, enc)
		c.cfg.Databases[1].Name = d.Name
		e, _ := c.engine(t, basic, regionEnv)
		want := `database #1 "` + d.Name + `" (127.0.0.1:` + strconv.Itoa(d.Server.Port()) + `): the database's encoding is ` + enc + `; coffer needs UTF8`
		if err := e.Apply(context.Background(), all); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: migrate: %v", enc, err)
		}
		if n := c.tables(t, 0, "%"); n != 0 {
			t.Errorf("%s: database #0 was changed", enc)
		}
		err := e.Verify(context.Background(), e.Map.Databases()[1])
		if err == nil || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: verify: %v", enc, err)
		}
		st, err := e.Status(context.Background())
		if err != nil || len(st) != 2 || st[0].Problem != "" || !strings.Contains(st[1].Problem, "the database's encoding is "+enc) {
			t.Fatalf("%s: status: %+v, %v; want the encoding as database #1's problem", enc, st, err)
		}
	}
}
